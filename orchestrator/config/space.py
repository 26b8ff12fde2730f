"""Search spaces: load a space YAML strictly and propose, filter and enumerate configs.

A space file::

    params:
      tp_size: {choices: [1, 2]}                      # categorical: unique scalars
      backend.threads: [1, 2]                         # shorthand for {choices: [1, 2]}
      graph_capture: {choices: [false, true]}
      capture_sizes: {choices: ["1,2,4,8"], when: {graph_capture: true}}
      env.NCCL_PROTO: {choices: [LL, Simple]}
      backend.max_batch: {type: int, low: 8, high: 64, step: 8}   # log: true optional
    constraints:
      - "tp_size <= gpus_per_node"
      - "heads % tp_size == 0"
    description: free text (optional)

Parameter names are the neutral names of ``orchestrator.backends.base.NEUTRAL_PARAMS``,
``env.<VAR>`` (VAR upper-case; ``env.NCCL_*`` values are checked and canonicalized by
``orchestrator.core.nccl.validate_value``; every env choice is kept as a string), or
``backend.<flag>`` (lower-case with underscores; the backend checks the flag).

``when`` makes a parameter conditional: it is *active* only when every listed parameter
is active and takes one of the listed values (a scalar or a list). Inactive parameters
are absent from a config.

Constraints are Python expressions over parameter names and *context* names (the job
gives ``gpus_per_node``, ``cpus_per_trial`` and the backend's ``model_facts()``, e.g.
``heads``, ``kv_heads``, ``layers``). Only a safe subset is evaluated: names (dotted
ones like ``env.NCCL_PROTO`` included), numbers, strings, true/false/None, comparisons
(``== != < <= > >=``, ``in``/``not in`` a literal list), ``+ - * / // %``,
``and``/``or``/``not`` and parentheses. A constraint that mentions an inactive
parameter is satisfied. At load time a constraint over one parameter (plus context)
that rules out one of its values for every config is a "dead choice" and refused, as is
a constraint that is false or cannot be evaluated.

CPU jobs: on a job with ``gpus_per_node: 0`` the context's ``gpus_per_node`` is the job's
``cpus_per_trial`` (each tensor-parallel rank of a CPU server is one process, one CPU),
so ``tp_size <= gpus_per_node`` reads "TP fits the CPUs one trial owns" and a reusable
GPU space still loads for a CPU job. See ``orchestrator.config.job.Job.context``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from optuna.distributions import CategoricalDistribution, IntDistribution

from orchestrator.backends.base import NEUTRAL_PARAMS
from orchestrator.config.expressions import Constraint, ConstraintError, parse_constraint
from orchestrator.config.yaml_input import (
    check_keys,
    did_you_mean,
    display_path,
    read_yaml_mapping,
    same,
    scalar,
    shown,
)
from orchestrator.core import nccl  # only spaces/jobs with NCCL values need it
from orchestrator.core.errors import BadInput, brief
from orchestrator.core.launch import CACHE_VARIABLES, env_value_problem

Config = dict[str, Any]

PARAM_KINDS = ("categorical", "int")
SPACE_KEYS = ("params", "constraints", "description")
CATEGORICAL_KEYS = ("choices", "when", "type")
INT_KEYS = ("type", "low", "high", "step", "log", "when")
NAME_RULE = (f"a neutral name ({', '.join(NEUTRAL_PARAMS)}), env.<VAR> with VAR upper-case "
             "(env.NCCL_PROTO) or backend.<flag> in lower case with underscores (backend.max_batch)")
ENUMERATE_LIMIT = 100_000
CHECK_LIMIT = 2_000  # configs fully checked at load time (evaluation errors, feasibility)
_ENV_VAR = re.compile(r"[A-Z_][A-Z0-9_]*")
_BACKEND_FLAG = re.compile(r"[a-z][a-z0-9_]*")


def check_param_name(name: Any) -> str | None:
    """Why ``name`` is not a valid config parameter name, or None when it is."""
    if not isinstance(name, str):
        return f"parameter names must be strings, not {shown(name)}; allowed: {NAME_RULE}"
    if name in NEUTRAL_PARAMS:
        return None
    if name.startswith("env."):
        if name[4:] in CACHE_VARIABLES:
            return (f"{brief(name)}: where engines cache compiled code is the node's (or the job's env:), the same "
                    "for every trial, so that a config compiled once is loaded next time; not a parameter")
        if _ENV_VAR.fullmatch(name[4:]):
            return None
        return f"{brief(name)}: the variable after env. must be upper-case letters, digits and _ ({NAME_RULE})"
    if name.startswith("backend."):
        if _BACKEND_FLAG.fullmatch(name[8:]):
            return None
        return (f"{brief(name)}: the flag after backend. must be lower case with underscores, no dashes "
                f"({NAME_RULE})")
    hint = did_you_mean(name, list(NEUTRAL_PARAMS))
    if not hint and "." not in name:
        if _ENV_VAR.fullmatch(name):
            hint = f" (did you mean 'env.{name}'?)"
        elif _BACKEND_FLAG.fullmatch(name):
            hint = f" (did you mean 'backend.{name}'?)"
    return f"unknown parameter {brief(name)}{hint}; allowed: {NAME_RULE}"


def env_str(value: Any) -> str:
    """An environment value as a string (booleans as 1/0, like the backends do)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def env_value(value: Any) -> str:
    """An environment value as a string (``env_str``); ValueError for one that is not one line
    (``launch.env_value_problem``: an env file or a shell line cannot hold it safely)."""
    text = env_str(value)
    problem = env_value_problem(text)
    if problem:
        raise ValueError(problem)
    return text


