"""Backend for the embedded reference server (``python -m orchestrator.refserver``).

The default target: runs on CPU (gloo) or CUDA (NCCL), so a study can run anywhere.
Tunable: ``tp_size``, ``graph_capture`` + ``capture_sizes`` (CUDA only),
``backend.threads``, ``backend.dtype``, ``backend.max_batch`` and any ``env.*``. It has
no speculative decoding: ``speculative.*`` params (but ``speculative.method: none``) are refused.
"""

from __future__ import annotations

import dataclasses
import difflib
import sys
from typing import Any

import orchestrator
from orchestrator.backends import allreduce, common, refserver_engine, speculative
from orchestrator.backends.base import Backend, Config, LaunchSpec
from orchestrator.backends.flags import did_you_mean
from orchestrator.core.errors import ConfigRejected, brief
from orchestrator.core.measurement import BATCH, RegimeMark
from orchestrator.refserver.presets import PRESETS

_SETTINGS = {
    "model": "preset name (tiny, 1b, 8b)",
    "device": "cpu or cuda",
    "seed": "weight seed (int)",
    "fault": "inject a fault, e.g. crash-on-start, garbage, crash-after:3 (testing the tuner)",
    "python": "python executable that runs the server",
    "served_model_name": "model id in the OpenAI API",
    "extra_args": "list of extra command-line arguments",
    "max_batch": "default --max-batch when the space does not tune it",
    "dims": "explicit dimensions overriding the preset (layers, hidden, heads, kv_heads, ffn, vocab)",
}
_FLAGS = {"threads": int, "dtype": str, "max_batch": int, "fault": str}
# ``backend.fault`` lets a test space mix healthy and broken servers; "none" = healthy.
FAULTS = ("none", "crash-on-start", "hang-on-start", "hang-in-decode", "garbage", "slow-start", "crash-after",
          "misscored-prompts")
_DTYPES = ("float32", "bfloat16", "float16")
DIMS = ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab")  # the dimensions the server takes as flags


