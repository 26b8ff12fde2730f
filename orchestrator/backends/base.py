"""The one abstract base every server backend implements, and its contract.

A backend says how to start one kind of server for a configuration; it starts nothing
itself. Who calls it: the job loader at ``validate`` time (``__init__``,
``check_config`` for every value of the space, ``normalize``, ``default_config``), the
search policy (``normalize``: a config's identity), the node's trial runner
(``launch_spec``, ``watch_rules``, ``device``, ``gpus_per_trial``, ``version``), ``export``
(``launch_spec`` for the command it prints) and ``doctor`` (``installed_release``,
``diagnose``). Instances are built per job (and again on each node from plain settings),
used by one thread at a time, and hold no state a call changes: every method but
``version`` (which may cache what it detected) is a pure function of the settings and its
arguments, so the same config gives the same command on every node and in every export.

Required: ``kind`` (class attribute), ``default_config``, ``launch_spec``,
``example_settings`` (class level: settings that build the backend on any machine, for the
contract test, tests/backends/test_contract.py). Everything else has a default that fits a
server of one process tree that answers ``GET /health`` with 200 when ready.

Where the server is found (``LOCATION_SETTINGS``: ``python``, ``executable``) is not part
of what a study measures: ``identity_settings()`` leaves it out of the study's identity,
and every trial records the command it resolved and ``version()`` instead.

A backend is found by its ``kind`` (``orchestrator.backends``: built in, or registered by
another distribution under the ``ncclsweep.backends`` entry-point group).
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar

from orchestrator.backends import allreduce, common, speculative
from orchestrator.core import engines, nccl
from orchestrator.core.engines import Engine
from orchestrator.core.errors import BadInput, ConfigRejected
from orchestrator.core.launch import TRANSIENT_PROCESSES, LaunchSpec, WatchRules
from orchestrator.core.measurement import GRAPHS, RegimeMark

Config = dict[str, Any]

# Neutral (backend-independent) parameter names a search space may use; the speculative ones
# are described in orchestrator.backends.speculative, the all-reduce ones in .allreduce.
NEUTRAL_PARAMS = ("tp_size", "pp_size", "graph_capture", "capture_sizes", "custom_all_reduce", *speculative.PARAMS,
                  *allreduce.PARAMS)


class Backend(abc.ABC):
    """How to start one kind of server for a configuration (see module docstring)."""

    kind: ClassVar[str]
    # settings that say where the server is found, not what it computes (module docstring)
    LOCATION_SETTINGS: ClassVar[tuple[str, ...]] = ("python", "executable")

    def __init__(self, settings: dict[str, Any] | None, job_file: str | None = None):
        """Take the job's ``backend.settings``; a subclass validates them strictly here.

        Args:
            settings: the mapping under ``backend.settings`` (None: empty).
            job_file: the job file, for error messages.
        Raises:
            BadInput: a setting is unknown or wrong, naming ``backend.settings.<key>``.
        """
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
        """GPUs one server for ``config`` needs: TP x PP (x DP where the server has data
        parallelism). The pre-flight and the space's TP checks compare it with the node's."""
        return int(config.get("tp_size", 1)) * int(config.get("pp_size", 1))

    def gpus_occupied(self, config: Config, gpus_per_node: int) -> int:
        """GPUs a server of ``config`` keeps to itself, what a GPU-hour price charges it
        (``core.price``): ``gpus_per_trial``; a backend that cannot count them says the node's."""
        return self.gpus_per_trial(config)

    def load_marks(self, config: Config) -> list[RegimeMark]:
        """Where a server of ``config`` changes regime as its batch grows (``core.capacity``: the
        goodput search probes each and the load above it): here the largest of ``capture_sizes``
        with graphs captured; a backend adds its own (max-num-seqs, ...). The engine's log, read by
        the trial once the server is up, replaces a mark of the same kind."""
        if config.get("graph_capture") is False or not config.get("capture_sizes"):
            return []
        try:
            largest = max(common.capture_sizes_of(config["capture_sizes"]))
        except ValueError:
            return []
        return [RegimeMark(largest, GRAPHS, "capture_sizes")]

    def normalize(self, config: Config) -> Config:
        """A config's effective settings, its identity in the study: two configs that run the
        same server normalize to the same mapping (``records.config_key``).

        The backend's defaults are filled in (leaving a setting at its default equals spelling
        it out), NCCL values case-folded, NCCL settings dropped at world size 1 (NCCL never
        runs a collective there). Pure; a subclass extends it for its own flags.
        Returns:
            A new mapping, sorted by name.
        """
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
        """Refuse a config this backend cannot express (``graph_capture`` on a CPU reference
        server, a flag the installed release does not have). Called at ``validate`` time for
        every config of the space (or every value applied to the baseline), so a night never
        meets it first at 3 a.m.

        Raises:
            ConfigRejected: one line naming the parameter and what the release allows.
        """

    @classmethod
    def example_settings(cls) -> dict[str, Any]:
        """Settings that build this backend on any machine, with no server installed: the
        contract test (tests/backends/test_contract.py) builds every registered backend
        from them."""
        raise NotImplementedError(f"{cls.__name__} gives no example_settings()")

    @abc.abstractmethod
    def default_config(self) -> Config:
        """The server's own defaults as a config (neutral params and ``backend.*`` flags): the
        baseline when the job names none, and what ``normalize`` fills in."""

    def default_values(self) -> Config:
        """What each parameter is when a config leaves it out, as far as the server goes:
        ``default_config()`` plus the values that mean "unset". Two configs that agree
        only in such values have no setting in common that could explain their agreement
        (the golden reference's outvote rule, ``reference.shared_departure``)."""
        return dict(self.default_config())

    @abc.abstractmethod
    def launch_spec(self, config: Config, host: str, port: int) -> LaunchSpec:
        """How to start one server for ``config`` listening on ``host:port``.

        Pure (no process started, nothing written): ``validate --commands`` and ``export``
        print it, the trial runs it.
        Args:
            config: a normalized config the backend accepted (``check_config``).
        Returns:
            The argv and the environment *delta* of the config (its ``env.*`` params, NCCL
            values canonical: ``common.config_env``); where readiness is asked
            (``health_path``, ``ready_status``) and the OpenAI ``model`` name.
        """

    # The engine this backend's servers run, as their log and /metrics say it (start-up phases,
    # notices, regime lines, speculative and prefix-cache metric names, custom all-reduce world
    # sizes: ``core.engines.Engine``); registered when the class is defined, so that the node reads
    # it in every log (the ``command`` backend's too). None: no engine of its own to read.
    ENGINE: ClassVar[Engine | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Register the subclass's engine (``ENGINE``) with ``core.engines``.

        Raises:
            ValueError: another engine of the same name is registered already.
        """
        super().__init_subclass__(**kwargs)
        if cls.ENGINE is not None:
            engines.register(cls.ENGINE)

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
        """Where the server computes: "cuda" for real servers, "cpu" for the reference server
        on CPU (whose memory bandwidth the ceiling measures)."""
        return "cuda"

    def version(self) -> str | None:
        """The release of the server this backend would start, when it can be detected (a
        trial records it; the flag checks read that release's parser). May cache."""
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

    def allreduce_warnings(self, config: Config, log_text: str) -> list[str]:
        """What the server's log says about the all-reduce path a config asked for
        (``allreduce.backend``) when the engine did not take it: warnings that start with
        ``nccl.ENGINE_PATH_WARNING`` (``allreduce.warning``). Empty when it took it, when the log
        does not say, or when the config asks for none."""
        return []

    def engine_fallbacks(self, config: Config, log_text: str) -> list[dict[str, Any]]:
        """The config's values the server's log says the engine disabled, each with what it ran
        instead (``allreduce.fallback`` records: the custom all-reduce turned off on PCIe, whatever
        asked for it). Empty when it ran what was asked, or the log does not say."""
        return []

    def torch_python(self) -> str | None:
        """The interpreter whose torch (and the NCCL it loads) the server runs; None: this one.
        The NCCL release rules are judged by at validate time (a job may declare it instead)."""
        return None

    def model_facts(self) -> dict[str, Any]:
        """What the report needs for the ceiling: bytes_per_token, allreduces_per_step,
        hidden_size, dtype_bytes; empty when unknown."""
        return {}


def _env_str(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)