def canonical_nccl(var: str, value: Any) -> str:
    """``nccl.validate_value`` for NCCL_* variables; raises ValueError with its message."""
    return nccl.validate_value(var, env_str(value))


def canonical_value(name: str, value: Any) -> Any:
    """The value a config stores for parameter ``name``: env values as strings, NCCL ones
    canonicalized (raises ValueError for a value NCCL refuses)."""
    if name.startswith("env."):
        if value is None or isinstance(value, (list, dict)):
            raise ValueError(f"env values must be strings, numbers or booleans, not {shown(value)}")
        text = env_value(value)
        if name.startswith("env.NCCL_"):
            return canonical_nccl(name[4:], text)
        return text
    return value


# ---- parameters ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Param:
    """One parameter: categorical (``choices``) or integer range (``low..high`` by ``step``).

    ``when`` is the condition as ``((other_param, (allowed values...)), ...)``: the
    parameter is active only when every other parameter is active with one of the values.
    """

    name: str
    kind: str  # "categorical" | "int"
    choices: tuple | None = None
    low: int | None = None
    high: int | None = None
    step: int = 1
    log: bool = False
    when: tuple[tuple[str, tuple], ...] = ()

    @property
    def condition(self) -> dict[str, tuple]:
        return dict(self.when)

    def _bounds(self) -> tuple[int, int]:
        """``low`` and ``high`` of an int parameter (the loader sets both for every one)."""
        assert self.low is not None and self.high is not None, f"{self.name}: an int parameter without bounds"
        return self.low, self.high

    def count(self) -> int:
        if self.kind == "categorical":
            return len(self.choices or ())
        low, high = self._bounds()
        return (high - low) // self.step + 1

    def values(self, limit: int | None = None) -> tuple | None:
        """Every value; None when there are more than ``limit``."""
        if limit is not None and self.count() > limit:
            return None
        if self.kind == "categorical":
            return tuple(self.choices or ())
        low, high = self._bounds()
        return tuple(range(low, high + 1, self.step))

    def allows(self, value: Any) -> bool:
        if self.kind == "categorical":
            return any(same(value, c) for c in self.choices or ())
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                return False
        low, high = self._bounds()
        return low <= value <= high and (value - low) % self.step == 0

    def allowed_text(self) -> str:
        if self.kind == "categorical":
            return "one of " + ", ".join(repr(c) for c in self.choices or ())
        step = f" in steps of {self.step}" if self.step != 1 else ""
        return f"an integer from {self.low} to {self.high}{step}"

    def distribution(self):
        if self.kind == "categorical":
            return CategoricalDistribution(list(self.choices or ()))
        low, high = self._bounds()
        return IntDistribution(low, high, log=self.log, step=self.step)

    def suggest(self, trial) -> Any:
        if self.kind == "categorical":
            return trial.suggest_categorical(self.name, list(self.choices or ()))
        low, high = self._bounds()
        return trial.suggest_int(self.name, low, high, step=self.step, log=self.log)


# ---- the space -----------------------------------------------------------------------------

