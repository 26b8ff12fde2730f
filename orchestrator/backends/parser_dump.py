"""Print, as JSON, the command-line flags of a server release, read from its own parser.

Runs *in the server's Python* (a vLLM or SGLang venv where ncclsweep may not be
installed), so it imports nothing but the standard library and the server::

    /venv/bin/python parser_dump.py vllm        # a recipe named below
    /venv/bin/python parser_dump.py DIST MODULE:CALLABLE   # CALLABLE(parser) adds the flags

Output: ``{"package", "version", "source", "flags": {flag: {"kind", ["negative"],
["deprecated"], ["replacement"], ["choices"]}}, ["config_choices"]}`` with kind ``switch``
(no value), ``value`` (one) or ``list`` (one or more); ``negative`` is the spelling that sets
a switch false (vLLM's ``--enable-x``/``--disable-x`` pairs, argparse's ``--no-x``);
``choices`` the values the flag accepts, as strings, where the release says (the parser's
own ``choices``; for vLLM, whose parser takes any string for ``--load-format``,
``--quantization``, ``--moe-backend`` and ``--all2all-backend``, the release's built-in load
formats, quantization methods, MoE kernel backends and all2all backends). ``config_choices``:
the values of keys inside a JSON-valued flag, by ``--flag.key`` (vLLM: the speculative
methods of ``--speculative-config``, its ``SpeculativeMethod``). ``config_keys``: the keys of a
section of a JSON-valued flag (vLLM: ``--compilation-config.pass_config``, its ``PassConfig``
fields). ``env_vars``: the release's own variables that choose its all-reduce path (vLLM:
the names in ``vllm.envs.environment_variables`` that match ``ENV_PATTERN``). Only long
options are listed; a spelling the parser hides (``--no-enable-x``) is never listed.

Recipes build the parser the way the server's own command line does:

- ``vllm``: ``vllm serve`` is the ``serve`` subcommand of ``vllm.entrypoints.cli.main``:
  a ``FlexibleArgumentParser`` whose subparser ``ServeSubcommand().subparser_init``
  (``vllm.entrypoints.cli.serve``) fills; the same from 0.8 to 0.33.
- ``sglang``: ``python -m sglang.launch_server`` fills an ``argparse.ArgumentParser`` with
  ``ServerArgs.add_cli_args`` (``sglang.srt.server_args``).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.metadata
import json
import re
import sys
import typing


def describe(parser: argparse.ArgumentParser) -> dict[str, dict]:
    """{flag: info} for every long option of ``parser`` (see the module docstring)."""
    flags: dict[str, dict] = {}
    for action in parser._actions:  # argparse keeps them nowhere public
        if isinstance(action, argparse._HelpAction):
            continue
        longs = [s for s in action.option_strings if s.startswith("--")]
        if not longs:
            continue
        help_text = (action.help or "") if action.help is not argparse.SUPPRESS else ""
        deprecated = type(action).__name__.startswith("Deprecated") or bool(
            re.match(r"\(?deprecated", help_text.strip(), re.I)) or " is deprecated" in help_text
        replacement = getattr(action, "new_flag", None)
        negatives = set(getattr(action, "negative_option_strings", ()) or ())
        boolean_optional = isinstance(action, argparse.BooleanOptionalAction)
        if boolean_optional and not negatives:
            negatives = {s for s in longs if s.startswith("--no-")}
        if action.nargs == 0 or boolean_optional:
            kind = "switch"
        elif action.nargs in ("+", "*") or isinstance(action.nargs, int) and action.nargs > 1:
            kind = "list"
        else:
            kind = "value"
        choices = _choices_of(action)
        for flag in (s for s in longs if s not in negatives):
            info: dict = {"kind": kind}
            if choices is not None:
                info["choices"] = choices
            negative = _negative_of(flag, negatives)
            if negative:
                info["negative"] = negative
            if deprecated:
                info["deprecated"] = True
                if replacement and " " not in replacement:
                    info["replacement"] = replacement
            flags[flag] = info
    return dict(sorted(flags.items()))


def _choices_of(action: argparse.Action) -> list[str] | None:
    """The values ``action`` accepts, as strings, or None (any value; or choices that are not
    plain strings and numbers, which a table cannot hold faithfully)."""
    choices = action.choices
    if choices is None or isinstance(choices, (str, bytes)):
        return None
    try:
        values = list(choices)
    except TypeError:
        return None
    if not values or not all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in values):
        return None
    return [str(v) for v in values]


def _negative_of(flag: str, negatives: set[str]) -> str | None:
    """Pair ``--enable-x`` with ``--disable-x`` and ``--x`` with ``--no-x``."""
    body = flag[2:]
    for prefix, inverse in (("enable-", "disable-"), ("disable-", "enable-")):
        if body.startswith(prefix) and f"--{inverse}{body[len(prefix):]}" in negatives:
            return f"--{inverse}{body[len(prefix):]}"
    if f"--no-{body}" in negatives:
        return f"--no-{body}"
    return next(iter(negatives)) if len(negatives) == 1 else None


def _vllm() -> argparse.ArgumentParser:
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # before 0.11
        from vllm.utils import FlexibleArgumentParser
    from vllm.entrypoints.cli.serve import ServeSubcommand

    top = FlexibleArgumentParser(prog="vllm")
    return ServeSubcommand().subparser_init(top.add_subparsers())


def _vllm_values() -> dict[str, list[str]]:
    """vLLM's built-in load formats, quantization methods, MoE kernel backends and all2all
    backends: its parser takes any string for ``--load-format``, ``--quantization``,
    ``--moe-backend`` and ``--all2all-backend`` (plugins may register more), and the engine
    refuses the rest. Each read where the release keeps it; a release without it gives none."""
    out: dict[str, list[str]] = {}
    for flag, module, name in (("--moe-backend", "vllm.config.kernel", "MoEBackend"),
                               ("--all2all-backend", "vllm.config.parallel", "All2AllBackend")):
        try:
            values = [str(v) for v in typing.get_args(getattr(importlib.import_module(module), name))]
        except Exception:  # noqa: BLE001 - a release without it: the parser's own answer stands
            values = []
        if values:
            out[flag] = values
    try:
        from vllm.model_executor.model_loader import (
            LoadFormats,  # runs in the server's own interpreter, where that release is installed
        )

        formats = [str(v) for v in typing.get_args(LoadFormats)]
        if formats:
            out["--load-format"] = formats
    except Exception:  # noqa: BLE001 - an older or a broken release: the parser's own answer stands
        pass
    try:
        from vllm.model_executor.layers.quantization import (
            QUANTIZATION_METHODS,  # runs in the server's own interpreter, where that release is installed
        )

        out["--quantization"] = [str(v) for v in QUANTIZATION_METHODS]
    except Exception:  # noqa: BLE001
        pass
    return out


def _vllm_config_values() -> dict[str, list[str]]:
    """The speculative methods ``--speculative-config``'s ``method`` takes: the release's
    ``SpeculativeMethod`` literal (in ``vllm.config.speculative`` in 0.26.0 and 0.33.0; looked
    for in ``vllm.config`` too); none where the release has no such literal."""
    for module in ("vllm.config.speculative", "vllm.config"):
        try:
            methods = [str(v) for v in typing.get_args(importlib.import_module(module).SpeculativeMethod)]
        except Exception:  # noqa: BLE001 - an older or a broken release: nothing recorded
            continue
        if methods:
            return {"--speculative-config.method": methods}
    return {}


ENV_PATTERN = r"ALL_?REDUCE|SYMM_MEM"  # VLLM_ALLREDUCE_USE_SYMM_MEM, VLLM_USE_NCCL_SYMM_MEM, ...


def _vllm_all_reduce() -> dict:
    """What chooses vLLM's all-reduce path besides flags: its environment variables
    (``vllm.envs.environment_variables``) and the ``PassConfig`` fields of
    ``--compilation-config`` (``fuse_allreduce_rms``, ``fi_allreduce_fusion_max_size_mb``);
    each left out where the release does not have it."""
    out: dict = {}
    try:
        names = list(importlib.import_module("vllm.envs").environment_variables)
        out["env_vars"] = sorted(n for n in names if re.search(ENV_PATTERN, n))
    except Exception:  # noqa: BLE001 - an older or a broken release: not recorded
        pass
    try:
        fields = [f.name for f in dataclasses.fields(importlib.import_module("vllm.config.compilation").PassConfig)]
        out["config_keys"] = {"--compilation-config.pass_config": fields}
    except Exception:  # noqa: BLE001 - not recorded
        pass
    return out


def _sglang() -> argparse.ArgumentParser:
    from sglang.srt.server_args import (
        ServerArgs,  # runs in the server's own interpreter, where that release is installed
    )

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    return parser


RECIPES = {"vllm": ("vllm", _vllm), "sglang": ("sglang", _sglang)}


def dump(recipe: str, target: str | None = None) -> dict:
    """The flag table of the installed release, by a named recipe or ``MODULE:CALLABLE``."""
    if target is None:
        package, build = RECIPES[recipe]
        parser, source = build(), recipe
    else:
        package, source = recipe, target
        module, _, attr = target.partition(":")
        parser = argparse.ArgumentParser()
        parser = getattr(importlib.import_module(module), attr)(parser) or parser
    flags = describe(parser)
    out: dict = {}
    if target is None and recipe == "vllm":
        for flag, values in _vllm_values().items():
            if flag in flags and "choices" not in flags[flag]:
                flags[flag]["choices"] = values
        if "--speculative-config" in flags:
            out["config_choices"] = _vllm_config_values()
        out.update(_vllm_all_reduce())
    return {"package": package, "version": importlib.metadata.version(package), "source": source,
            "flags": flags, **out}


if __name__ == "__main__":
    # the server may print while importing: the table is the last line
    print("\n" + json.dumps(dump(*sys.argv[1:3]), sort_keys=True))
