"""Pre-flight: before the first launch, check on every node that will run trials what the
trials need there, so a broken node stops the run with one line instead of failing (and,
before ``env-error`` existed, banning) config after config.

On each matching node (a Ray task pinned to it, as ``executor.cleanup_orphans`` does; or
this machine for the local executor and ``ncclsweep doctor JOB``):

- the server command resolves on *that node's* PATH, with the job's ``env:`` applied
  (``vllm`` installed on the head but not on the worker is the classic);
- the node has the GPUs the job needs (``nvidia-smi -L``). A node where no NVIDIA tool
  answers is not judged: a CPU machine that declares logical GPUs to Ray (tests) and a
  node without nvidia-smi cannot be counted, and the trial's own checks still run;
- a local model path the backend names exists (a Hugging Face id is not a path), and so does
  every local draft model a config may name (``speculative.model``: the space's choices and
  the baseline's).

``needs(job)`` says what to check (plain data, sent to each node); ``node_problems(needs)``
runs the checks where it is called and returns one line per problem.
"""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path
from typing import Any

from orchestrator.backends import speculative
from orchestrator.node.nvidia_smi import gpu_count

MODEL_SETTINGS = ("model", "model_path")  # backend settings that may name a local model
_LOCAL = ("/", "./", "../", "~")  # how a filesystem path begins (a Hub id does not)


def server_command(job) -> list[str]:
    """The argv the baseline would run (the same executable every config runs)."""
    backend = job.backend_obj()
    return list(backend.launch_spec(job.baseline_config(), "127.0.0.1", 8000).argv)


def resolve(command: str, env: dict[str, str]) -> str | None:
    """Where ``command`` resolves with ``env``'s PATH (or this process's), None if nowhere."""
    path = env.get("PATH", os.environ.get("PATH", os.defpath))
    if os.sep in command:
        return command if os.path.isfile(command) and os.access(command, os.X_OK) else None
    return shutil.which(command, path=path)


def local_model_path(settings: dict[str, Any]) -> str | None:
    """A model setting that is a filesystem path (absolute, ./, ../ or ~), else None."""
    for key in MODEL_SETTINGS:
        value = settings.get(key)
        if isinstance(value, str) and value.startswith(_LOCAL):
            return value
    return None


def draft_models(job) -> list[str]:
    """The local draft-model paths the job's configs may name: every choice of the space's
    ``speculative.model`` and the baseline's, each once."""
    values: list[Any] = []
    if speculative.MODEL in job.space:
        values += list(job.space.param(speculative.MODEL).values(10_000) or ())
    values.append((job.baseline or {}).get(speculative.MODEL))
    return [v for v in dict.fromkeys(values) if isinstance(v, str) and v.startswith(_LOCAL)]


def needs(job) -> dict[str, Any]:
    """What the trials need on a node (plain data, sent to each node)."""
    argv = server_command(job)
    return {"command": argv[0] if argv else None, "env": dict(job.env),
            "gpus": int(getattr(job, "gpus_per_node", 0) or 0),
            "model": local_model_path(dict(job.backend.settings)), "draft_models": draft_models(job)}


def node_problems(need: dict[str, Any]) -> list[str]:
    """What is missing on this node for ``needs(job)`` (empty: ready)."""
    problems = []
    command = need.get("command")
    if command and resolve(command, {**os.environ, **need.get("env", {})}) is None:
        problems.append(f"the server command {command!r} is not found on this node's PATH "
                        f"(install it here, or set backend.settings.executable/python to its full path)")
    if need.get("gpus"):
        have = gpu_count()
        if have is not None and have < need["gpus"]:
            problems.append(f"the job needs {need['gpus']} GPUs per node; nvidia-smi lists {have} here")
    model = need.get("model")
    if model and not Path(os.path.expanduser(model)).exists():
        problems.append(f"the model path {model!r} does not exist on this node")
    for draft in need.get("draft_models") or ():
        if not Path(os.path.expanduser(draft)).exists():
            problems.append(f"the draft model path {draft!r} (speculative.model) does not exist on this node")
    return problems


def check_task(need: dict[str, Any]) -> tuple[str, list[str]]:
    """(hostname, problems): what the task pinned to a node returns."""
    return socket.gethostname(), node_problems(need)


def format_problems(by_node: dict[str, list[str]]) -> str | None:
    """One line per node with a problem (None: every node is ready)."""
    bad = {node: probs for node, probs in by_node.items() if probs}
    if not bad:
        return None
    lines = [f"pre-flight failed on {len(bad)} of {len(by_node)} node(s); nothing was launched:"]
    lines += [f"  {node}: {'; '.join(probs)}" for node, probs in sorted(bad.items())]
    return "\n".join(lines)