class SearchSpace:
    """Parameters, conditions and constraints of one search space (immutable).

    A *config* holds only active parameters. ``context`` supplies the non-parameter
    names of the constraints.
    """

    def __init__(self, params: Sequence[Param], constraints: Sequence[Constraint] = (),
                 context: Mapping[str, Any] | None = None, file: str | None = None,
                 description: str | None = None):
        self.params: tuple[Param, ...] = tuple(params)
        self.constraints: tuple[Constraint, ...] = tuple(constraints)
        self.context: dict[str, Any] = dict(context or {})
        self.file = file
        self.description = description
        self._by_name = {p.name: p for p in self.params}
        self._order = _topological(self.params, file)
        self._enum_cache: dict[int, list[Config] | None] = {}

    # -- basic facts
    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def param(self, name: str) -> Param:
        return self._by_name[name]

    def _identity(self) -> tuple:
        return (self.params, tuple(c.expr for c in self.constraints),
                tuple(sorted(self.context.items(), key=lambda kv: kv[0])))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SearchSpace) and self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash((self.params, tuple(c.expr for c in self.constraints)))

    def __repr__(self) -> str:
        return f"SearchSpace({', '.join(self.names)}; {len(self.constraints)} constraints; file={self.file!r})"

    # -- conditions
    def _condition_holds(self, param: Param, config: Mapping[str, Any]) -> bool:
        return all(parent in config and any(same(config[parent], v) for v in values)
                   for parent, values in param.when)

    def active(self, config: Mapping[str, Any]) -> Config:
        """``config`` without the space parameters whose condition is false (keys that are
        not parameters of this space are kept)."""
        out = dict(config)
        for p in self._order:  # parents before children: a child of a dropped parent drops too
            if p.name in out and not self._condition_holds(p, out):
                del out[p.name]
        return out

    def active_names(self, config: Mapping[str, Any]) -> tuple[str, ...]:
        """The parameters that are active for ``config`` (present or not)."""
        view: dict[str, Any] = {}
        names = []
        for p in self._order:
            if self._condition_holds(p, view):
                names.append(p.name)
                if p.name in config:
                    view[p.name] = config[p.name]
        return tuple(n for n in self.names if n in names)

    def project(self, config: Mapping[str, Any]) -> Config:
        """Only the active parameters of this space from ``config`` (e.g. for enqueue_trial)."""
        act = self.active(config)
        return {n: act[n] for n in self.names if n in act}

    # -- Optuna
    def suggest(self, trial) -> Config:
        """Ask ``trial`` (an ``optuna.Trial``) for every active parameter, parents first.

        The result may still violate a constraint: check ``feasible`` and report the
        trial as infeasible/pruned rather than running it."""
        config: Config = {}
        for p in self._order:
            if self._condition_holds(p, config):
                config[p.name] = p.suggest(trial)
        return {n: config[n] for n in self.names if n in config}

    def distributions(self) -> dict[str, Any]:
        """``{name: optuna distribution}`` of every parameter (e.g. for ``create_trial``,
        ``study.add_trial`` or checking what ``study.enqueue_trial`` gets)."""
        return {p.name: p.distribution() for p in self.params}

    # -- membership and feasibility
    def why_not(self, config: Mapping[str, Any]) -> str | None:
        """Why ``config`` is not a point of this space (ignoring constraints), or None."""
        act = self.active_names(config)
        for name in act:
            if name not in config:
                return f"missing the active parameter {name}"
            p = self._by_name[name]
            if not p.allows(config[name]):
                return f"{name}={brief(config[name])} is not {p.allowed_text()}"
        for name in config:
            if name in self._by_name and name not in act:
                return f"{name} is inactive here (its condition {dict(self._by_name[name].when)} is false)"
            if name not in self._by_name:
                return f"{name} is not a parameter of this space"
        return None

    def contains(self, config: Mapping[str, Any]) -> bool:
        """True when ``config`` is exactly a point of the space: every active parameter
        set to an allowed value, nothing else, and every constraint satisfied."""
        return self.why_not(config) is None and self.feasible(config) is None

    def feasible(self, config: Mapping[str, Any]) -> str | None:
        """None when every constraint holds for ``config`` (+ context); else the reason."""
        values = {**self.context, **self.active(config)}
        for c in self.constraints:
            try:
                ok = c.evaluate(values)
            except ConstraintError as exc:
                return f"constraint {brief(c.expr)} cannot be evaluated: {exc}"
            if not ok:
                return f"constraint {brief(c.expr)} is false for {_describe(c, values)}"
        return None

    # -- enumeration
    def _raw(self, limit: int) -> list[Config] | None:
        partial: list[Config] = [{}]
        for p in self._order:
            values = p.values(limit)
            if values is None:
                return None
            grown: list[Config] = []
            for c in partial:
                if self._condition_holds(p, c):
                    grown.extend({**c, p.name: v} for v in values)
                else:
                    grown.append(c)
                if len(grown) > limit:
                    return None
            partial = grown
        return [{n: c[n] for n in self.names if n in c} for c in partial]

    def enumerate(self, limit: int = ENUMERATE_LIMIT) -> list[Config] | None:
        """Every feasible config (conditions honoured), in a stable order; None when the
        space has more than ``limit`` configs before filtering or an int range is wider."""
        if limit not in self._enum_cache:
            raw = self._raw(limit)
            self._enum_cache[limit] = None if raw is None else [c for c in raw if self.feasible(c) is None]
        cached = self._enum_cache[limit]
        return None if cached is None else [dict(c) for c in cached]

    def size(self, limit: int = ENUMERATE_LIMIT) -> int | None:
        """Number of distinct feasible configs; None when larger than ``limit``."""
        configs = self.enumerate(limit)
        return None if configs is None else len(configs)

    # -- load-time checks
    def check(self) -> None:
        """Refuse dead choices, constraints false or unevaluable for this context, and
        spaces with no feasible config. Called by ``load_space``/``load_job``."""
        for i, c in enumerate(self.constraints):
            key = f"constraints[{i}]"
            if not c.params:
                try:
                    ok = c.evaluate(self.context)
                except ConstraintError as exc:
                    raise BadInput(f"constraint {brief(c.expr)} cannot be evaluated: {exc}",
                                   file=self.file, key=key) from None
                if not ok:
                    raise BadInput(f"constraint {brief(c.expr)} is false for this job "
                                   f"({_describe(c, self.context)}), so no config is feasible",
                                   file=self.file, key=key)
            elif len(c.params) == 1:
                p = self._by_name[c.params[0]]
                for v in p.values(CHECK_LIMIT * 5) or ():
                    env = {**self.context, p.name: v}
                    try:
                        ok = c.evaluate(env)
                    except ConstraintError as exc:
                        raise BadInput(f"constraint {brief(c.expr)} cannot be evaluated for {p.name}={brief(v)}: {exc}",
                                       file=self.file, key=key) from None
                    if not ok:
                        raise BadInput(
                            f"dead choice: constraint {brief(c.expr)} rules out {p.name}={brief(v)} in every config "
                            f"({_describe(c, env)}); remove {brief(v)} from params.{p.name} or change the "
                            f"constraint (allowed here: values for which it holds)",
                            file=self.file, key=key)
        raw = self._raw(CHECK_LIMIT)
        if raw is None:
            return
        for config in raw:
            values = {**self.context, **config}
            for i, c in enumerate(self.constraints):
                try:
                    c.evaluate(values)
                except ConstraintError as exc:
                    raise BadInput(f"constraint {brief(c.expr)} cannot be evaluated for {config}: {exc}",
                                   file=self.file, key=f"constraints[{i}]") from None
        if not any(self.feasible(c) is None for c in raw):
            raise BadInput("no config satisfies every constraint; loosen the constraints or add choices",
                           file=self.file, key="constraints")


