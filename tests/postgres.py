"""A real PostgreSQL server of the test's own: ``initdb`` in a fresh temporary folder, started
with ``pg_ctl`` on a free loopback port, stopped and removed after (``postgres_server``).

The server binaries are found on PATH or where Debian's ``postgresql`` package puts them
(``/usr/lib/postgresql/<version>/bin``). PostgreSQL refuses to run as root: as root the server
runs as the ``postgres`` user the package creates (``runuser``). Without the binaries the test
is skipped, unless ``NCCLSWEEP_REQUIRE_POSTGRES=1`` (``.ci/run`` sets it after installing them):
then it fails."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


def _missing(why: str) -> None:
    if os.environ.get("NCCLSWEEP_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"PostgreSQL is required here (NCCLSWEEP_REQUIRE_POSTGRES=1): {why}")
    pytest.skip(f"no PostgreSQL server to test against: {why}")


def server_bin() -> Path | None:
    """The folder of ``initdb`` and ``pg_ctl``: PATH first, then Debian's newest version."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).parent
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]), reverse=True):
        if (Path(folder) / "initdb").is_file() and (Path(folder) / "pg_ctl").is_file():
            return Path(folder)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """A running PostgreSQL server of its own; yields its SQLAlchemy URL (trust authentication,
    loopback only). Stopped (immediate shutdown, then its postmaster killed if it is still
    there) and its folder removed on the way out."""
    bindir = server_bin()
    if bindir is None:
        _missing("initdb/pg_ctl not found (apt-get install postgresql)")
    assert bindir is not None
    prefix: list[str] = []
    owner = None
    if os.geteuid() == 0:
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            _missing("running as root and there is no 'postgres' user to run the server as")
        prefix = ["runuser", "-u", "postgres", "--"]
    root = Path(tempfile.mkdtemp(prefix="ncclsweep-pg-"))
    data = root / "data"
    if owner is not None:
        os.chown(root, owner.pw_uid, owner.pw_gid)
    port = _free_port()
    started = False
    try:
        subprocess.run([*prefix, str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
                        "-E", "UTF8", "--no-sync"], check=True, capture_output=True, text=True)
        options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=50"
        subprocess.run([*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(root / "server.log"),
                        "-w", "-t", "120", "start"], check=True, capture_output=True, text=True)
        started = True
        yield f"postgresql+psycopg2://postgres@127.0.0.1:{port}/postgres"
    finally:
        if started:
            subprocess.run([*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "-t", "60",
                            "stop"], capture_output=True, text=True)
            pidfile = data / "postmaster.pid"
            if pidfile.exists():  # it did not stop: end the postmaster this fixture started
                with contextlib.suppress(OSError, ValueError, IndexError):
                    os.kill(int(pidfile.read_text().split()[0]), signal.SIGKILL)
        shutil.rmtree(root, ignore_errors=True)
