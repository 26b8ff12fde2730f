"""Pre-flight: what every node needs before the first launch (the server command on the PATH of
the job's env:, the GPUs nvidia-smi lists, a local model path), checked with real files and
a real wrapper script."""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from pathlib import Path

import yaml
from wrapped_server import SERVER, command_job, wrapper

from orchestrator.cli import main
from orchestrator.config.job import load_job
from orchestrator.node import preflight


def test_preflight_checks_command_path_gpus_and_model(tmp_path, monkeypatch):
    job = load_job(command_job(tmp_path, tmp_path / "bin" / SERVER))
    need = preflight.needs(job)
    assert need["command"] == str(tmp_path / "bin" / SERVER) and need["gpus"] == 0
    assert "not found on this node's PATH" in preflight.node_problems(need)[0]
    wrapper(tmp_path)
    assert preflight.node_problems(need) == []
    # a bare command resolves on the PATH of the job's env:, not the driver's
    bare = {**need, "command": SERVER}
    assert preflight.node_problems(bare)
    assert preflight.node_problems({**bare, "env": {"PATH": str(tmp_path / "bin")}}) == []
    assert "does not exist" in preflight.node_problems({**need, "model": str(tmp_path / "m.gguf")})[0]
    monkeypatch.setattr(preflight, "gpu_count", lambda: 2)  # a node whose nvidia-smi lists 2 GPUs
    assert preflight.node_problems({**need, "gpus": 8}) == ["the job needs 8 GPUs per node; nvidia-smi lists 2 here"]


# Pre-flight checks the draft models a speculative space may name like the model itself: a
# local path that does not exist on the node stops the run before anything launches (a Hub id is
# not a path and is not checked); ``doctor JOB`` reports the same.
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