def _describe(c: Constraint, values: Mapping[str, Any]) -> str:
    return ", ".join(f"{n}={brief(values[n])}" for n in c.names if n in values) or "no values"


def _topological(params: Sequence[Param], file: str | None) -> tuple[Param, ...]:
    by_name = {p.name: p for p in params}
    order: list[Param] = []
    state: dict[str, int] = {}  # 1 visiting, 2 done

    def visit(p: Param, chain: list[str]):
        if state.get(p.name) == 2:
            return
        if state.get(p.name) == 1:
            cycle = " -> ".join(chain + [p.name])
            raise BadInput(f"conditions form a cycle ({cycle}); a parameter cannot depend on itself",
                           file=file, key=f"params.{p.name}.when")
        state[p.name] = 1
        for parent, _ in p.when:
            visit(by_name[parent], chain + [p.name])
        state[p.name] = 2
        order.append(p)

    for p in params:
        visit(p, [])
    return tuple(order)


# ---- loading -------------------------------------------------------------------------------

def load_space(path: str | os.PathLike, context: Mapping[str, Any] | None = None, *,
               file: str | None = None) -> SearchSpace:
    """Load and check a space YAML file (see the module docstring); BadInput on any problem.

    ``context`` holds the non-parameter names constraints may use (``Job.context()``).
    ``file`` is how the path is shown in messages (default: relative to the cwd).
    """
    shown_file = file or display_path(path)
    data = read_yaml_mapping(path, file=shown_file, what="search space", allowed=SPACE_KEYS)
    space = space_from_dict(data, context, file=shown_file)
    space.check()
    return space


