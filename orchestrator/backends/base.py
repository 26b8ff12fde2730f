"""The one abstract base every server backend implements.

Contract (what the trial runner relies on):

- ``__init__(settings, job_file)`` receives the job's ``backend.settings`` mapping and
  validates it strictly, raising ``BadInput`` naming ``backend.settings.<key>``.
- ``check_config(config)`` raises ``ConfigRejected`` for a configuration this backend
  cannot express (e.g. ``graph_capture`` on a CPU reference server). It runs at
  ``validate`` time for every value of the space, never first at 3 a.m.
- ``launch_spec(config, host, port)`` is pure: it returns the argv and the environment
  *delta* (``env.*`` params included) that start one server for the config. No side
  effects, so ``validate --commands`` can print it.
- ``default_config()`` is the backend's own defaults as a config: the baseline when
  the job names none. ``default_values()`` (optional; default: ``default_config()``)
  adds values that mean the same as leaving a parameter out (the reference server's
  ``backend.fault: none``): a config that carries one does not depart from the server's
  defaults (``reference.shared_departure``).
- ``gpus_per_trial(config)`` is TP x PP (x DP where the server has data parallelism):
  how many GPUs one server needs.
- ``example_settings()`` (class level) builds the backend anywhere, for the contract test.
- ``normalize(config)`` maps a config to its effective settings so that two configs
  with the same effective settings compare equal (NCCL values case-folded; settings
  that cannot matter dropped, e.g. NCCL_* at world size 1).

Readiness is ``GET health_path`` answering ``ready_status`` while the process lives.

Where the server is found (``LOCATION_SETTINGS``: ``python``, ``executable``) is not part
of what a study measures: ``identity_settings()`` leaves it out of the study's identity,
and every trial records the command it resolved and ``version()`` instead.

Optional: ``version()`` (the server's release, for the records), ``installed_release()``
(class level: the release installed beside ncclsweep, which ``doctor`` lists),
``diagnose()`` (what ``doctor`` says about this job's server), ``device()``,
``model_facts()``. A backend is found by its ``kind`` (``orchestrator.backends``:
built in, or registered by another distribution under the ``ncclsweep.backends``
entry-point group).
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar

from orchestrator.core import nccl
from orchestrator.core.errors import BadInput, ConfigRejected
from orchestrator.core.launch import TRANSIENT_PROCESSES, LaunchSpec, WatchRules

Config = dict[str, Any]

# Neutral (backend-independent) parameter names a search space may use.
NEUTRAL_PARAMS = ("tp_size", "pp_size", "graph_capture", "capture_sizes", "custom_all_reduce")


class Backend(abc.ABC):
    """How to start one kind of server for a configuration (see module docstring)."""

    kind: ClassVar[str]
    # settings that say where the server is found, not what it computes (module docstring)
    LOCATION_SETTINGS: ClassVar[tuple[str, ...]] = ("python", "executable")

    def __init__(self, settings: dict[str, Any] | None, job_file: str | None = None):
        self.settings = dict(settings or {})
        self.job_file = job_file

    def identity_settings(self) -> dict[str, Any]:
        """The settings that make a study what it is: all but where the server is found
        (a full path instead of a PATH lookup, another install of the same server). Which
        release ran is in each trial's record (``server.version``), not here."""
        return {k: v for k, v in self.settings.items() if k not in self.LOCATION_SETTINGS}

    # ---- helpers shared by all backends -------------------------------------------------
    def bad(self, key: str, message: str) -> BadInput:
        return BadInput(message, file=self.job_file, key=f"backend.settings.{key}")

    @staticmethod
    def env_of(config: Config) -> dict[str, str]:
        """The ``env.*`` params of a config as an environment delta."""
        out = {}
        for name, value in config.items():
            if name.startswith("env."):
                out[name[4:]] = _env_str(value)
        return out

    @staticmethod
    def backend_flags_of(config: Config) -> dict[str, Any]:
        """The ``backend.<flag>`` params of a config, flag names without the prefix."""
        return {name[8:]: value for name, value in config.items() if name.startswith("backend.")}

    def check_nccl_env(self, config: Config) -> None:
        """Every ``env.NCCL_*`` value against NCCL's allowed names (ConfigRejected otherwise)."""
        for name, value in config.items():
            if name.startswith("env.NCCL_"):
                try:
                    nccl.validate_value(name[4:], value)
                except ValueError as exc:
                    raise ConfigRejected(str(exc), file=self.job_file, key=name) from None

    # ---- the contract -------------------------------------------------------------------
    def gpus_per_trial(self, config: Config) -> int:
        return int(config.get("tp_size", 1)) * int(config.get("pp_size", 1))

    def normalize(self, config: Config) -> Config:
        """Effective settings: the backend's defaults filled in (a config that leaves a
        setting at its default equals one that spells it out), NCCL values case-folded,
        NCCL settings dropped at world size 1."""
        config = {**self.default_config(), **config}
        out: Config = {}
        world = self.gpus_per_trial(config)
        for name, value in sorted(config.items()):
            if name.startswith("env.NCCL_"):
                if world <= 1:
                    continue  # NCCL never runs a collective at world size 1
                value = nccl.normalize_value(name[4:], value)
            out[name] = value
        return out

    def check_config(self, config: Config) -> None:  # noqa: B027 - optional hook
        """Raise ConfigRejected for a config this backend cannot express."""

    @classmethod
    def example_settings(cls) -> dict[str, Any]:
        """Settings that build this backend on any machine, with no server installed: the
        contract test (tests/backends/test_contract.py) builds every registered backend
        from them."""
        raise NotImplementedError(f"{cls.__name__} gives no example_settings()")

    @abc.abstractmethod
    def default_config(self) -> Config:
        """The backend's own defaults, as a config."""

    def default_values(self) -> Config:
        """What each parameter is when a config leaves it out, as far as the server goes:
        ``default_config()`` plus the values that mean "unset". Two configs that agree
        only in such values have no setting in common that could explain their agreement
        (the golden reference's outvote rule, ``reference.shared_departure``)."""
        return dict(self.default_config())

    @abc.abstractmethod
    def launch_spec(self, config: Config, host: str, port: int) -> LaunchSpec:
        """argv + env delta for one server with this config."""

    # What the tree watch (orchestrator/node/treewatch.py) knows of this engine: lines it logs
    # when it is dead though its first process still runs, and helper processes (regular
    # expressions on the command line) that come and go without meaning harm.
    # Set on the class, or per instance from the backend's settings (``command``).
    FATAL_LOG_PATTERNS: tuple[str, ...] = ()
    TRANSIENT_PROCESSES: tuple[str, ...] = ()
    # the engine's own processes, by name or command line (empty: every descendant running
    # the server's executable counts)
    ESSENTIAL_PROCESSES: tuple[str, ...] = ()

    def watch_rules(self) -> WatchRules:
        """The rules the trial's ``TreeWatch`` applies to this backend's servers."""
        return WatchRules(fatal_log_patterns=tuple(self.FATAL_LOG_PATTERNS),
                          transient_processes=TRANSIENT_PROCESSES + tuple(self.TRANSIENT_PROCESSES),
                          essential_processes=tuple(self.ESSENTIAL_PROCESSES))

    def device(self) -> str:
        """Where the server computes: "cuda" for real servers (the memory the ceiling uses)."""
        return "cuda"

    def version(self) -> str | None:
        """Installed version of the server software, when it can be detected."""
        return None

    @classmethod
    def installed_release(cls) -> str | None:
        """The server's release installed beside ncclsweep (None when absent, or when the
        server is not software of its own); ``doctor`` lists it without a job."""
        return None

    def diagnose(self) -> tuple[list[str], list[str]]:
        """(lines, warnings) ``doctor`` prints about this job's server: which release was
        found, where its flags were read, what the user should set."""
        return [], []

    def model_facts(self) -> dict[str, Any]:
        """What the report needs for the ceiling: bytes_per_token, allreduces_per_step,
        hidden_size, dtype_bytes; empty when unknown."""
        return {}


def _env_str(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)
