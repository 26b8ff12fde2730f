"""What the job tests share: a job and its space written into the test's current directory (a
tmp dir), and `bad`: load_job refuses it with one BadInput naming the file and key, and
writes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from orchestrator.config.job import load_job
from orchestrator.core.errors import BadInput

BASE_JOB = {
    "study": "t",
    "backend": {"kind": "refserver", "settings": {"model": "tiny", "device": "cpu"}},
    "gpus_per_node": 0,
    "cpus_per_trial": 2,
    "space": "space.yaml",
    "budget": {"trials": 4},
    "env": {},
}
BASE_SPACE = {
    "params": {"tp_size": {"choices": [1, 2]}, "backend.threads": {"choices": [1, 2]}},
    "constraints": ["tp_size <= gpus_per_node", "heads % tp_size == 0"],
}


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative report dirs land here; messages show short paths


def needs_nccl():
    return pytest.importorskip("orchestrator.core.nccl",
                               reason="orchestrator/core/nccl.py (NCCL value rules) not written yet")


def write(job=None, space=None, *, drop=(), job_text=None, space_text=None) -> str:
    data = {**BASE_JOB, **(job or {})}
    for key in drop:
        data.pop(key)
    Path("job.yaml").write_text(job_text if job_text is not None else yaml.safe_dump(data, sort_keys=False))
    Path("space.yaml").write_text(space_text if space_text is not None
                                  else yaml.safe_dump(space or BASE_SPACE, sort_keys=False))
    return "job.yaml"


def bad(key, *words, file="job.yaml", **kwargs) -> str:
    path = write(**kwargs)
    with pytest.raises(BadInput) as info:
        load_job(path)
    exc, msg = info.value, str(info.value)
    assert exc.file == file, msg
    assert exc.key == key, msg
    assert msg.startswith(f"{file}: {key}: "), msg
    for word in words:
        assert word in msg, msg
    assert not Path("reports").exists()  # nothing written, even on failure
    return msg