def space_from_dict(data: Any, context: Mapping[str, Any] | None = None, *,
                    file: str | None = None) -> SearchSpace:
    """Build a space from parsed YAML without the load-time ``check()`` (``load_space``
    and ``load_job`` run it). Syntax, names, values and conditions are checked here."""
    data = check_keys(data, SPACE_KEYS, file=file, key=None, what="a search space mapping")
    if "params" not in data:
        raise BadInput("a search space needs 'params:', a mapping of parameter name to "
                       "{choices: [...]} or {type: int, low, high}", file=file, key="params")
    raw_params = data["params"]
    if not isinstance(raw_params, Mapping) or not raw_params:
        raise BadInput(f"must be a non-empty mapping of parameter name to {{choices: [...]}} or "
                       f"{{type: int, low, high}}, not {shown(raw_params)}", file=file, key="params")
    description = data.get("description")
    if description is not None and not isinstance(description, str):
        raise BadInput(f"must be a string, not {shown(description)}", file=file, key="description")

    params: list[Param] = []
    conditions: dict[str, Any] = {}
    for name, spec in raw_params.items():
        problem = check_param_name(name)
        if problem:
            raise BadInput(problem, file=file, key=f"params.{name}")
        param, when = _parse_param(name, spec, file)
        params.append(param)
        if when is not None:
            conditions[name] = when
    by_name = {p.name: p for p in params}
    for name, when in conditions.items():
        by_name[name] = _with_condition(by_name[name], when, by_name, file)
    params = [by_name[p.name] for p in params]

    raw_constraints = data.get("constraints") or []
    if not isinstance(raw_constraints, list):
        raise BadInput(f"must be a list of expression strings such as 'tp_size <= gpus_per_node', "
                       f"not {shown(raw_constraints)}", file=file, key="constraints")
    ctx = dict(context or {})
    names = [p.name for p in params]
    known = names + [k for k in ctx if k not in by_name]
    constraints = [parse_constraint(expr, known, names, file=file, key=f"constraints[{i}]")
                   for i, expr in enumerate(raw_constraints)]
    return SearchSpace(params, constraints, ctx, file=file, description=description)


