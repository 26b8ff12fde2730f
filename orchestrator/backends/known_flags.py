"""The command-line flags of a server release: dumped from the installed release's own
parser, else read from the tables bundled with ncclsweep.

``installed_table(package, python, version, recipe)`` runs ``parser_dump`` in the
server's Python (the interpreter where the release is installed) and caches the result
per interpreter and release under ``$XDG_CACHE_HOME/ncclsweep/flags`` (default
``~/.cache``; ``NCCLSWEEP_CACHE_DIR`` overrides): the installed release is the authority,
whichever it is. A dump that fails (the server does not import there) is cached too, as
the reason, so a night of trials does not retry it; delete the file to retry.

``bundled(package, version)`` reads ``flag_tables/<package>-<version>.json`` (package
data), used only when no release is installed where the job is validated, e.g. a job
written on a laptop for a GPU box (``settings.version``). Bundled now: vLLM 0.33.0 and
0.26.0, SGLang 0.5.23; each file's ``how`` says how it was made. A flag's ``choices`` are
the values the release accepts where it says (``--load-format``, ``--quantization``,
``--moe-backend``, ``--all2all-backend``: see ``parser_dump``); a flag without them takes any
value. ``config_choices`` hold the values of keys inside a JSON-valued flag (vLLM's
speculative methods, ``--speculative-config.method``), ``config_keys`` the keys of a section
of one (vLLM's ``--compilation-config.pass_config``), ``env_vars`` the release's own variables
that choose its all-reduce path (vLLM's ``VLLM_ALLREDUCE_*``): what ``allreduce.backend`` can be
spelled with there. To add one, dump the
release where it imports (a GPU box, or the wheel unpacked on a private ``PYTHONPATH``)::

    python -m orchestrator.backends.known_flags vllm --python /venv/bin/python --write
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

from orchestrator.core import files
from orchestrator.core.versions import parse_version

TABLES = Path(__file__).with_name("flag_tables")
DUMPER = Path(__file__).with_name("parser_dump.py")
DUMP_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class FlagInfo:
    flag: str
    kind: str  # switch | value | list
    negative: str | None = None  # spelling that sets a switch false
    deprecated: bool = False
    replacement: str | None = None
    choices: tuple[str, ...] | None = None  # the values the release accepts (None: any, or not recorded)


@dataclass(frozen=True)
class FlagTable:
    """The flags of one release of one server, and where they were read."""

    package: str
    version: str
    source: str
    raw: dict[str, dict] = field(repr=False, compare=False)
    # the values a key inside a JSON-valued flag takes, by "--flag.key" (vLLM's
    # "--speculative-config.method": its SpeculativeMethod); absent: not recorded
    config_choices: dict[str, tuple[str, ...]] = field(default_factory=dict, repr=False, compare=False)
    # the keys a nested section of a JSON-valued flag has, by "--flag.section" (vLLM's
    # "--compilation-config.pass_config": its PassConfig fields); absent: not recorded
    config_keys: dict[str, tuple[str, ...]] = field(default_factory=dict, repr=False, compare=False)
    # the release's own environment variables that choose its all-reduce path (vLLM's
    # VLLM_ALLREDUCE_*, VLLM_USE_NCCL_SYMM_MEM); None: not recorded
    env_vars: tuple[str, ...] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_json(cls, doc: dict[str, Any], origin: str) -> FlagTable:
        choices = {str(k): tuple(map(str, v)) for k, v in (doc.get("config_choices") or {}).items()}
        keys = {str(k): tuple(map(str, v)) for k, v in (doc.get("config_keys") or {}).items()}
        env = tuple(map(str, doc["env_vars"])) if isinstance(doc.get("env_vars"), list) else None
        return cls(str(doc["package"]), str(doc["version"]), origin, dict(doc["flags"]), choices, keys, env)

    @cached_property
    def flags(self) -> dict[str, FlagInfo]:
        return {flag: FlagInfo(flag, info["kind"], info.get("negative"), bool(info.get("deprecated")),
                               info.get("replacement"),
                               tuple(map(str, info["choices"])) if info.get("choices") else None)
                for flag, info in self.raw.items()}

    @cached_property
    def negatives(self) -> dict[str, str]:
        """negative spelling -> the positive flag it belongs to."""
        return {info.negative: flag for flag, info in self.flags.items() if info.negative}

    def knows(self, flag: str) -> bool:
        return flag in self.flags or flag in self.negatives


# ---- bundled tables -------------------------------------------------------------------------

def bundled_versions(package: str) -> list[str]:
    """Releases of ``package`` with a bundled table, oldest first."""
    found = [p.stem[len(package) + 1:] for p in TABLES.glob(f"{package}-*.json")]
    return sorted(found, key=lambda v: parse_version(v) or (0, 0, 0))


@lru_cache(maxsize=None)
def bundled(package: str, version: str | None = None) -> FlagTable | None:
    """The bundled table of ``version``'s release (the newest one when None), or None."""
    known = bundled_versions(package)
    if version is not None:
        known = [v for v in known if parse_version(v) == parse_version(version)]
    if not known:
        return None
    version = known[-1]
    path = TABLES / f"{package}-{version}.json"
    return FlagTable.from_json(json.loads(path.read_text()), f"the table bundled for {package} {version}")


