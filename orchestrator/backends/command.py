"""Backend for any server started by a user-supplied argv template.

Settings::

    backend:
      kind: command
      settings:
        argv: ["{python}", "-m", "orchestrator.refserver", "--model", "tiny", "--tp", "{tp_size}",
               "--host", "{host}", "--port", "{port}", "{graph_capture?--graph-capture}",
               "--threads", "{backend.threads}"]
        health_path: /health      # GET this until it answers ready_status (default 200)
        metrics_path: /metrics    # Prometheus metrics: speculation's acceptance, prefix-cache hits (default none)
        ready_status: 200
        model_name: tiny          # the OpenAI "model" field (default "")
        defaults: {backend.threads: 2}   # values for placeholders a config may lack
        python: /path/to/python   # what {python} means (default: this interpreter)
        version: "1.2"            # reported as the server's version
        model_facts: {heads: 8, kv_heads: 4, layers: 4}   # for constraints and the report
        fatal_log_patterns: ["Worker .* died"]   # log lines that mean the server is dead
        transient_processes: ["my-compiler"]     # helper processes that may exit harmlessly
        essential_processes: ["my-worker"]       # the server's own processes (default: every
                                                 # descendant running the server's executable)

Placeholders, inside any argv element: ``{port}``, ``{host}``, ``{tp_size}`` (default 1),
``{pp_size}`` (default 1), ``{gpus}`` (GPUs one server gets: tp_size x pp_size),
``{python}``, and ``{<param>}`` for any config param (``{backend.threads}``,
``{env.NCCL_PROTO}``, ``{capture_sizes}``), filled from the config, else from
``defaults``. Booleans render as ``true``/``false``. ``{name?TEXT}`` renders TEXT when the
value is true (an element that renders empty is dropped): the way to pass a switch.
``{{`` and ``}}`` are literal braces.

``check_config`` refuses a placeholder that neither the config nor ``defaults`` fills,
and a param (other than ``env.*``, which reach the server through its environment, and
``tp_size``/``pp_size``, which size the GPUs) that no placeholder uses: a tuned value
that never reaches the server would measure the same server twice.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from orchestrator.backends import common
from orchestrator.backends.base import Backend, Config, LaunchSpec
from orchestrator.core.errors import ConfigRejected, brief

_SETTINGS = {
    "argv": "the command as a list, with {placeholders}",
    "health_path": "readiness path (default /health)",
    "metrics_path": "Prometheus metrics path: speculation's acceptance, prefix-cache hits (default none)",
    "ready_status": "HTTP status that means ready (default 200)",
    "model_name": "the OpenAI 'model' field (default '')",
    "defaults": "values for placeholders a config may lack",
    "python": "what {python} means (default: this interpreter)",
    "version": "the server's version, for the records",
    "model_facts": "layers, heads, kv_heads, hidden_size, ... for space constraints and the report",
    "fatal_log_patterns": "regular expressions: a log line that matches one means the server is dead",
    "transient_processes": "regular expressions on command lines of helper processes that may exit harmlessly",
    "essential_processes": "regular expressions on names or command lines of the server's own processes, whose "
                           "loss is fatal (default: every descendant running the server's executable)",
}
_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_.]*)(\?[^{}]*)?\}")


def placeholders(argv: list[str]) -> list[tuple[str, bool]]:
    """(name, conditional) for every placeholder in the template, in order."""
    out = []
    for element in argv:
        for m in _PLACEHOLDER.finditer(element):
            if m.group(1):
                out.append((m.group(1), m.group(2) is not None))
    return out


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class CommandBackend(Backend):
    """A user's own command line; see the module docstring."""

    kind = "command"

    def __init__(self, settings: dict[str, Any] | None, job_file: str | None = None):
        super().__init__(settings, job_file)
        common.check_setting_keys(self, _SETTINGS)
        argv = self.settings.get("argv")
        if not isinstance(argv, list) or not argv or not all(
                isinstance(a, (str, int, float)) and not isinstance(a, bool) for a in argv):
            raise self.bad("argv", "must be a non-empty list of strings, e.g. [my-server, --port, '{port}']")
        self.argv = [str(a) for a in argv]
        for i, element in enumerate(self.argv):
            leftover = _PLACEHOLDER.sub("", element)
            if "{" in leftover or "}" in leftover:
                raise self.bad(f"argv[{i}]", f"{brief(element)} has a brace that is not a placeholder like {{port}} "
                                             f"or {{graph_capture?--graph-capture}}; "
                                             "write {{ and }} for literal braces")
        names = [name for name, _ in placeholders(self.argv)]
        if "port" not in names:
            raise self.bad("argv", "must contain {port}: every trial runs its server on a fresh port")
        self.health_path = str(self.settings.get("health_path", "/health"))
        if not self.health_path.startswith("/"):
            raise self.bad("health_path", f"must start with '/', not {brief(self.health_path)}")
        metrics = self.settings.get("metrics_path")
        if metrics is not None and (not isinstance(metrics, str) or not metrics.startswith("/")):
            raise self.bad("metrics_path", f"must be a path starting with '/', not {brief(metrics)}")
        status = self.settings.get("ready_status", 200)
        if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599:
            raise self.bad("ready_status", f"must be an HTTP status code like 200, not {brief(status)}")
        self.ready_status = status
        self.model_name = str(self.settings.get("model_name", ""))
        defaults = self.settings.get("defaults") or {}
        if not isinstance(defaults, dict):
            raise self.bad("defaults", f"must be a mapping of param name to value, not {brief(defaults)}")
        self.defaults = dict(defaults)
        self.python = common.str_setting(self, "python") or sys.executable
        self.facts = common.model_facts_setting(self)
        self.FATAL_LOG_PATTERNS = self._patterns("fatal_log_patterns")
        self.TRANSIENT_PROCESSES = self._patterns("transient_processes")
        self.ESSENTIAL_PROCESSES = self._patterns("essential_processes")

    def _patterns(self, key: str) -> tuple[str, ...]:
        value = self.settings.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.bad(key, f"must be a list of regular expressions, not {brief(value)}")
        for i, pattern in enumerate(value):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise self.bad(f"{key}[{i}]", f"{brief(pattern)} is not a regular expression: {exc}") from None
        return tuple(value)

    @classmethod
    def example_settings(cls) -> dict[str, Any]:
        return {"argv": ["{python}", "-m", "orchestrator.refserver", "--model", "tiny", "--device", "cpu",
                         "--tp", "{tp_size}", "--host", "{host}", "--port", "{port}"], "model_name": "tiny"}

    def identity_settings(self) -> dict[str, Any]:
        """``argv[0]`` (the program, as found on PATH or by its path) is where the server is
        found, like ``python``: the rest of the template is what it runs."""
        out = super().identity_settings()
        out["argv"] = list(self.argv[1:])
        return out

    def version(self) -> str | None:
        value = self.settings.get("version")
        return None if value is None else str(value)

    def default_config(self) -> Config:
        return {"tp_size": 1}

    def default_values(self) -> Config:
        # a placeholder a config leaves out is filled from settings.defaults
        return {**super().default_values(), **self.defaults}

    def model_facts(self) -> dict[str, Any]:
        return dict(self.facts)

    def _values(self, config: Config, host: str = "127.0.0.1", port: int = 0) -> dict[str, Any]:
        tp = config.get("tp_size", self.defaults.get("tp_size", 1))
        pp = config.get("pp_size", self.defaults.get("pp_size", 1))
        values = {**self.defaults, **config, "tp_size": tp, "pp_size": pp, "host": host, "port": port,
                  "python": self.python}
        try:
            values["gpus"] = int(tp) * int(pp)
        except (TypeError, ValueError):
            values["gpus"] = tp
        return values

    def gpus_per_trial(self, config: Config) -> int:
        return int(self._values(config)["gpus"])

    def gpus_occupied(self, config: Config, gpus_per_node: int) -> int:
        """TP x PP where the template passes them on ({tp_size}, {pp_size} or {gpus}); else the
        command may run on any of the node's GPUs: it takes the node."""
        if {"tp_size", "pp_size", "gpus"} & {name for name, _ in placeholders(self.argv)}:
            return self.gpus_per_trial(config)
        return gpus_per_node

    def check_config(self, config: Config) -> None:
        file = self.job_file
        common.positive_int(config, "tp_size", file)
        common.positive_int(config, "pp_size", file)
        values = self._values(config)
        used = set()
        for name, conditional in placeholders(self.argv):
            used.add(name)
            if name not in values and not conditional:
                raise ConfigRejected(f"placeholder {{{name}}} in backend.settings.argv is filled by no param of this "
                                     f"config and no backend.settings.defaults entry; config params: "
                                     f"{', '.join(sorted(config)) or 'none'}", file=file, key=name)
        for name in config:
            if name.startswith("env.") or name in ("tp_size", "pp_size") or name in used:
                continue
            raise ConfigRejected(f"param {name} reaches no placeholder of backend.settings.argv, so the server "
                                 f"would never see it; add {{{name}}} (or {{{name}?--flag}} for a switch) to argv",
                                 file=file, key=name)
        self.check_nccl_env(config)

    def launch_spec(self, config: Config, host: str, port: int) -> LaunchSpec:
        values = self._values(config, host, port)

        def fill(m: re.Match) -> str:
            token = m.group(0)
            if token == "{{":
                return "{"
            if token == "}}":
                return "}"
            name, cond = m.group(1), m.group(2)
            if cond is not None:
                return cond[1:] if values.get(name) else ""
            if name not in values:
                raise ConfigRejected(f"placeholder {{{name}}} in backend.settings.argv is filled by no param or "
                                     f"default", file=self.job_file, key=name)
            return _text(values[name])

        argv = []
        for element in self.argv:
            rendered = _PLACEHOLDER.sub(fill, element)
            if rendered == "" and _PLACEHOLDER.search(element) and "?" in element:
                continue  # a switch placeholder whose value is false
            argv.append(rendered)
        return LaunchSpec(argv=argv, env=common.config_env(self, config), host=host, port=port,
                          health_path=self.health_path, ready_status=self.ready_status, model_name=self.model_name,
                          metrics_path=self.settings.get("metrics_path") or None)