def _parse_param(name: str, spec: Any, file: str | None) -> tuple[Param, Any]:
    key = f"params.{name}"
    if isinstance(spec, list):
        spec = {"choices": spec}
    if not isinstance(spec, Mapping):
        raise BadInput(f"must be {{choices: [...]}} (or a list of choices) or "
                       f"{{type: int, low: .., high: ..}}, not {shown(spec)}", file=file, key=key)
    kind = spec.get("type")
    if kind is None:
        kind = "categorical" if "choices" in spec else "int" if ("low" in spec or "high" in spec) else None
    if kind is None:
        raise BadInput("needs 'choices: [...]' (categorical) or 'type: int' with low and high",
                       file=file, key=key)
    if kind not in PARAM_KINDS:
        raise BadInput(f"unknown type {brief(kind)}{did_you_mean(str(kind), PARAM_KINDS)}; "
                       f"allowed: {', '.join(PARAM_KINDS)}", file=file, key=f"{key}.type")
    if kind == "categorical":
        check_keys(spec, CATEGORICAL_KEYS, file=file, key=key)
        if "choices" not in spec:
            raise BadInput("a categorical parameter needs 'choices: [...]'", file=file, key=f"{key}.choices")
        choices = spec["choices"]
        if not isinstance(choices, list) or not choices:
            raise BadInput(f"must be a non-empty list of values (strings, numbers, booleans), "
                           f"not {shown(choices)}", file=file, key=f"{key}.choices")
        out: list[Any] = []
        for i, value in enumerate(choices):
            ckey = f"{key}.choices[{i}]"
            if not scalar(value):
                raise BadInput(f"choices must be strings, numbers, booleans or null, not {shown(value)}",
                               file=file, key=ckey)
            try:
                value = canonical_value(name, value)
            except ValueError as exc:
                raise BadInput(_with_value(str(exc), value), file=file, key=ckey) from None
            if any(same(value, prior) for prior in out):
                raise BadInput(f"duplicate choice {brief(value)}; choices must be unique", file=file, key=ckey)
            out.append(value)
        return Param(name=name, kind="categorical", choices=tuple(out)), spec.get("when")

    check_keys(spec, INT_KEYS, file=file, key=key)
    if name.startswith("env.NCCL_"):
        raise BadInput("NCCL variables take categorical choices (each value is checked against "
                       "NCCL's allowed values); use {choices: [...]}", file=file, key=f"{key}.type")
    for bound in ("low", "high"):
        if bound not in spec:
            raise BadInput(f"an int parameter needs '{bound}'", file=file, key=f"{key}.{bound}")
        v = spec[bound]
        if isinstance(v, bool) or not isinstance(v, int):
            raise BadInput(f"must be an integer, not {shown(v)}", file=file, key=f"{key}.{bound}")
    low, high = spec["low"], spec["high"]
    step = spec.get("step", 1)
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise BadInput(f"must be an integer >= 1, not {shown(step)}", file=file, key=f"{key}.step")
    log = spec.get("log", False)
    if not isinstance(log, bool):
        raise BadInput(f"must be true or false, not {shown(log)}", file=file, key=f"{key}.log")
    if low > high:
        raise BadInput(f"low ({low}) must be <= high ({high})", file=file, key=f"{key}.low")
    if (high - low) % step:
        raise BadInput(f"high - low ({high} - {low}) must be a multiple of step ({step}); "
                       f"e.g. high: {low + (high - low) // step * step}", file=file, key=f"{key}.high")
    if log and step != 1:
        raise BadInput(f"log: true needs step 1, not {step}", file=file, key=f"{key}.step")
    if log and low < 1:
        raise BadInput(f"log: true needs low >= 1, not {low}", file=file, key=f"{key}.low")
    return Param(name=name, kind="int", low=low, high=high, step=step, log=log), spec.get("when")


def _with_condition(param: Param, when: Any, by_name: Mapping[str, Param], file: str | None) -> Param:
    key = f"params.{param.name}.when"
    if not isinstance(when, Mapping) or not when:
        raise BadInput(f"must be a non-empty mapping of parameter -> value or list of values, "
                       f"e.g. {{graph_capture: true}}; not {shown(when)}", file=file, key=key)
    out = []
    for parent, values in when.items():
        pkey = f"{key}.{parent}"
        if parent == param.name:
            raise BadInput("a parameter cannot be conditional on itself", file=file, key=pkey)
        if parent not in by_name:
            others = [n for n in by_name if n != param.name]
            raise BadInput(f"{brief(parent)} is not a parameter of this space{did_you_mean(str(parent), others)}; "
                           f"allowed: {', '.join(others)}", file=file, key=pkey)
        parent_param = by_name[parent]
        vals = values if isinstance(values, list) else [values]
        if not vals:
            raise BadInput("must name at least one value", file=file, key=pkey)
        canon = []
        for v in vals:
            if not scalar(v):
                raise BadInput(f"must be a value or a list of values, not {shown(v)}", file=file, key=pkey)
            try:
                v = canonical_value(parent, v)
            except ValueError as exc:
                raise BadInput(_with_value(str(exc), v), file=file, key=pkey) from None
            if not parent_param.allows(v):
                raise BadInput(f"{brief(v)} never matches: {parent} is {parent_param.allowed_text()}",
                               file=file, key=pkey)
            canon.append(v)
        out.append((parent, tuple(canon)))
    return Param(**{**param.__dict__, "when": tuple(out)})


def _with_value(message: str, value: Any) -> str:
    return message if repr(value) in message or str(value) in message else f"{brief(value)}: {message}"


__all__ = [
    "Param", "SearchSpace", "load_space", "space_from_dict", "check_param_name", "canonical_value",
    "PARAM_KINDS", "NAME_RULE", "ENUMERATE_LIMIT",
]
