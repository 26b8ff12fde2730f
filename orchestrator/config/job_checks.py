"""The checks a job's configs pass before anything is launched, across job, space and backend.

``orchestrator.config.job`` reads each section of a job; what needs several of them at once is
here: config mappings written in the job (the baseline, a reference config; also ``bench
--set``) checked against the parameter rules, the space and NCCL's values; NCCL values that
are unsafe on PCIe unless ``allow_unsafe_nccl``; the rules that depend on the NCCL release
(``check_nccl_release``: the job's ``nccl_version``, else torch's NCCL in the server's Python);
tensor x pipeline parallel sizes against
``gpus_per_node``; and the backend's ``check_config`` on the baseline, the reference and every
config of the space (or, for spaces of more than ``space.CHECK_LIMIT`` configs, every
parameter value applied to the baseline); the job's sampler has the packages it needs here
(``validate`` and ``run``, not the commands that only read a study). Every refusal is one ``BadInput`` (a
``ConfigRejected`` for the backend's) naming the file and key to fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator.backends import allreduce
from orchestrator.config.sampler_options import missing_packages
from orchestrator.config.space import CHECK_LIMIT, NAME_RULE, SearchSpace, canonical_value, check_param_name, env_str
from orchestrator.config.yaml_input import did_you_mean, same, shown
from orchestrator.core import nccl, versions
from orchestrator.core.errors import BadInput, ConfigRejected, brief


def nccl_value(var: str, value: Any, file: str, key: str) -> str:
    """An NCCL variable's value as NCCL spells it (``nccl.validate_value``), or BadInput at ``key``."""
    try:
        return canonical_value(f"env.{var}", value)
    except ValueError as exc:
        msg = str(exc)
        if repr(env_str(value)) not in msg and env_str(value) not in msg:
            msg = f"{brief(env_str(value))}: {msg}"
        raise BadInput(msg, file=file, key=key) from None


def refuse_unsafe(var: str, value: str, allow_unsafe: bool, file: str | None, key: str, job_file: str) -> None:
    """BadInput for an NCCL value that can corrupt data on PCIe, unless ``allow_unsafe_nccl``."""
    if allow_unsafe:
        return

    reason = nccl.unsafe_on_pcie(var, value)
    if reason:
        raise BadInput(f"{var}={value} is unsafe on PCIe: {reason}; set allow_unsafe_nccl: true in {job_file} "
                       f"to allow it", file=file, key=key)


def nccl_release(declared: str | None, backend) -> str | None:
    """The NCCL release the job's servers load: the job's ``nccl_version``, else the NCCL of the
    torch in the server's interpreter (``versions.torch_versions``; the NCCL a server built on
    that torch loads unless it brings its own), else None (unknown)."""
    if declared:
        return declared
    return versions.torch_versions(backend.torch_python()).get("nccl")


def check_nccl_release(declared: str | None, space: SearchSpace, env: dict[str, str], baseline: dict, backend,
                       allow_unsafe: bool, job_file: str) -> None:
    """The rules that depend on the NCCL release (``nccl.needs_release``: the per-collective form
    from 2.24; the symmetric kernels, ``NCCL_SYM_*`` and ``allreduce.backend`` paths that run
    them, ignored on PCIe from 2.29 unless ``allow_unsafe_nccl``), checked against
    ``nccl_release``: looked up only when a value needs it."""
    paths = getattr(backend, "allreduce_paths", lambda: None)()
    symmetric = {name for name, path in (paths.paths.items() if paths is not None else ()) if path.nccl_symmetric}
    items: list[tuple[str, Any, str | None, str]] = [(f"env.{k}", v, job_file, f"env.{k}") for k, v in env.items()]
    items += [(k, v, job_file, f"baseline.{k}") for k, v in baseline.items()]
    for p in space.params:
        if p.kind == "categorical":
            items += [(p.name, v, space.file, f"params.{p.name}.choices[{i}]") for i, v in enumerate(p.choices or ())]
    nccl_items = [(name[4:], v, f, k) for name, v, f, k in items if name.startswith("env.NCCL_")]
    symm_items = [(v, f, k) for name, v, f, k in items if name == allreduce.BACKEND and v in symmetric]
    if not symm_items and not any(nccl.needs_release(name, v) for name, v, _, _ in nccl_items):
        return
    version = nccl_release(declared, backend)
    unknown = "" if version else "; set nccl_version in the job to the NCCL your servers load"
    for name, value, file, key in nccl_items:
        try:
            nccl.validate_value(name, value, nccl_version=version)
        except ValueError as exc:
            raise BadInput(str(exc), file=file, key=key) from None
        reason = None if allow_unsafe else nccl.ignored_on_pcie(name, value, version)
        if reason:
            raise BadInput(f"{name}={brief(env_str(value))} is ignored on PCIe: {reason}{unknown}; set "
                           f"allow_unsafe_nccl: true in {job_file} to keep it", file=file, key=key)
    reason = None if allow_unsafe or not symm_items else nccl.symmetric_kernels_ignored(version)
    if reason:
        value, file, key = symm_items[0]
        raise BadInput(f"{allreduce.BACKEND}={value} runs NCCL's symmetric kernels: {reason}{unknown}; set "
                       f"allow_unsafe_nccl: true in {job_file} to keep it", file=file, key=key)


