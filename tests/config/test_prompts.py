"""The decode prompt sets: the bundled one, and a user's file in either format; a bad file is
one line naming the file, the line and the rule."""

from __future__ import annotations

import json

import pytest

from orchestrator.config import prompts
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
