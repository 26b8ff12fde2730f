"""The decode prompt sets: the bundled one, and a user's file in either format; a bad file is
one line naming the file, the line and the rule."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import write_job
from orchestrator.config import prompts
from orchestrator.config.job import load_job
from orchestrator.core.errors import BadInput


def test_the_bundled_set_is_natural_text_of_realistic_length():
    got = prompts.bundled()
    assert len(got) >= 8
    words = [len(p.split()) for p in got]
    assert all(100 <= w <= 500 for w in words), words
    assert len(set(got)) == len(got)


def test_jsonl_and_plain_text(tmp_path):
    jsonl = tmp_path / "traffic.jsonl"
    jsonl.write_text(json.dumps({"prompt": "first\nwith a newline", "id": 1}) + "\n\n"
                     + json.dumps({"prompt": "second"}) + "\n")
    assert prompts.load(jsonl, file="job.yaml") == ("first\nwith a newline", "second")
    text = tmp_path / "traffic.txt"
    text.write_text("one prompt\n\n  another prompt  \n")
    assert prompts.load(text, file="job.yaml") == ("one prompt", "  another prompt  ")


@pytest.mark.parametrize("content, says", [
    ("", "holds no prompt"),
    ('{"prompt": "ok"}\nnot json\n', "line 2 is not JSON"),
    ('{"prompt": "ok"}\n{"text": "no prompt field"}\n', "line 2 has no non-empty string 'prompt'"),
    ('{"prompt": ""}\n', "line 1 has no non-empty string 'prompt'"),
])
def test_a_bad_file_is_one_line(tmp_path, content, says):
    path = tmp_path / "p.jsonl"
    path.write_text(content)
    with pytest.raises(BadInput) as info:
        prompts.load(path, file="job.yaml")
    message = str(info.value)
    assert says in message and "bench.prompts" in message and "\n" not in message


def test_missing_too_large_and_not_utf8(tmp_path):
    with pytest.raises(BadInput, match="not found"):
        prompts.load(tmp_path / "nope.txt", file="job.yaml")
    big = tmp_path / "big.txt"
    big.write_text(("x" * 1000 + "\n") * 1100)
    with pytest.raises(BadInput, match="larger than 1 MB"):
        prompts.load(big, file="job.yaml")
    raw = tmp_path / "raw.txt"
    raw.write_bytes(b"ok\n\xff\xfe\n")
    with pytest.raises(BadInput, match="not UTF-8"):
        prompts.load(raw, file="job.yaml")


# A job whose bench.prompts file is bad stops every command that loads it with one line naming
# the job, the file and the rule, exit code 2, nothing written.
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("content, says", [
    ('{"prompt": "ok"}\nnot json\n', "line 2 is not JSON"),
    ('{"prompt": "ok"}\n{"text": "no prompt field"}\n', "line 2 has no non-empty string 'prompt'"),
    ("", "holds no prompt"),
    (None, "not found"),
])
def test_a_bad_prompt_file_is_one_line_and_exit_2(tmp_path, content, says):
    if content is not None:
        (tmp_path / "traffic.jsonl").write_text(content)
    job = write_job(tmp_path, bench={"prompts": "traffic.jsonl", "output_tokens": 8})
    before = sorted(p.name for p in tmp_path.rglob("*"))
    for command in (["validate", str(job)], ["run", str(job)], ["bench", str(job)]):
        res = subprocess.run([sys.executable, "-m", "orchestrator", *command], capture_output=True, text=True,
                             cwd=REPO, timeout=120)
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1, (command, res.stderr)
        assert says in lines[0] and "bench.prompts" in lines[0] and str(job) in lines[0], lines[0]
        assert "Traceback" not in res.stderr
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing written


def test_a_good_prompt_file_is_what_the_job_measures(tmp_path):
    (tmp_path / "traffic.txt").write_text("first prompt of my traffic\nsecond prompt\n")
    job = write_job(tmp_path, bench={"prompts": "traffic.txt", "output_tokens": 8})
    res = subprocess.run([sys.executable, "-m", "orchestrator", "validate", str(job)], capture_output=True, text=True,
                         cwd=REPO, timeout=120)
    assert res.returncode == 0, res.stderr
    loaded = load_job(job)
    assert loaded.bench.prompts == ("first prompt of my traffic", "second prompt")
    assert loaded.bench.prompts_from.endswith("traffic.txt")


# ---- what a figure was measured on (issue 38) ----------------------------------------------------

def test_the_fingerprint_is_the_texts_in_order_their_count_and_lengths():
    texts = ("one two three", "four five six seven eight", "nine")
    fp = prompts.fingerprint(texts, "the file")
    assert fp["count"] == 3 and fp["words"] == {"min": 1, "median": 3, "max": 5} and fp["source"] == "the file"
    assert fp["sha256"] == prompts.fingerprint(list(texts), "elsewhere")["sha256"]  # where from is not what
    assert fp["sha256"] != prompts.fingerprint(texts[::-1])["sha256"]  # another order is another set
    assert fp["sha256"] != prompts.fingerprint((*texts[:2], "nine "))["sha256"]  # a space is another text
    assert prompts.describe(fp) == f"3 prompt(s) of 1-5 words (the file), sha256 {fp['sha256']}"
    assert prompts.describe(None).startswith("unknown")


def test_a_degenerate_set_is_named_and_a_natural_one_is_not():
    assert prompts.degenerate(prompts.bundled()) is None
    assert prompts.degenerate(("Write a poem about the sea.",)) is None  # one short prompt: not repetitive
    repetitive = ("the cat sat on the mat and the cat sat on the mat " * 8,) * 8  # the 8 repetitive copies
    why = prompts.degenerate(repetitive)
    assert "7 of its 8 prompts repeat another" in why and "hold only 6 distinct ones" in why
    assert prompts.degenerate(("a b c d e f g h i j " * 10, "k l m n o p q r s t " * 10)).startswith("its 200 words")


def test_validate_warns_about_a_degenerate_set_before_anything_runs(tmp_path, capsys):
    from orchestrator.cli import main

    (tmp_path / "p.txt").write_text("go go go go go go go go go go go go go go go go go go go go go go\n" * 4)
    job = write_job(tmp_path, bench={"prompts": "p.txt", "output_tokens": 8, "warmup": 1, "repeats": 2})
    assert main(["validate", str(job)]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"{job}: warning: the decode prompts ({tmp_path / 'p.txt'}) would "
                                               "misrank configs: 3 of its 4 prompts repeat another; its 88 words hold "
                                               "only 1 distinct ones"), err


def test_long_context_prompts_are_built_to_about_the_length_asked(tmp_path):
    """Each prompt keeps its own text last, whole, after text from the set and the bundled texts,
    about ``bench.context`` tokens in all (characters / 4)."""
    got = prompts.with_context(("first question?", "second question?"), 4000)
    assert len(got) == 2 and got[0].endswith("first question?") and got[1].endswith("second question?")
    assert all(4000 <= len(p) / prompts.CHARS_PER_TOKEN <= 4000 + 600 for p in got)
    assert got[0] != got[1]
    long = "word " * 5000
    assert prompts.with_context((long,), 1000) == (long,)  # already that long: left as it is
    job = load_job(write_job(tmp_path, bench={"prompt": "Tell me about rings.", "context": 2048}))
    assert len(job.bench.prompts[0]) >= 2048 * 4 and job.bench.context == 2048
    assert job.bench.prompts_from == "bench.prompt, each made about 2048 tokens long"
    with pytest.raises(BadInput, match="bench.context: at most 262144 tokens"):
        load_job(write_job(tmp_path, bench={"context": 10_000_000}))
