"""What every model-serving framework's backend shares (vLLM, SGLang): settings, the
installed release and its flags, the head of the command line, the neutral params,
``normalize`` and ``check_config``. A subclass states only how its server differs.

Settings: ``model`` (required; a ``.gguf`` file is refused where the release's
``--load-format`` has no gguf: ``check_model_format``), ``served_model_name``,
``extra_args`` (passed through after the tuned flags, checked against the release's flags), ``python`` (the server's
interpreter), ``version`` (the release to spell flags for; default the installed one),
``model_facts``; a subclass adds its own (``SETTINGS``).

The release is ``settings.version``, else the one installed in the server's Python
(``detect_version``). Its flags (``flags()``) come from that installation's own parser
(dumped once and cached: ``known_flags.installed_table``); with no release installed,
from the table bundled for ``settings.version``; with no version at all, from the newest
bundled table ("assumed"); a release with neither is checked by its spellings only.

Params: ``tp_size`` -> ``TP_FLAG N`` (always), ``pp_size`` -> ``PP_FLAG N``,
``custom_all_reduce: false`` -> ``--disable-custom-all-reduce``, ``graph_capture`` and
``capture_sizes`` -> ``graph_args`` (the subclass), the ``speculative.*`` params ->
``speculative_args`` (the subclass; checked against ``speculative_methods()``, the release's,
by ``orchestrator.backends.speculative``), ``allreduce.*`` -> the flags and environment of
``allreduce_paths()`` (the subclass: what the release offers; checked by
``orchestrator.backends.allreduce``), ``backend.<flag>`` -> flags
(``orchestrator.backends.flags``), ``env.*`` -> the server's environment.

Subclass contract: the class attributes below, ``command()`` (argv up to the model),
``graph_args(config)``; optionally ``speculative_methods()`` with ``speculative_args(config)``
(without them the speculative params are refused), ``allreduce_paths()`` (without it the
``allreduce.*`` params are refused) and ``allreduce_warnings(config, log_text)``,
``check_engine(config)``, ``normalize_engine(out)``, ``read_settings()``, ``pass_through()``.
"""

from __future__ import annotations

import sys
from typing import Any, ClassVar

from orchestrator.backends import allreduce, common, known_flags, speculative
from orchestrator.backends.base import Backend, Config, LaunchSpec
from orchestrator.backends.flags import FlagChecker, Spelling
from orchestrator.core import versions
from orchestrator.core.errors import brief
from orchestrator.core.measurement import BATCH, GRAPHS, RegimeMark

SHARED_SETTINGS = {
    "served_model_name": "name in the OpenAI API (default: model)",
    "extra_args": "list of extra command-line arguments, passed through",
    "model_facts": "layers, heads, kv_heads, hidden_size, dtype_bytes, bytes_per_token, allreduces_per_step, "
                   "moe (true/false), experts",
    "version": "release to build flags for (default: the installed one)",
}
HINTS = {"model_path": "model", "model_name": "served_model_name"}

# vLLM's and SGLang's own defaults: one GPU, CUDA graphs on, custom all-reduce on
SERVING_DEFAULTS = {"tp_size": 1, "graph_capture": True, "custom_all_reduce": True}


