"""The Backend contract (orchestrator/backends/base.py), checked on every registered
backend, built from its own ``example_settings()``: launch_spec is pure and carries the
port, normalize is idempotent, the default config passes check_config, NCCL values come
out canonical, GPUs per trial = TP x PP (x DP where the server has it), bad settings and
bad configs raise the one error type with the key at fault."""

from __future__ import annotations

import copy
import os

import psutil
import pytest

from orchestrator.backends import BUILTIN, backend_kinds, get_backend_class
from orchestrator.core.errors import BadInput, ConfigRejected

KINDS = backend_kinds()
JOB = "jobs/contract.yaml"

# configs built from the neutral params; each backend is held to those it accepts
CANDIDATES = [
    {},
    {"tp_size": 1},
    {"tp_size": 2},
    {"pp_size": 2},
    {"tp_size": 2, "pp_size": 2},
    {"graph_capture": False},
    {"tp_size": 2, "graph_capture": True, "capture_sizes": "4,1,2"},
    {"tp_size": 2, "custom_all_reduce": False},
    {"tp_size": 2, "env.NCCL_PROTO": "ll", "env.NCCL_ALGO": "ring"},
    {"tp_size": 2, "backend.split_mode": "tensor", "env.NCCL_PROTO": "simple,ll", "env.NCCL_ALGO": "tree"},
    {"tp_size": 1, "env.NCCL_PROTO": "LL"},
]


def build(kind: str):
    cls = get_backend_class(kind)
    return cls(cls.example_settings(), JOB)


def accepted(backend) -> list[dict]:
    out = []
    for config in CANDIDATES:
        try:
            backend.check_config(config)
        except ConfigRejected:
            continue
        out.append(config)
    return out


@pytest.fixture(autouse=True)
def nothing_installed(monkeypatch, tmp_path):
    """The contract holds wherever ncclsweep runs: no server release is read from this machine."""
    from orchestrator.backends.serving import ServingBackend

    monkeypatch.setattr(ServingBackend, "detect_version", lambda self: None)
    monkeypatch.setenv("PATH", str(tmp_path))  # no vllm / llama-server executable is found
    monkeypatch.chdir(tmp_path)


def test_every_builtin_backend_is_registered_and_covered():
    assert set(BUILTIN) <= set(KINDS)
    assert {"refserver", "vllm", "sglang", "command", "llamacpp"} <= set(KINDS)


@pytest.mark.parametrize("kind", KINDS)
def test_the_registered_class_is_the_kind(kind):
    assert get_backend_class(kind).kind == kind


@pytest.mark.parametrize("kind", KINDS)
def test_launch_spec_is_pure_and_carries_the_port(kind, tmp_path):
    backend = build(kind)
    configs = accepted(backend)
    assert len(configs) >= 3, f"{kind} accepts too few of the neutral configs to be checked: {configs}"
    children = {p.pid for p in psutil.Process().children(recursive=True)}
    for config in configs:
        before = copy.deepcopy(config)
        spec = backend.launch_spec(config, "127.0.0.1", 18123)
        assert spec == backend.launch_spec(config, "127.0.0.1", 18123)  # same answer twice
        assert config == before  # the config is not touched
        assert spec.port == 18123 and spec.base_url == "http://127.0.0.1:18123"
        assert "18123" in " ".join(spec.argv) and "127.0.0.1" in " ".join(spec.argv)
        other = backend.launch_spec(config, "127.0.0.1", 18124)
        assert [w.replace("18124", "18123") for w in other.argv] == spec.argv  # only the port differs
        assert spec.health_path.startswith("/") and 100 <= spec.ready_status <= 599
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in spec.env.items())
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= children  # nothing started
    assert os.listdir(tmp_path) == []  # nothing written


@pytest.mark.parametrize("kind", KINDS)
def test_normalize_is_idempotent(kind):
    backend = build(kind)
    for config in accepted(backend):
        once = backend.normalize(config)
        assert backend.normalize(once) == once, config
        assert backend.normalize(dict(reversed(list(config.items())))) == once  # order does not matter


