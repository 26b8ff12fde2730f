"""Pre-flight: what every node needs before the first launch (the server command on the PATH of
the job's env:, the GPUs nvidia-smi lists, a local model path), checked with real files and
a real wrapper script."""

from __future__ import annotations

from wrapped_server import SERVER, command_job, wrapper

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
