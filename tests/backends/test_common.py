"""The helpers every backend uses (backends/common.py), through a backend written the way
docs/architecture.md "How to add a backend" says (steps 1-4): strict settings (unknown keys
with "did you mean", required and typed values) named ``backend.settings.<key>``; the
neutral params checked; the config's environment with NCCL values as NCCL spells them;
model facts read from a real Hugging Face checkpoint's config.json."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from orchestrator.backends import common
from orchestrator.backends.base import Backend, Config, LaunchSpec
from orchestrator.core.errors import BadInput, ConfigRejected


class ToyBackend(Backend):
    """A backend for a made-up server, written as the how-to says."""

    kind = "toy"
    SETTINGS = {"model": "path or id", "extra_args": "passed through", "model_facts": "numbers for the report"}

    def __init__(self, settings, job_file=None):
        super().__init__(settings, job_file)
        common.check_setting_keys(self, self.SETTINGS, {"model_path": "model"})
        self.model = common.str_setting(self, "model", required=True)
        self.extra = common.list_setting(self, "extra_args")
        self.facts = common.model_facts_setting(self)

    def check_config(self, config: Config) -> None:
        common.check_neutral(config, self.job_file)
        self.check_nccl_env(config)

    def default_config(self) -> Config:
        return {"tp_size": 1}

    def launch_spec(self, config: Config, host: str, port: int) -> LaunchSpec:
        tp = common.positive_int(config, "tp_size", self.job_file)
        return LaunchSpec(argv=["toy-server", self.model, "--tp", str(tp), "--port", str(port), *self.extra],
                          env=common.config_env(self, config), host=host, port=port)

    @classmethod
    def example_settings(cls):
        return {"model": "/models/toy"}


def bad_setting(settings, key, *words):
    with pytest.raises(BadInput) as info:
        ToyBackend(settings, "job.yaml")
    msg = str(info.value)
    assert msg.startswith(f"job.yaml: backend.settings.{key}: "), msg
    for word in words:
        assert word in msg, msg


def test_settings_are_strict_and_named_by_their_key():
    bad_setting({"model": "m", "extra_arg": []}, "extra_arg", "unknown setting 'extra_arg'",
                "did you mean 'extra_args'", "allowed: model, extra_args, model_facts")
    bad_setting({"model_path": "m"}, "model_path", "did you mean 'model'")  # the likely mistake's hint
    bad_setting({}, "model", "is required")
    bad_setting({"model": ""}, "model", "must be a non-empty string, not ''")
    bad_setting({"model": True}, "model", "non-empty string, not True")
    bad_setting({"model": "m", "extra_args": "--max-model-len 8192"}, "extra_args", "must be a list of strings")
    bad_setting({"model": "m", "model_facts": {"layer": 78}}, "model_facts.layer", "did you mean 'layers'")
    bad_setting({"model": "m", "model_facts": {"layers": 0}}, "model_facts.layers", "positive number, not 0")
    toy = ToyBackend({"model": 8, "extra_args": ["--seed", 3]})  # numbers are taken as their text
    assert toy.model == "8" and toy.extra == ["--seed", "3"]


def rejected(config, key, *words):
    with pytest.raises(ConfigRejected) as info:
        ToyBackend({"model": "m"}, "job.yaml").check_config(config)
    msg = str(info.value)
    assert msg.startswith(f"job.yaml: {key}: "), msg
    for word in words:
        assert word in msg, msg


def test_the_neutral_params_are_checked():
    ToyBackend({"model": "m"}).check_config({"tp_size": 2, "pp_size": 1, "graph_capture": True,
                                             "capture_sizes": "1,2,4", "env.NCCL_PROTO": "ll"})
    rejected({"tp_size": "two"}, "tp_size", "must be a positive integer, not 'two'")
    rejected({"pp_size": 0}, "pp_size", "positive integer")
    rejected({"graph_capture": "yes"}, "graph_capture", "must be true or false")
    rejected({"capture_sizes": "1,x"}, "capture_sizes", "batch sizes like '1,2,4,8'")
    rejected({"capture_sizes": "0,1"}, "capture_sizes", "positive batch sizes")
    rejected({"env.NCCL_PROTO": "LL129"}, "env.NCCL_PROTO", "LL129")
    assert common.positive_int({"tp_size": "4"}, "tp_size", None) == 4  # a number written as text
    assert common.capture_sizes_of("8, 1 4,4") == [1, 4, 8] and common.capture_sizes_of(16) == [16]
    assert common.capture_sizes_of([2, 1]) == [1, 2]


def test_the_environment_spells_nccl_values_as_nccl_does(tmp_path):
    spec = ToyBackend({"model": "m"}).launch_spec({"tp_size": 2, "env.NCCL_P2P_LEVEL": "phb",
                                                   "env.NCCL_PROTO": "simple,ll", "env.NCCL_P2P_DISABLE": True,
                                                   "env.OMP_NUM_THREADS": 4}, "127.0.0.1", 8000)
    assert spec.env == {"NCCL_P2P_LEVEL": "PHB", "NCCL_PROTO": "LL,Simple", "NCCL_P2P_DISABLE": "1",
                        "OMP_NUM_THREADS": "4"}
    # what the server sees: the delta on top of the node's environment, as a real process gets it
    env_line = subprocess.run([sys.executable, "-c", "import os; print(os.environ['NCCL_P2P_LEVEL'])"],
                              env={**spec.env, "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, check=True)
    assert env_line.stdout.strip() == "PHB"


def test_model_facts_come_from_the_checkpoint(tmp_path):
    checkpoint = tmp_path / "GLM-5-AWQ"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text(json.dumps({
        "architectures": ["Glm4vForConditionalGeneration"], "torch_dtype": "bfloat16",
        "text_config": {"num_hidden_layers": 78, "num_attention_heads": 64, "hidden_size": 6144,
                        "vocab_size": 151552}}))  # a multimodal checkpoint: its text model's numbers
    assert common.facts_from_checkpoint(str(checkpoint)) == {
        "layers": 78, "heads": 64, "kv_heads": 64, "hidden_size": 6144, "vocab_size": 151552, "dtype_bytes": 2}
    (tmp_path / "model.gguf").write_bytes(b"GGUF")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text("{not json")
    for says_nothing in ("meta-llama/Llama-3-8B", str(tmp_path / "model.gguf"), str(tmp_path / "broken"), None):
        assert common.facts_from_checkpoint(says_nothing) == {}
