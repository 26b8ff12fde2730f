"""A real server behind an executable wrapper script, and a command-backend job that launches it:
what the environment-failure and pre-flight tests share. ``wrapper`` runs the reference server;
``fake_wrapper`` runs the fake OpenAI server (tests/fake_openai_server.py) on the same command line,
faults included: for the tests of where a server is found, whether it can run and what the tuner
makes of its failures, not of what the reference server itself serves (a start costs a fraction
of the reference server's ``import torch``). ``fake_backend``: a job's backend section for it."""

from __future__ import annotations

import sys
from pathlib import Path

from conftest import FAKE_MARKER, write_job

SERVER = "run-orchestrator.refserver"  # the name carries the marker the leftover-server guard looks for
FAULT_SERVER = Path(__file__).resolve().parent / "fault_server.py"  # the fault names -> the fake's flags
FAKE_SERVER = f"run-{FAKE_MARKER}"  # the marker no_leftover_servers looks for (and suite_cpu.py's kind)
_FAKE_SCRIPT = """\
#!{interpreter}
# The reference server's command line served by the fake OpenAI server (tests/wrapped_server.py), its
# --fault NAME[:N] as tests/fault_server.py maps it to the fake's flags.
import runpy, sys

DROPPED = ("--device", "--tp", "--threads", "--served-model-name")  # the reference server's alone (with a value)
args, rest = ["--token-delay", "{token_delay}"], iter(sys.argv[1:])
for arg in rest:
    if arg in DROPPED:
        next(rest)
    else:
        args.append(arg)
sys.argv = [{fault_server!r}, *args]
runpy.run_path(sys.argv[0], run_name="__main__")
"""
FAKE_TOKEN_DELAY = 0.02  # a token rate a loaded box serves


def wrapper(directory: Path, interpreter: str = sys.executable) -> Path:
    """An executable script that runs the reference server with ``interpreter``."""
    exe = directory / "bin" / SERVER
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text(f"#!{interpreter}\nimport runpy\nrunpy.run_module('orchestrator.refserver', run_name='__main__')\n")
    exe.chmod(0o755)
    return exe


def fake_wrapper(directory: Path, interpreter: str = sys.executable) -> Path:
    """An executable script that serves the reference server's command line (``command_job``'s, and
    ``--fault NAME[:N]``) with the fake OpenAI server run by ``interpreter``: the flags only the
    reference server has dropped, a fault as the fake's flags for it (crash-on-start, hang-on-start,
    garbage: wrong text, crash-after:N: gone as request N + 1 comes, slow-start:S: ready S seconds
    later), a token every ``FAKE_TOKEN_DELAY`` seconds."""
    exe = directory / "bin" / FAKE_SERVER
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text(_FAKE_SCRIPT.format(interpreter=interpreter, token_delay=FAKE_TOKEN_DELAY,
                                       fault_server=str(FAULT_SERVER)))
    exe.chmod(0o755)
    return exe


def command_job(directory: Path, exe: Path, **sections) -> Path:
    argv = [str(exe), "--model", "tiny", "--device", "cpu", "--tp", "{tp_size}", "--threads", "{backend.threads}",
            "--served-model-name", "tiny", "--host", "{host}", "--port", "{port}"]
    return write_job(directory, study="env", backend={"kind": "command", "settings": {
        "argv": argv, "model_name": "tiny", "model_facts": {"heads": 8, "kv_heads": 4}}}, **sections)


def fake_settings(exe: Path) -> dict:
    """Command-backend settings that launch ``exe`` (``fake_wrapper``'s script) as the ``refserver``
    backend launches the tiny reference server: ``tp_size``, ``backend.threads`` and ``backend.fault``
    on its command line (the last two 1 and none where a config has none)."""
    argv = [str(exe), "--model", "tiny", "--device", "cpu", "--tp", "{tp_size}", "--threads", "{backend.threads}",
            "--fault", "{backend.fault}", "--served-model-name", "tiny", "--host", "{host}", "--port", "{port}"]
    return {"argv": argv, "model_name": "tiny", "defaults": {"backend.threads": 1, "backend.fault": "none"}}


def fake_backend(directory: Path) -> dict:
    """``write_job``'s ``backend`` section for the fake server behind ``fake_wrapper(directory)``, in
    place of the tiny reference server's: the same space (``tp_size``, ``backend.threads``,
    ``backend.fault``) reaches it."""
    return {"kind": "command", "settings": fake_settings(fake_wrapper(directory))}
