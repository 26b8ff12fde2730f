"""The schema reference in docs/guide.md is generated from the code and cannot drift: the
committed text is what `python -m orchestrator.config.schema` renders, and the job schema it
renders names exactly the keys `load_job` accepts, with the defaults `load_job` applies."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from orchestrator.config.job import load_job
from orchestrator.config.schema import BEGIN, END, job_keys, render
from orchestrator.core.durations import parse_duration
from orchestrator.core.errors import BadInput

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "guide.md"


def test_the_committed_guide_holds_the_rendered_reference():
    text = GUIDE.read_text()
    assert BEGIN in text and END in text
    committed = BEGIN + text.split(BEGIN, 1)[1].split(END, 1)[0] + END
    assert committed + "\n" == render(), "run: python -m orchestrator.config.schema --write docs/guide.md"


def _minimal(tmp_path: Path, extra: dict | None = None) -> Path:
    (tmp_path / "space.yaml").write_text("params:\n  backend.threads: [1, 2]\n")
    job = {"study": "s", "backend": {"kind": "refserver", "settings": {"model": "tiny", "device": "cpu"}},
           "space": "space.yaml", **(extra or {})}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def _accepted(tmp_path: Path, section: str) -> set[str]:
    """The keys load_job accepts in ``section`` ("" = top level), read from its own refusal."""
    probe: dict = {"zz_probe": 1}
    for part in reversed(section.split(".") if section else []):
        probe = {part: probe}
    with pytest.raises(BadInput) as info:
        load_job(_minimal(tmp_path, probe))
    message = str(info.value)
    assert "unknown key 'zz_probe'" in message, message
    return {k.strip() for k in message.split("allowed: ", 1)[1].split(",")}


def test_the_job_schema_names_exactly_the_keys_load_job_accepts(tmp_path):
    keys = job_keys()
    sections = [k.path for k in keys if k.section]
    assert {"budget", "bench", "timeouts", "ray", "ray.node_selector", "correctness"} <= set(sections)
    for section in [""] + sections:
        depth = section.count(".") + 1 if section else 0
        documented = {k.path.split(".")[-1] for k in keys
                      if k.path.count(".") == depth and (not section or k.path.startswith(section + "."))}
        assert documented == _accepted(tmp_path, section), section or "top level"


SKIP = {"study", "space", "backend.kind", "backend.settings", "bench.prompt", "bench.prompts", "correctness.prompts",
        "output_dir", "report_dir", "storage", "baseline"}  # examples or values computed from others


def _loaded(job, path: str):
    value = job
    for part in path.split("."):
        if isinstance(value, dict):
            value = value.get(part)
        elif hasattr(value, part):
            value = getattr(value, part)
        elif hasattr(value, part + "_s"):
            value = getattr(value, part + "_s")
        else:
            raise AssertionError(f"{path}: no such field on the loaded job")
    return value


def test_the_documented_defaults_are_the_loaded_ones(tmp_path):
    job = load_job(_minimal(tmp_path))
    checked = 0
    for key in job_keys():
        if key.section or key.path in SKIP:
            continue
        want = yaml.safe_load(key.default) if key.default else None  # the default as the schema writes it
        got = _loaded(job, key.path)
        if isinstance(want, str) and re.fullmatch(r"\d+[smh]", want):
            want = parse_duration(want)
        if isinstance(got, tuple):
            got = list(got)
        assert got == want, f"{key.path}: documented {key.default!r}, loaded {got!r}"
        checked += 1
    assert checked >= 30