# ---- the installed release's own parser ---------------------------------------------------

def cache_dir() -> Path:
    override = os.environ.get("NCCLSWEEP_CACHE_DIR")
    if override:
        return Path(override) / "flags"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ncclsweep" / "flags"


def cache_path(package: str, python: str, version: str) -> Path:
    """One file per interpreter, release and version of the dumper."""
    key = f"{os.path.realpath(python)}\0{python}\0{hashlib.sha256(DUMPER.read_bytes()).hexdigest()}"
    return cache_dir() / f"{package}-{version}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


@lru_cache(maxsize=None)
def installed_table(package: str, python: str, version: str, recipe: str) -> FlagTable | str:
    """The flags of ``package`` ``version`` installed in ``python``, from its own parser
    (cached), or why they could not be read (a one-line reason)."""
    path = cache_path(package, python, version)
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        doc = _dump(python, recipe)
        try:
            files.write_text(path, json.dumps(doc, sort_keys=True))
        except OSError:  # a cache that cannot be written costs a dump next time, nothing else
            pass
    if "error" in doc:
        return f"{doc['error']} (cached in {path}; delete it to retry)"
    if doc.get("version") != version:
        return f"{python} has {package} {doc.get('version')}, not {version}"
    return FlagTable.from_json(doc, f"the parser of {package} {version} in {python}")


def _dump(python: str, recipe: str) -> dict[str, Any]:
    """Run parser_dump in ``python``: its source as ``-c``, from a neutral directory, so
    that nothing beside this file (``vllm.py``) shadows the server's own package."""
    argv = [python, "-c", DUMPER.read_text(), *recipe.split(" ", 1)]
    try:
        with tempfile.TemporaryDirectory() as empty:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=DUMP_TIMEOUT_S, check=False,
                                  cwd=empty)
    except (OSError, subprocess.SubprocessError) as exc:
        return {"error": f"could not run {python}: {exc}"}
    lines = done.stdout.strip().splitlines()
    if done.returncode == 0 and lines:
        try:
            return json.loads(lines[-1])
        except ValueError:
            pass
    tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
    return {"error": f"dumping the {recipe} parser in {python} failed: {tail[:300]}"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="write a release's flag table as bundled package data")
    ap.add_argument("recipe", help="vllm, sglang, or 'DIST MODULE:CALLABLE'")
    ap.add_argument("--python", default="python3", help="the interpreter where the release is installed")
    ap.add_argument("--write", action="store_true", help=f"write {TABLES}/<package>-<version>.json")
    args = ap.parse_args(argv)
    doc = _dump(args.python, args.recipe)
    if "error" in doc:
        print(doc["error"])
        return 1
    text = json.dumps(doc, indent=1, sort_keys=True) + "\n"
    if not args.write:
        print(text, end="")
        return 0
    path = TABLES / f"{doc['package']}-{doc['version']}.json"
    files.write_text(path, text)
    print(f"wrote {len(doc['flags'])} flags of {doc['package']} {doc['version']} to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