def config_mapping(raw: Any, file: str, prefix: str, allow_unsafe: bool, *, space: SearchSpace | None) -> dict:
    """A config written in the job (baseline, reference): names, values, NCCL rules."""
    if not isinstance(raw, Mapping):
        raise BadInput(f"must be a mapping of parameter to value, e.g. {{tp_size: 1, graph_capture: false}}, "
                       f"not {shown(raw)}", file=file, key=prefix)
    out: dict[str, Any] = {}
    for name, value in raw.items():
        key = f"{prefix}.{name}"
        problem = check_param_name(name)
        if problem:
            if space is not None and isinstance(name, str):
                hint = did_you_mean(name, space.names, cutoff=0.4)
                if hint:
                    problem = f"unknown parameter {brief(name)}{hint}; allowed: {NAME_RULE}"
                problem += f"; the space's params: {', '.join(space.names)}"
            raise BadInput(problem, file=file, key=key)
        if value is None or isinstance(value, (list, dict)):
            raise BadInput(f"must be a single value (string, number or boolean), not {shown(value)}",
                           file=file, key=key)
        try:
            value = canonical_value(name, value)
        except ValueError as exc:
            msg = str(exc)
            raise BadInput(msg if env_str(value) in msg else f"{brief(value)}: {msg}", file=file, key=key) from None
        if name.startswith("env.NCCL_"):
            refuse_unsafe(name[4:], value, allow_unsafe, file, key, file)
        if space is not None and name in space:
            param = space.param(name)
            if not param.allows(value):
                raise BadInput(f"{brief(value)} is not in the space ({space.file} params.{name}); allowed: "
                               f"{param.allowed_text()}", file=file, key=key)
            if param.kind == "categorical":  # the choice's own spelling/type (YAML 1 vs true etc.)
                value = next(c for c in param.choices or () if same(c, value))
        out[name] = value
    return out


def gpus_of(config: Mapping[str, Any]) -> int:
    """tp_size x pp_size of a config (1 where they are not numbers)."""
    try:
        return int(config.get("tp_size", 1)) * int(config.get("pp_size", 1))
    except (TypeError, ValueError):
        return 1


def check_space_tp(space: SearchSpace, gpus: int, job_file: str) -> None:
    """Every tp_size/pp_size choice must fit in gpus_per_node (GPU jobs only)."""
    if gpus <= 0:
        return
    sizes = {}
    for name in ("tp_size", "pp_size"):
        if name in space:
            vals = space.param(name).values(10_000) or ()
            sizes[name] = [v for v in vals if isinstance(v, int) and not isinstance(v, bool)]
    for name, other in (("tp_size", "pp_size"), ("pp_size", "tp_size")):
        if name not in sizes:
            continue
        smallest_other = min(sizes.get(other) or [1])
        for v in sizes[name]:
            if v * smallest_other > gpus:
                need = f"{v} GPUs" if smallest_other == 1 else f"{v} x {smallest_other} = {v * smallest_other} GPUs"
                raise BadInput(f"{name}={v} needs {need} but the job {job_file} has gpus_per_node: {gpus}; "
                               f"allowed: tp_size x pp_size <= {gpus}", file=space.file, key=f"params.{name}")


