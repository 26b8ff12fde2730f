"""Traffic files: requests with their own prompt and output length (JSONL or ShareGPT), the
study's deterministic sample, and a bad file as one line naming the file and the line, exit 2."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, write_job
from orchestrator.config import traffic
from orchestrator.config.job import load_job
from orchestrator.core.errors import BadInput


def lines(*items) -> str:
    return "".join(json.dumps(item) + "\n" for item in items)


def test_prompt_lines_and_sharegpt_conversations_mix(tmp_path):
    path = tmp_path / "t.jsonl"
    reply = "x" * 400  # 100 tokens at 4 characters a token
    path.write_text(lines({"prompt": "short question", "output_tokens": 12, "id": 7},
                          {"prompt": "no length given"},
                          {"conversations": [{"from": "system", "value": "be nice"},
                                             {"from": "human", "value": "tell me a story"},
                                             {"from": "gpt", "value": reply}]},
                          {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]},
                          {"conversations": [{"from": "human", "value": "never answered"}]}))
    got = traffic.load(path, file="job.yaml", study="s", sample=64, default_output=32)
    pairs = dict(zip(got.prompts, got.output_tokens))
    assert pairs == {"short question": 12, "no length given": 32, "tell me a story": 100, "hi": 2}  # at least 2
    assert got.in_file == 4 and got.skipped == 1  # the conversation without a reply is skipped, counted
    assert "4 of 4 requests" in got.describe() and "1 conversation(s) without a reply skipped" in got.describe()


def test_a_json_array_reads_like_json_lines(tmp_path):
    path = tmp_path / "sharegpt.json"
    conversation = [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a" * 40}]
    path.write_text(json.dumps([{"conversations": conversation}, {"prompt": "p", "output_tokens": 5}], indent=1))
    got = traffic.load(path, file="job.yaml", study="s", sample=64, default_output=32)
    assert sorted(zip(got.prompts, got.output_tokens)) == [("p", 5), ("q", 10)]


def test_the_sample_is_the_same_for_every_run_of_a_study_and_another_for_another_study(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(lines(*({"prompt": f"request {i}", "output_tokens": 2 + i} for i in range(300))))
    one = traffic.load(path, file=None, study="alpha", sample=50, default_output=8)
    again = traffic.load(path, file=None, study="alpha", sample=50, default_output=8)
    other = traffic.load(path, file=None, study="beta", sample=50, default_output=8)
    assert len(one.prompts) == 50 and one == again and one.prompts != other.prompts
    assert all(n == 2 + int(p.split()[1]) for p, n in zip(one.prompts, one.output_tokens))  # pairs kept together


def test_the_sample_keeps_the_traces_long_tail_for_every_study(tmp_path):
    """The issue's files: two 30,000-character prompts among short ones. A random draw of 64 kept one of
    the two from 65 lines, and from 200 lines most study names kept neither. Drawn one per 1/64 of the
    lengths, the longest always: both from 65 lines, the longest from 200 for every name, and the
    sample's lengths spread as the file's; the description names the longest and its line."""
    long = [{"prompt": "x" * 30000, "output_tokens": 64}, {"prompt": "y" * 28000, "output_tokens": 64}]
    for n in (65, 200):
        short = [{"prompt": "w" * (40 + 7 * (i % 50)), "output_tokens": 8 + i % 40} for i in range(n - 2)]
        rows = short[:n // 3] + long[:1] + short[n // 3:2 * n // 3] + long[1:] + short[2 * n // 3:]  # lines 22, 44
        path = tmp_path / f"t{n}.jsonl"
        path.write_text(lines(*rows))
        lengths = sorted(len(r["prompt"]) // 4 + r["output_tokens"] for r in rows)
        for study in ("alpha", "beta", "gamma", "delta", "epsilon"):
            got = traffic.load(path, file=None, study=study, sample=64, default_output=8)
            kept = [p for p in got.prompts if len(p) >= 28000]
            assert len(kept) == (2 if n == 65 else 1) and "x" * 30000 in kept, (n, study)
            drawn = sorted(len(p) // 4 + o for p, o in zip(got.prompts, got.output_tokens))
            assert lengths[n // 4] <= statistics.median(drawn) <= lengths[3 * n // 4], (n, study)  # the bulk too
            if n == 200:
                assert "64 of 200 requests, one from each 1/64 of the lengths" in got.describe()
                assert f"the longest, line {n // 3 + 1}, about 7564 tokens, kept" in got.describe(), got.describe()


@pytest.mark.parametrize("content, says", [
    ("", "holds no request"),
    (lines({"prompt": "ok"}) + "{not json\n", "line 2 is not JSON"),
    (lines({"prompt": "ok"}, ["a list"]), "line 2 is not a JSON object"),
    (lines({"prompt": "ok"}, {"prompt": "ok", "output_tokens": 0}), "line 2: 'output_tokens' must be an integer"),
    (lines({"prompt": ""}), "line 1: 'prompt' must be a non-empty string"),
    (lines({"text": "neither"}), "line 1 has neither 'prompt'"),
    (lines({"conversations": [{"speaker": "x"}]}), "line 1: a conversation turn must be"),
    (lines({"prompt": "a", "timestamp": 1.0}, {"prompt": "b"}), "line 2 has no 'timestamp' where other requests"),
    (lines({"prompt": "a", "timestamp": "noon"}), "line 1: 'timestamp' must be a number of seconds, not 'noon'"),
])
def test_a_bad_traffic_file_names_the_line(tmp_path, content, says):
    path = tmp_path / "t.jsonl"
    path.write_text(content)
    with pytest.raises(BadInput) as info:
        traffic.load(path, file="job.yaml", study="s", sample=64, default_output=8)
    assert says in str(info.value) and "job.yaml: bench.traffic: " in str(info.value)


def test_a_malformed_line_is_one_error_line_and_exit_2_and_nothing_written(tmp_path):
    (tmp_path / "traffic.jsonl").write_text(lines(*({"prompt": f"p{i}", "output_tokens": 4} for i in range(6)))
                                            + '{"prompt": "seventh", "output_tokens": \n')
    job = write_job(tmp_path, bench={"traffic": "traffic.jsonl", "output_tokens": 8})
    before = sorted(p.name for p in tmp_path.rglob("*"))
    for command in (["validate", str(job)], ["run", str(job)]):
        res = subprocess.run([sys.executable, "-m", "orchestrator", *command], capture_output=True, text=True,
                             cwd=REPO, timeout=120)
        said = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(said) == 1, (command, res.stderr)
        assert "line 7 is not JSON" in said[0] and "bench.traffic" in said[0] and "traffic.jsonl" in said[0]
        assert "Traceback" not in res.stderr
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing written


def test_the_job_measures_the_files_requests(tmp_path):
    (tmp_path / "traffic.jsonl").write_text(lines({"prompt": "a b c", "output_tokens": 3},
                                                  {"prompt": "d e", "output_tokens": 40}))
    job = load_job(write_job(tmp_path, bench={"traffic": "traffic.jsonl", "traffic_sample": 8}))
    assert sorted(zip(job.bench.prompts, job.bench.output_lengths)) == [("a b c", 3), ("d e", 40)]
    assert job.bench.traffic == "traffic.jsonl" and "2 of 2 requests" in job.bench.prompts_from
    with pytest.raises(BadInput, match="give one of prompts .* not prompt and traffic"):
        load_job(write_job(tmp_path, bench={"prompt": "x", "traffic": "traffic.jsonl"}))
    with pytest.raises(BadInput, match="bench.traffic_sample: at most 256"):
        load_job(write_job(tmp_path, bench={"traffic": "traffic.jsonl", "traffic_sample": 1000}))


def test_a_missing_or_oversized_file_is_refused(tmp_path, monkeypatch):
    with pytest.raises(BadInput, match="not found"):
        traffic.load(tmp_path / "nope.jsonl", file="job.yaml", study="s", sample=8, default_output=8)
    big = tmp_path / "big.jsonl"
    big.write_text(lines({"prompt": "p"}))
    monkeypatch.setattr(traffic, "MAX_FILE_BYTES", 4)
    with pytest.raises(BadInput, match="at most 0 MB|cut it first"):
        traffic.load(big, file="job.yaml", study="s", sample=8, default_output=8)
    assert Path(big).exists()


def test_a_trace_with_timestamps_keeps_its_first_requests_in_time_order(tmp_path):
    path = tmp_path / "trace.jsonl"
    path.write_text(lines(*({"prompt": f"p{i}", "output_tokens": 4, "timestamp": 100.0 + (9 - i) * 0.5}
                            for i in range(10))))  # the file's order is not the trace's
    got = traffic.load(path, file="job.yaml", study="s", sample=4, default_output=8)
    assert got.prompts == ("p9", "p8", "p7", "p6") and got.times == (100.0, 100.5, 101.0, 101.5)
    assert "the first in time order" in got.describe() and "2 req/s" in got.describe()
    plain = tmp_path / "plain.jsonl"
    plain.write_text(lines({"prompt": "a", "output_tokens": 3}))
    assert traffic.load(plain, file="job.yaml", study="s", sample=4, default_output=8).times is None
