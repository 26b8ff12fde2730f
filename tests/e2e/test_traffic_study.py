"""Issue 35 acceptance, end to end: traffic shaped like the user's. A traffic file of 50 requests
with mixed prompt and output lengths, measured by a real study of a real server process
(tests/fake_openai_server.py through the command backend): every request asks for its own
output length and gets it (the measured lengths are the file's), the report shows the
distribution measured, and export's provenance carries it. (A malformed line is one error
line with its line number and exit 2: tests/config/test_traffic.py, through the command line.)"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from conftest import write_job
from orchestrator import cli
from orchestrator.config.job import load_job
from orchestrator.driver.in_process import InProcessExecutor
from orchestrator.driver.run import StudyDriver
from orchestrator.study.history import trial_rows
from orchestrator.study.storage import open_study

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
    assert (lengths.input.low, lengths.input.high) == (min(w for w, _ in asked), max(w for w, _ in asked))
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