def check_baseline(baseline: dict, own: dict, gpus: int, backend, file: str) -> None:
    """The baseline fits the node's GPUs and the backend can express it."""
    if gpus > 0 and gpus_of(baseline) > gpus:
        key = "baseline.tp_size" if "tp_size" in own else "baseline.pp_size" if "pp_size" in own else "baseline"
        raise BadInput(f"tp_size x pp_size = {gpus_of(baseline)} needs more GPUs than gpus_per_node: {gpus}; "
                       f"allowed: tp_size x pp_size <= {gpus}", file=file, key=key)
    check_config(backend, baseline, file, "baseline")


def check_config(backend, config: dict, file: str, prefix: str) -> None:
    """``backend.check_config``, its refusal keyed under ``prefix`` (``baseline``, ``correctness.reference``)."""
    try:
        backend.check_config(dict(config))
    except ConfigRejected as exc:
        raise ConfigRejected(f"{raw_message(exc)} (config {config})", file=file,
                             key=f"{prefix}.{exc.key}" if exc.key else prefix) from None


def check_space_configs(space: SearchSpace, baseline: dict, backend, job_file: str, gpus: int) -> None:
    """``backend.check_config`` on every feasible config (or every value vs the baseline)."""
    configs = space.enumerate(CHECK_LIMIT)
    if configs is not None:
        if not configs:
            raise BadInput("no config of the space satisfies its constraints for this job",
                           file=space.file, key="constraints")
        for config in configs:
            full = space.active({**baseline, **config})
            if gpus > 0 and gpus_of(full) > gpus:
                raise BadInput(f"config {config} needs tp_size x pp_size = {gpus_of(full)} GPUs but the job "
                               f"{job_file} has gpus_per_node: {gpus}; add the constraint "
                               f"'tp_size * pp_size <= gpus_per_node'", file=space.file, key="constraints")
            _reject_in_space(backend, full, config, space, job_file)
        return
    base = space.project(baseline)
    for p in space.params:
        values = p.values(CHECK_LIMIT)
        if values is None:
            values = (p.low, p.high)  # a wide int range: its ends
        for v in values:
            config = {**base, p.name: v}
            for parent, allowed in p.when:  # make the param active
                config.setdefault(parent, allowed[0])
                if not any(same(config[parent], a) for a in allowed):
                    config[parent] = allowed[0]
            config = _complete(space, space.active(config))
            if space.feasible(config) is not None:
                continue
            _reject_in_space(backend, space.active({**baseline, **config}), {p.name: v}, space, job_file)


def _complete(space: SearchSpace, config: dict) -> dict:
    """``config`` with every conditional parameter its values make active, and it lacks, at its
    first value: a config of the space always has them (``speculative.method: ngram`` brings its
    ``speculative.num_tokens``)."""
    config = dict(config)
    while True:
        missing = [space.param(n) for n in space.active_names(config) if n not in config and space.param(n).when]
        if not missing:
            return config
        for param in missing:
            config[param.name] = (param.choices or (None,))[0] if param.kind == "categorical" else param.low


def _reject_in_space(backend, full: dict, shown_config: dict, space: SearchSpace, job_file: str) -> None:
    try:
        backend.check_config(dict(full))
    except ConfigRejected as exc:
        key = exc.key or ""
        key = f"params.{key}" if key in space else (key or "params")
        raise ConfigRejected(f"{raw_message(exc)} (config {shown_config}; backend of {job_file})",
                             file=space.file, key=key) from None


def raw_message(exc: BadInput) -> str:
    """A ``BadInput``'s message without its ``file: key:`` prefix (to re-key it elsewhere)."""
    text = str(exc)
    where = ": ".join(part for part in (exc.file, exc.key) if part)
    prefix = f"{where}: " if where else ""
    return text[len(prefix):] if prefix and text.startswith(prefix) else text


def check_space_unsafe(space: SearchSpace, allow_unsafe: bool, job_file: str) -> None:
    """Every NCCL choice of the space is safe on PCIe, unless ``allow_unsafe_nccl``."""
    if allow_unsafe:
        return
    for p in space.params:
        if p.name.startswith("env.NCCL_") and p.kind == "categorical":
            for i, value in enumerate(p.choices or ()):
                refuse_unsafe(p.name[4:], value, False, space.file, f"params.{p.name}.choices[{i}]", job_file)


def check_sampler_installed(job) -> None:
    """BadInput at ``sampler`` when a package the job's sampler needs is not installed here:
    the one line ``run`` and ``validate`` both give (``sampler_options.missing_packages``)."""
    why = missing_packages(job.sampler.name)
    if why:
        raise BadInput(why, file=str(job.path), key="sampler")
