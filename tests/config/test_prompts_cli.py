"""A job whose bench.prompts file is bad stops every command that loads it with one line naming
the job, the file and the rule, exit code 2, nothing written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import write_job
from orchestrator.config.job import load_job

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