class RefServerBackend(Backend):
    kind = "refserver"
    ENGINE = refserver_engine.ENGINE  # its ranks' start-up lines

    def __init__(self, settings: dict[str, Any] | None, job_file: str | None = None):
        super().__init__(settings, job_file)

        for key in self.settings:
            if key not in _SETTINGS:
                near = difflib.get_close_matches(key, _SETTINGS, n=1)
                hint = f" (did you mean {brief(near[0])}?)" if near else ""
                raise self.bad(key, f"unknown setting {brief(key)}{hint}; allowed: {', '.join(_SETTINGS)}")

        self.model = str(self.settings.get("model", "tiny"))
        if self.model not in PRESETS:
            raise self.bad("model", f"unknown preset {brief(self.model)}; allowed: {', '.join(PRESETS)}")
        self.device_name = str(self.settings.get("device", "cpu"))
        if self.device_name not in ("cpu", "cuda"):
            raise self.bad("device", f"must be cpu or cuda, not {brief(self.device_name)}")
        extra = self.settings.get("extra_args", [])
        if not isinstance(extra, list) or not all(isinstance(a, (str, int, float)) for a in extra):
            raise self.bad("extra_args", "must be a list of strings")
        self.extra_args = [str(a) for a in extra]
        self.dims_override = self._dims_setting()
        self.python = str(self.settings.get("python", sys.executable))
        self.dims()  # the dimensions together (hidden divisible by heads, ...), refused here, at the setting

    def _dims_setting(self) -> dict[str, int]:
        """``settings.dims``: each key a dimension the server has a flag for, each value >= 1."""
        dims = self.settings.get("dims") or {}
        if not isinstance(dims, dict):
            raise self.bad("dims", f"must be a mapping like {{layers: 4, hidden: 256}}, not {brief(dims)}")
        for key, value in dims.items():
            if key not in DIMS:
                raise self.bad(f"dims.{key}" if isinstance(key, str) else "dims",
                               f"unknown dimension {brief(key)}{did_you_mean(str(key), DIMS)}; allowed: "
                               f"{', '.join(DIMS)}")
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise self.bad(f"dims.{key}", f"must be an integer >= 1, not {brief(value)}")
        return dict(dims)

    @classmethod
    def example_settings(cls) -> dict[str, Any]:
        return {"model": "tiny", "device": "cpu"}

    def dims(self):
        base = PRESETS[self.model]
        if not self.dims_override:
            return base
        dims = dataclasses.replace(base, **self.dims_override)  # type: ignore[arg-type]  # keys: _dims_setting
        why = dims.dims_error()
        if why:
            why = why.replace("--kv-heads", "kv_heads").replace("--", "")  # the settings' names, not the flags'
            raise self.bad("dims", f"{why} (with preset {self.model} for the dimensions not given)")
        return dims

    def default_config(self) -> Config:
        return {"tp_size": 1, "graph_capture": False}

    def default_values(self) -> Config:
        # no fault injected is the server's own behaviour (the flag is for testing the tuner)
        return {**super().default_values(), "backend.fault": "none"}

    def check_config(self, config: Config) -> None:
        tp = common.positive_int(config, "tp_size", self.job_file)
        pp = common.positive_int(config, "pp_size", self.job_file)
        dims = self.dims()
        why = dims.tp_error(tp)
        if why:
            raise ConfigRejected(f"tp_size={tp} cannot shard the model: {why}", file=self.job_file, key="tp_size")
        if pp != 1:
            raise ConfigRejected("the reference server has no pipeline parallelism; pp_size must be 1",
                                 file=self.job_file, key="pp_size")
        if config.get("graph_capture") and self.device_name != "cuda":
            raise ConfigRejected("graph_capture=true needs device cuda; the reference server on CPU runs eager only",
                                 file=self.job_file, key="graph_capture")
        if "custom_all_reduce" in config:
            raise ConfigRejected("the reference server has no custom all-reduce; drop custom_all_reduce",
                                 file=self.job_file, key="custom_all_reduce")
        speculative.refuse(config, "the reference server", self.job_file)
        allreduce.refuse(config, "the reference server", self.job_file, "its all-reduce is torch.distributed's")
        self.check_nccl_env(config)
        for flag, value in self.backend_flags_of(config).items():
            if flag not in _FLAGS:
                raise ConfigRejected(f"unknown reference-server flag; allowed: {', '.join(_FLAGS)}",
                                     file=self.job_file, key=f"backend.{flag}")
            if flag == "fault" and str(value).split(":")[0] not in FAULTS:
                raise ConfigRejected(f"fault must be one of {', '.join(FAULTS)} (optionally KIND:N), "
                                     f"not {brief(value)}", file=self.job_file, key="backend.fault")
            if flag == "dtype" and value not in _DTYPES:
                raise ConfigRejected(f"dtype must be one of {', '.join(_DTYPES)}, not {brief(value)}",
                                     file=self.job_file, key="backend.dtype")

    def load_marks(self, config: Config) -> list[RegimeMark]:
        """The largest captured batch (``capture_sizes``) and the batch the engine steps at most
        (``backend.max_batch``, or the setting), where the config gives them."""
        marks = super().load_marks(config)
        batch = config.get("backend.max_batch", self.settings.get("max_batch"))
        if isinstance(batch, int) and not isinstance(batch, bool) and batch > 0:
            marks.append(RegimeMark(batch, BATCH, f"--max-batch {batch}"))
        return marks

    def normalize(self, config: Config) -> Config:
        out = super().normalize(config)
        if not out.get("graph_capture"):
            out.pop("capture_sizes", None)  # capture sizes cannot matter without graphs
        return out

    def launch_spec(self, config: Config, host: str, port: int) -> LaunchSpec:
        argv = [self.python, "-m", "orchestrator.refserver",
                "--model", self.model, "--tp", str(int(config.get("tp_size", 1))),
                "--device", self.device_name, "--host", host, "--port", str(port)]
        for key, value in self.dims_override.items():
            argv += [f"--{key.replace('_', '-')}", str(value)]
        if "seed" in self.settings:
            argv += ["--seed", str(self.settings["seed"])]
        if config.get("graph_capture"):
            argv.append("--graph-capture")
            if config.get("capture_sizes"):
                argv += ["--capture-sizes", str(config["capture_sizes"])]
        flags = self.backend_flags_of(config)
        if "max_batch" not in flags and "max_batch" in self.settings:
            flags["max_batch"] = self.settings["max_batch"]
        fault = flags.pop("fault", None) or self.settings.get("fault")
        for flag, value in sorted(flags.items()):
            argv += [f"--{flag.replace('_', '-')}", str(value)]
        if fault and fault != "none":
            argv += ["--fault", str(fault)]
        if self.settings.get("served_model_name"):
            argv += ["--served-model-name", str(self.settings["served_model_name"])]
        argv += self.extra_args
        return LaunchSpec(argv=argv, env=common.config_env(self, config), host=host, port=port,
                          model_name=str(self.settings.get("served_model_name", self.model)),
                          metrics_path=None)  # the reference server has no /metrics (no speculation)

    def device(self) -> str:
        return self.device_name

    def version(self) -> str | None:
        return f"refserver {orchestrator.__version__}"

    def model_facts(self) -> dict[str, Any]:
        dims = self.dims()
        dtype = "float32" if self.device_name == "cpu" else "bfloat16"
        facts = dims.model_facts(dtype)
        facts.update(heads=dims.heads, kv_heads=dims.kv_heads)
        return facts
