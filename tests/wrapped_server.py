"""A real reference server behind an executable wrapper script, and a command-backend job
that launches it: what the environment-failure and pre-flight tests share."""

from __future__ import annotations

import sys
from pathlib import Path

from conftest import write_job

SERVER = "run-orchestrator.refserver"  # the name carries the marker the leftover-server guard looks for


def wrapper(directory: Path, interpreter: str = sys.executable) -> Path:
    """An executable script that runs the reference server with ``interpreter``."""
    exe = directory / "bin" / SERVER
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text(f"#!{interpreter}\nimport runpy\nrunpy.run_module('orchestrator.refserver', run_name='__main__')\n")
    exe.chmod(0o755)
    return exe


def command_job(directory: Path, exe: Path, **sections) -> Path:
    argv = [str(exe), "--model", "tiny", "--device", "cpu", "--tp", "{tp_size}", "--threads", "{backend.threads}",
            "--served-model-name", "tiny", "--host", "{host}", "--port", "{port}"]
    return write_job(directory, study="env", backend={"kind": "command", "settings": {
        "argv": argv, "model_name": "tiny", "model_facts": {"heads": 8, "kv_heads": 4}}}, **sections)
