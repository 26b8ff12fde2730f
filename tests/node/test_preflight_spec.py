"""Pre-flight checks the draft models a speculative space may name like the model itself: a
local path that does not exist on the node stops the run before anything launches (a Hub id is
not a path and is not checked); ``doctor JOB`` reports the same."""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from pathlib import Path

import yaml

from orchestrator.cli import main
from orchestrator.config.job import load_job
from orchestrator.node import preflight


def spec_job(tmp_path: Path, drafts: list[str]) -> Path:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (tmp_path / "space.yaml").write_text(yaml.safe_dump({"params": {
        "speculative.method": {"choices": ["none", "draft_model"]},
        "speculative.num_tokens": {"choices": [2], "when": {"speculative.method": "draft_model"}},
        "speculative.model": {"choices": drafts, "when": {"speculative.method": "draft_model"}}}}))
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({
        "study": "s", "report_dir": str(tmp_path / "r"), "space": "space.yaml", "gpus_per_node": 0,
        "backend": {"kind": "vllm",
                    "settings": {"model": str(model), "version": "0.26.0", "executable": "/bin/true"}}}))
    return path


def test_a_missing_local_draft_is_a_preflight_problem(tmp_path):
    present = tmp_path / "draft-l2"
    present.mkdir()
    missing = tmp_path / "draft-gone"
    job = load_job(spec_job(tmp_path, [str(present), str(missing), "org/eagle-head"]))
    need = preflight.needs(job)
    assert need["draft_models"] == [str(present), str(missing)]  # the Hub id is no path
    problems = preflight.node_problems(need)
    assert problems == [f"the draft model path {str(missing)!r} (speculative.model) does not exist on this node"]
    missing.mkdir()
    assert preflight.node_problems(preflight.needs(job)) == []


def test_doctor_reports_it(tmp_path):
    job = spec_job(tmp_path, [str(tmp_path / "nowhere")])
    out = io.StringIO()
    with redirect_stdout(out):
        main(["doctor", str(job)])
    assert "draft model path" in out.getvalue() and "nowhere" in out.getvalue()