class ServingBackend(Backend):
    """An OpenAI-compatible model server with a release-dependent command line."""

    package: ClassVar[str]  # the distribution whose release decides the flags ("vllm")
    server: ClassVar[str]  # its name in messages ("vLLM")
    parser_recipe: ClassVar[str]  # how parser_dump builds its parser ("vllm", or "DIST MODULE:CALLABLE")
    example_release: ClassVar[str]  # shown when settings.version is malformed
    SETTINGS: ClassVar[dict[str, str]]  # the subclass's own settings ("model" first), with help
    TP_FLAG: ClassVar[str]
    PP_FLAG: ClassVar[str]
    DP_PARAM: ClassVar[str | None] = None  # the backend.<flag> param of data-parallel replicas
    MANAGED: ClassVar[dict[str, str]]  # flags the backend sets -> the param that sets them
    SPELLINGS: ClassVar[dict[str, list[Spelling]]] = {}
    HANDLED: ClassVar[tuple[str, ...]] = ()  # backend.<flag> params graph_args consumes
    GRAPH_ONLY: ClassVar[tuple[str, ...]] = ()  # params that cannot matter without graphs
    GRAPH_MAX_FLAGS: ClassVar[tuple[str, ...]] = ()  # flags naming the largest captured batch (``load_marks``)
    BATCH_FLAGS: ClassVar[tuple[str, ...]] = ()  # flags naming the most sequences run at once (``load_marks``)

    def __init__(self, settings: dict[str, Any] | None, job_file: str | None = None):
        super().__init__(settings, job_file)
        allowed = {**self.SETTINGS, **SHARED_SETTINGS}
        common.check_setting_keys(self, allowed, HINTS)
        self.model = common.str_setting(self, "model", required=True)
        self.served_model_name = common.str_setting(self, "served_model_name")
        self.extra_args = common.list_setting(self, "extra_args")
        self.python = common.str_setting(self, "python")
        self.version_override = common.str_setting(self, "version")
        if self.version_override and versions.parse_version(self.version_override) is None:
            raise self.bad("version", f"must be a release like '{self.example_release}', "
                                      f"not {brief(self.version_override)}")
        self.facts = common.model_facts_setting(self)
        self._checker: FlagChecker | None = None
        self.flag_note = ""
        self.read_settings()
        problem = self.flags().extra_problem(self.pass_through())  # what reaches the command line as is
        if problem:
            raise self.bad("extra_args", problem)
        self.check_model_format()

    @classmethod
    def example_settings(cls) -> dict[str, Any]:
        return {"model": "/models/example", "version": cls.example_release}

    # ---- hooks --------------------------------------------------------------------------------
    def read_settings(self) -> None:
        """Read the subclass's own settings (BadInput via ``self.bad``)."""

    def command(self) -> list[str]:
        """argv that starts the server, up to and including the model."""
        raise NotImplementedError

    def graph_args(self, config: Config) -> list[str]:
        """argv for ``graph_capture``/``capture_sizes`` (and HANDLED params)."""
        raise NotImplementedError

    def speculative_methods(self) -> speculative.Methods | None:
        """What the release can do with speculative decoding; None: nothing the tuner can
        set (every ``speculative.*`` param is refused)."""
        return None

    def speculative_args(self, config: Config) -> list[str]:
        """argv for the ``speculative.*`` params of a normalized, checked config (nothing
        without a method: ``speculative.method: none`` is the baseline's server)."""
        return []

    def allreduce_paths(self) -> allreduce.Paths | None:
        """The all-reduce paths the release offers and how it spells each; None: none the tuner
        can choose (every ``allreduce.*`` param is refused)."""
        return None

    def check_engine(self, config: Config) -> None:
        """ConfigRejected for what only this server refuses."""

    def normalize_engine(self, out: Config) -> None:
        """Fold this server's aliases and defaults into a normalized config, in place."""

    def pass_through(self) -> list[str]:
        """The extra arguments as they go on the command line."""
        return list(self.extra_args)

    def load_marks(self, config: Config) -> list[RegimeMark]:
        """The largest captured batch (``capture_sizes``, else a ``GRAPH_MAX_FLAGS`` value, as a
        ``backend.<flag>`` param or in ``extra_args``; none without graphs) and the most sequences
        run at once (``BATCH_FLAGS``): what the config asks for (the trial reads what the engine ran
        with from its log)."""
        marks = super().load_marks(config)
        if config.get("graph_capture", True) is not False and not marks:
            found = self._flag_value(config, self.GRAPH_MAX_FLAGS)
            if found is not None:
                marks.append(RegimeMark(found[0], GRAPHS, found[1]))
        found = self._flag_value(config, self.BATCH_FLAGS)
        if found is not None:
            marks.append(RegimeMark(found[0], BATCH, found[1]))
        return marks

    def _flag_value(self, config: Config, flags: tuple[str, ...]) -> tuple[int, str] | None:
        """(value, where it was given) of the first of ``flags`` the config's ``backend.<flag>`` params
        or the ``extra_args`` give as a positive number (a list of sizes: its largest)."""
        for flag in flags:
            name = flag.lstrip("-").replace("-", "_")
            value = _largest(config.get(f"backend.{name}"))
            if value is not None:
                return value, f"backend.{name} {value}"
        args = self.pass_through()
        for i, word in enumerate(args):
            for flag in flags:
                raw = args[i + 1] if word == flag and i + 1 < len(args) else \
                    word.split("=", 1)[1] if word.startswith(flag + "=") else None
                value = _largest(raw)
                if value is not None:
                    return value, f"{flag} {value}"
        return None

    # ---- release and flags --------------------------------------------------------------------
    def probe_python(self) -> str | None:
        """The interpreter to ask for the installed release (None: this one)."""
        return None if self.python in (None, sys.executable) else self.python

    def server_python(self) -> str | None:
        """The interpreter whose parser is the release's flags."""
        return self.python or sys.executable

    def torch_python(self) -> str | None:
        python = self.server_python()
        return None if python in (None, sys.executable) else python

    def detect_version(self) -> str | None:
        return versions.package_version(self.package, self.probe_python())

    @classmethod
    def installed_release(cls) -> str | None:
        return versions.package_version(cls.package)

    def version(self) -> str | None:
        return self.version_override or self.detect_version()

    def release(self) -> tuple[int, int, int] | None:
        return versions.parse_version(self.version())

    def assumed_release(self) -> tuple[int, int, int]:
        """The release spellings assume when none is known: the newest bundled table's."""
        bundled = known_flags.bundled_versions(self.package)
        return (versions.parse_version(bundled[-1]) if bundled else None) or (0, 0, 0)

    def effective_release(self) -> tuple[int, int, int]:
        return self.release() or self.assumed_release()

    def flags(self) -> FlagChecker:
        if self._checker is None:
            table = self._flag_table()
            self._checker = FlagChecker(table, self.release(), self.assumed_release(), self.MANAGED,
                                        self.SPELLINGS, self.server)
        return self._checker

    def _flag_table(self) -> known_flags.FlagTable | None:
        """The installed release's parser, else the bundled table of the wanted release;
        ``flag_note`` says which (``doctor`` prints it)."""
        installed = self.detect_version()
        wanted = self.version()
        python = self.server_python()
        failed = ""
        if installed and python and versions.parse_version(installed) == versions.parse_version(wanted):
            found = known_flags.installed_table(self.package, python, installed, self.parser_recipe)
            if not isinstance(found, str):
                self.flag_note = f"flags: {found.source}"
                return found
            failed = f"the installed parser could not be read: {found}; "
        table = known_flags.bundled(self.package, wanted)
        if table is not None:
            self.flag_note = f"flags: {failed}{table.source}" + ("" if wanted else " (release assumed)")
        else:
            self.flag_note = (f"flags: {failed}no table for {self.server} {wanted}; only the spellings the "
                              f"backend knows are checked")
        return table

    def diagnose(self) -> tuple[list[str], list[str]]:
        self.flags()  # sets flag_note
        warnings = []
        if self.version() is None:
            warnings.append(f"{self.kind} is not installed where ncclsweep runs (or its version cannot be read); "
                            f"set backend.settings.version so flags are spelled for the right release")
        lines = [f"backend {self.kind} {self.flag_note}"]
        paths = self.allreduce_paths()
        if paths is not None:
            lines.append(f"all-reduce backends (allreduce.backend): {', '.join(paths.names)} ({paths.source})")
        return lines, warnings

    def check_model_format(self) -> None:
        """A GGUF file as the model needs a release whose ``--load-format`` has gguf: refused
        here, at validate time, where the release's flags (installed parser, else bundled
        table) list the formats and gguf is not among them; a release whose formats are not
        known is not refused."""
        if not self.model.lower().endswith(".gguf"):
            return
        checker = self.flags()
        info = checker.table.flags.get("--load-format") if checker.table is not None else None
        if info is None or info.choices is None or "gguf" in info.choices:
            return
        raise self.bad("model", f"{brief(self.model)} is a GGUF file, which {checker.release} cannot load (its "
                                f"--load-format takes {', '.join(info.choices)}; no gguf); serve a GGUF with "
                                f"llama.cpp (backend kind: llamacpp), or give {self.server} a Hugging Face checkpoint "
                                f"directory (config.json + safetensors; a quantized one such as AWQ, GPTQ or FP8 "
                                f"to save memory), or use a {self.server} release whose --load-format accepts gguf")

    # ---- the contract -------------------------------------------------------------------------
    def default_config(self) -> Config:
        return dict(SERVING_DEFAULTS)

    def gpus_per_trial(self, config: Config) -> int:
        replicas = config.get(self.DP_PARAM, 1) if self.DP_PARAM else 1
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
            replicas = 1  # check_config reports a bad value; this only sizes the GPU request
        return super().gpus_per_trial(config) * replicas

    def check_config(self, config: Config) -> None:
        common.check_neutral(config, self.job_file)
        methods = self.speculative_methods()
        if methods is None:
            speculative.refuse(config, self.flags().release, self.job_file)
        else:
            speculative.check(config, methods, self.job_file)
        paths = self.allreduce_paths()
        if paths is None:
            allreduce.refuse(config, self.flags().release, self.job_file)
        else:
            allreduce.check(config, paths, self.job_file)
        self.check_engine(config)
        checker = self.flags()
        for name, value in sorted(self.backend_flags_of(config).items()):
            if name not in self.HANDLED:
                checker.param_words(name, value, self.job_file)
        self.check_nccl_env(config)

    def default_values(self) -> Config:
        # no speculative decoding is what a config without the params runs
        return {**super().default_values(), speculative.METHOD: speculative.NONE}

    def normalize(self, config: Config) -> Config:
        """Defaults filled in; settings that cannot matter dropped: graph settings without
        graphs, custom all-reduce at tp_size 1, speculative settings without a method (and
        those its method ignores: ``speculative.normalize``); capture sizes in one spelling."""
        out = super().normalize(config)
        out.setdefault("pp_size", 1)
        methods = self.speculative_methods()
        if methods is not None:
            speculative.normalize(out, methods)
        allreduce.normalize(out)
        self.normalize_engine(out)
        if not out["graph_capture"]:
            for name in self.GRAPH_ONLY:
                out.pop(name, None)
        if "capture_sizes" in out:
            try:
                out["capture_sizes"] = ",".join(map(str, common.capture_sizes_of(out["capture_sizes"])))
            except ValueError:
                pass
        if out["tp_size"] == 1:
            out.pop("custom_all_reduce", None)  # no all-reduce without tensor parallelism
        return out

    def launch_spec(self, config: Config, host: str, port: int) -> LaunchSpec:
        argv = [*self.command(), self.TP_FLAG, str(int(config.get("tp_size", 1)))]
        if "pp_size" in config:
            argv += [self.PP_FLAG, str(int(config["pp_size"]))]
        argv += ["--host", host, "--port", str(port)]
        if self.served_model_name:
            argv += ["--served-model-name", self.served_model_name]
        argv += self.graph_args(config)
        argv += self.speculative_args(config)
        if config.get("custom_all_reduce") is False:
            argv.append("--disable-custom-all-reduce")
        path = allreduce.path_of(config, self.allreduce_paths())
        argv += list(path.flags) if path is not None else []
        checker = self.flags()
        graphs = config.get("graph_capture", True) is not False
        for name, value in sorted(self.backend_flags_of(config).items()):
            if name in self.HANDLED or (not graphs and f"backend.{name}" in self.GRAPH_ONLY):
                continue  # graph_args spelled it, or it cannot matter without graphs
            argv += checker.param_words(name, value, self.job_file)
        argv += self.pass_through()
        env = {**dict(path.env if path is not None else ()), **common.config_env(self, config)}
        return LaunchSpec(argv=argv, env=env, host=host, port=port, health_path="/health",
                          model_name=self.served_model_name or self.model)

    def model_facts(self) -> dict[str, Any]:
        """``settings.model_facts`` over what the checkpoint's config.json says (local
        Hugging Face directories only; a GGUF file says nothing here)."""
        return {**common.facts_from_checkpoint(self.model), **self.facts}


def _largest(value: Any) -> int | None:
    """A flag's positive batch size (the largest of a list, '1 2 4' or '1,2,4'); None for anything else."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (list, tuple)):
        sizes = [_largest(v) for v in value]
        return max((x for x in sizes if x is not None), default=None)
    try:
        found = [int(x) for x in str(value).replace(",", " ").split()]
    except ValueError:
        return None
    return max(found) if found and min(found) > 0 else None
