"""Issue 35 acceptance, end to end: traffic shaped like the user's. A traffic file of 50 requests
with mixed prompt and output lengths, measured by a real study of a real server process
(tests/fake_openai_server.py through the command backend): every request asks for its own
output length and gets it (the measured lengths are the file's), the report shows the
distribution measured, and export's provenance carries it. (A malformed line is one error
line with its line number and exit 2: tests/config/test_traffic.py, through the command line.)

Issue 48: a request the server refuses as longer than its limit (vLLM's HTTP 400, "This model's
maximum context length is ...") is the job's error, never the baseline's nor a config's: `run`
stops with one line saying what to change, exit 2, no config banned nor failed, no study left
to clash with the fixed job, which then measures the baseline."""

from __future__ import annotations

import io
import json
import re
from contextlib import redirect_stderr
from pathlib import Path

import pytest

from conftest import write_job
from logtext import log_lines
from orchestrator import cli
from orchestrator.config.job import load_job
from orchestrator.driver.in_process import InProcessExecutor
from orchestrator.driver.run import StudyDriver
from orchestrator.study.evidence.history import trial_rows
from orchestrator.study.storage.storage import open_study

pytestmark = pytest.mark.slow

FAKE = str(Path(__file__).resolve().parents[1] / "fake_openai_server.py")
WORDS = "the harbor town woke slowly on the first cold morning of the year".split()


def traffic_file(path: Path) -> list[tuple[int, int]]:
    """50 requests: prompts of 1 to 197 words, outputs of 2 to 50 tokens, in no order."""
    out = []
    with path.open("w") as fh:
        for i in range(50):
            words, tokens = 1 + (i * 37) % 197, 2 + (i * 13) % 49
            fh.write(json.dumps({"prompt": " ".join(WORDS[k % len(WORDS)] for k in range(words)),
                                 "output_tokens": tokens, "id": i}) + "\n")
            out.append((words, tokens))
    return out


def test_a_studys_requests_have_the_traffic_files_lengths_and_the_report_shows_them(tmp_path, capsys):
    asked = traffic_file(tmp_path / "traffic.jsonl")
    argv = ["{python}", FAKE, "--host", "{host}", "--port", "{port}", "--token-delay", "0.001"]
    job_path = write_job(tmp_path, study="traffic", space_text="params:\n  backend.spec: {choices: [0]}\n",
                         backend={"kind": "command", "settings": {"argv": argv + ["--spec-tokens", "{backend.spec}"],
                                                                  "model_name": "fake"}},
                         baseline={"backend.spec": 0}, budget={"trials": 1}, objective={"concurrency": [1, 4]},
                         bench={"traffic": "traffic.jsonl", "warmup": 1, "repeats": 1, "max_repeats": 1, "waves": 2},
                         correctness={"check_tokens": 8, "prompts": ["The quick brown fox"], "logprobs": False})
    job = load_job(job_path)
    assert len(job.bench.prompts) == 50 and sorted(job.bench.output_lengths) == sorted(t for _, t in asked)
    StudyDriver(job, executor=InProcessExecutor(), out=io.StringIO()).run()
    (row,) = [r for r in trial_rows(open_study(job, create=False)) if r.counted]
    assert row.state == "COMPLETE", row.failure_reason
    lengths = row.measurement.lengths
    assert lengths.mismatched == 0 and not [w for w in row.warnings if "another length" in w]
    assert row.at(1).requests == 50  # level 1: every request of the file once a round
    assert (lengths.output.low, lengths.output.high) == (min(t for _, t in asked), max(t for _, t in asked))
    # the server's count of each prompt: its words, and the line each request begins with (one word to this server)
    assert (lengths.input.low, lengths.input.high) == (min(w for w, _ in asked) + 1, max(w for w, _ in asked) + 1)
    # level 1 asked each request once, level 4 went through them in turn: every request counted
    assert lengths.output.n == 50 + row.at(4).requests

    assert cli.main(["report", str(job_path)]) == 0
    md = (job.report_dir / "report.md").read_text()
    assert "## Traffic" in md and "traffic.jsonl: 50 of 50 requests (asked output tokens 2-50)" in md
    out = lengths.output
    assert f"| output tokens | {out.low:.0f} | {out.p50:.0f} | {out.p90:.0f} | {out.p99:.0f} | {out.high:.0f} |" in md
    capsys.readouterr()
    assert cli.main(["export", str(job_path), "--format", "json"]) == 0
    prov = json.loads(capsys.readouterr().out)["provenance"]
    assert prov["traffic"]["measured"]["output"]["high"] == 50 and prov["traffic"]["measured"]["mismatched"] == 0


def run_cli(*argv: str) -> tuple[int, str]:
    err = io.StringIO()
    with redirect_stderr(err):
        code = cli.main(list(argv))
    return code, err.getvalue()


def test_a_request_longer_than_the_servers_limit_stops_the_run_as_the_jobs_error(tmp_path, ray_local,
                                                                              no_leftover_servers):
    """The server's limit is in the command's own argv, and the traffic's long request is words of
    one letter: `validate`'s estimate (its characters / 4: 50 tokens) is under the limit, the
    server's count (101 tokens) over it. The baseline's first request is refused with vLLM's 400."""
    words = " ".join(chr(ord("a") + i % 26) for i in range(100))
    (tmp_path / "traffic.jsonl").write_text("".join(json.dumps({"prompt": p, "output_tokens": 8}) + "\n"
                                                    for p in ("short question", words, "another one")))
    argv = ["{python}", FAKE, "--host", "{host}", "--port", "{port}", "--token-delay", "0.001", "--spec-tokens",
            "{backend.spec}", "--max-model-len", "64"]
    sections = dict(study="too-long", space_text="params:\n  backend.spec: {choices: [0, 2]}\n",
                    baseline={"backend.spec": 0}, budget={"trials": 2}, objective={"concurrency": [1]},
                    bench={"traffic": "traffic.jsonl", "warmup": 1, "repeats": 1, "max_repeats": 1},
                    correctness={"check_tokens": 8, "prompts": ["The quick brown fox"], "logprobs": False})
    job_path = write_job(tmp_path, backend={"kind": "command", "settings": {"argv": argv, "model_name": "fake"}},
                         **sections)
    assert run_cli("validate", str(job_path))[0] == 0
    code, err = run_cli("run", str(job_path))
    said = log_lines(err)
    assert code == 2 and "Traceback" not in err, err
    assert said[-1].startswith(f"ncclsweep: error: {job_path}: bench.traffic: stopping: #0: the server refused a "
                               "request as longer than its limit ("), said[-1]
    assert re.search(r"This model's maximum context length is 64 tokens\. However, your request has 10\d input "
                     r"tokens\. Please reduce the length of the input messages\.\)", said[-1]), said[-1]  # vLLM's 400
    assert "raise the server's limit (its --max-model-len or --context-length)" in said[-1], said[-1]
    assert not [line for line in said if "golden reference" in line or "banned" in line], said  # not the baseline's
    job = load_job(job_path)
    assert not job.journal_path.exists()  # no trial held against a config, no study left to refuse the fixed job

    fixed = [w if w != "64" else "4096" for w in argv]  # the fix the line names: the server's limit raised
    job_path = write_job(tmp_path, backend={"kind": "command", "settings": {"argv": fixed, "model_name": "fake"}},
                         **sections)
    code, err = run_cli("run", str(job_path))
    assert code == 0, err
    rows = trial_rows(open_study(load_job(job_path), create=False))
    assert [r.state for r in rows if r.counted] == ["COMPLETE", "COMPLETE"] and rows[0].is_baseline, rows