@pytest.mark.parametrize("kind", KINDS)
def test_default_config_passes_check_config_and_is_the_empty_config(kind):
    backend = build(kind)
    default = backend.default_config()
    backend.check_config(default)
    assert backend.normalize(default) == backend.normalize({})
    backend.launch_spec(default, "127.0.0.1", 18123)


@pytest.mark.parametrize("kind", KINDS)
def test_nccl_values_are_canonical(kind):
    from orchestrator.core import nccl

    backend = build(kind)
    checked = 0
    for config in accepted(backend):
        normalized = backend.normalize(config)
        env = backend.launch_spec(config, "127.0.0.1", 18123).env
        for name, value in config.items():
            if not name.startswith("env.NCCL_"):
                continue
            canonical = nccl.normalize_value(name[4:], value)
            assert normalized.get(name, canonical) == canonical  # canonical, or dropped where NCCL cannot run
            assert env.get(name[4:], canonical) == canonical
            checked += name in normalized
        if backend.gpus_per_trial(config) == 1:
            assert not any(n.startswith("env.NCCL_") for n in normalized)  # no collective at world size 1
    assert checked, f"{kind} kept no NCCL setting in any multi-GPU config"
    with pytest.raises(ConfigRejected) as exc:
        backend.check_config({**backend.default_config(), "env.NCCL_PROTO": "LL129"})
    assert exc.value.key == "env.NCCL_PROTO" and JOB in str(exc.value)


@pytest.mark.parametrize("kind", KINDS)
def test_gpus_per_trial_is_tp_times_pp(kind):
    backend = build(kind)
    dp = getattr(type(backend), "DP_PARAM", None)
    sizes = set()
    for config in accepted(backend):
        tp, pp = int(config.get("tp_size", 1)), int(config.get("pp_size", 1))
        assert backend.gpus_per_trial(config) == tp * pp, config
        sizes.add(tp * pp)
        if dp:
            assert backend.gpus_per_trial({**config, dp: 3}) == tp * pp * 3
    assert max(sizes) > 1


@pytest.mark.parametrize("kind", KINDS)
def test_bad_settings_and_configs_raise_the_one_error_type(kind):
    cls = get_backend_class(kind)
    with pytest.raises(BadInput) as exc:
        cls({**cls.example_settings(), "no_such_setting": 1}, JOB)
    assert exc.value.key == "backend.settings.no_such_setting" and JOB in str(exc.value)
    assert "allowed:" in str(exc.value)
    backend = build(kind)
    for config, key in (({"tp_size": 0}, "tp_size"), ({"pp_size": "x"}, "pp_size")):
        with pytest.raises(ConfigRejected) as rejected:
            backend.check_config(config)
        assert rejected.value.key == key and JOB in str(rejected.value)


@pytest.mark.parametrize("kind", KINDS)
def test_where_the_server_is_found_is_not_part_of_its_identity(kind):
    """A full path instead of a PATH lookup, another install of the same server: the same
    study (each trial records the command and version it ran); every other setting counts."""
    cls = get_backend_class(kind)
    base = cls(cls.example_settings(), JOB)
    moved = 0
    for key in cls.LOCATION_SETTINGS:
        for value in ("/opt/a/bin/server", "/elsewhere/python3"):
            try:
                other = cls({**cls.example_settings(), key: value}, JOB)
            except BadInput:
                break  # not a setting of this backend
            assert other.identity_settings() == base.identity_settings(), (key, value)
            moved += 1
    if kind == "command":
        argv = list(cls.example_settings()["argv"])
        other = cls({**cls.example_settings(), "argv": ["/usr/local/bin/python3", *argv[1:]]}, JOB)
        assert other.identity_settings() == base.identity_settings()
        changed = cls({**cls.example_settings(), "argv": [*argv, "--threads", "2"]}, JOB)
        assert changed.identity_settings() != base.identity_settings()
        moved += 1
    assert moved or kind not in BUILTIN, f"{kind}: no setting says where its server is"
    kept = {k: v for k, v in base.settings.items() if k not in cls.LOCATION_SETTINGS}
    assert {k: v for k, v in base.identity_settings().items() if k != "argv"} == \
        {k: v for k, v in kept.items() if k != "argv"}
