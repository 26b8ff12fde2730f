"""The all-reduce path as a neutral param (``allreduce.backend``, ``allreduce.max_size``): the
shared rules, and ``validate --commands`` on vLLM 0.26.0 / 0.33.0 and SGLang 0.5.23 jobs (the
bundled tables) spelling every value the release offers as that release takes it, a value it
lacks refused in one line with exit 2. Where each spelling comes from is in the backends'
docstrings (the releases' envs.py, compilation.py and server_args fields, read in their wheels)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator.backends import allreduce
from orchestrator.backends.llamacpp import LlamaCppBackend
from orchestrator.backends.refserver import RefServerBackend
from orchestrator.backends.sglang import SglangBackend
from orchestrator.backends.vllm import VllmBackend
from orchestrator.core.errors import ConfigRejected

REPO = Path(__file__).resolve().parents[2]

# what each release offers, from its bundled table (vLLM: env_vars and pass_config keys; SGLang: flags)
OFFERED = {
    ("vllm", "0.26.0"): ["nccl", "custom", "symm_mem", "nccl_symm_mem", "flashinfer", "flashinfer_fusion"],
    ("vllm", "0.33.0"): ["nccl", "custom", "symm_mem", "nccl_symm_mem", "flashinfer", "flashinfer_pcie_ipc",
                         "flashinfer_fusion"],
    ("sglang", "0.5.23"): ["nccl", "custom", "symm_mem", "nccl_symm_mem", "mscclpp", "flashinfer_fusion",
                           "flashinfer_fusion_trtllm", "flashinfer_fusion_mnnvl", "flashinfer_fusion_cutedsl"],
}
# how each value reaches the server: (environment it sets, words on the command line)
VLLM_SPELLING = {
    "nccl": ({"VLLM_ALLREDUCE_USE_SYMM_MEM": "0", "VLLM_ALLREDUCE_USE_FLASHINFER": "0"},
             ["--disable-custom-all-reduce"], False),
    "custom": ({"VLLM_ALLREDUCE_USE_FLASHINFER": "0"}, [], False),
    "symm_mem": ({"VLLM_ALLREDUCE_USE_SYMM_MEM": "1", "VLLM_ALLREDUCE_USE_FLASHINFER": "0"},
                 ["--disable-custom-all-reduce"], False),
    "nccl_symm_mem": ({"VLLM_USE_NCCL_SYMM_MEM": "1", "VLLM_ALLREDUCE_USE_FLASHINFER": "0"}, [], False),
    "flashinfer": ({"VLLM_ALLREDUCE_USE_FLASHINFER": "1"}, [], False),
    "flashinfer_pcie_ipc": ({"VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC": "1"}, [], False),
    "flashinfer_fusion": ({}, [], True),
}
FUSION_OFF = "--enforce-disable-flashinfer-allreduce-fusion"
SGLANG_SPELLING = {
    "nccl": ["--disable-custom-all-reduce", FUSION_OFF], "custom": [FUSION_OFF],
    "symm_mem": ["--enable-torch-symm-mem", FUSION_OFF], "nccl_symm_mem": ["--enable-symm-mem", FUSION_OFF],
    "mscclpp": ["--enable-mscclpp", FUSION_OFF],
    "flashinfer_fusion": ["--flashinfer-allreduce-fusion-backend", "auto"],
    "flashinfer_fusion_trtllm": ["--flashinfer-allreduce-fusion-backend", "trtllm"],
    "flashinfer_fusion_mnnvl": ["--flashinfer-allreduce-fusion-backend", "mnnvl"],
    "flashinfer_fusion_cutedsl": ["--flashinfer-allreduce-fusion-backend", "cutedsl"],
}
ALL_SWITCHES = {"--disable-custom-all-reduce", FUSION_OFF, "--enable-torch-symm-mem", "--enable-symm-mem",
                "--enable-mscclpp", "--flashinfer-allreduce-fusion-backend"}


def job_file(tmp_path: Path, kind: str, version: str, values: list[str], **extra) -> Path:
    """A job of ``kind`` at ``version`` (its bundled table: nothing is installed here) whose space
    tunes ``allreduce.backend`` over ``values`` at TP 4; the NCCL release is declared."""
    (tmp_path / "space.yaml").write_text(yaml.safe_dump({"params": {
        "tp_size": {"choices": [4]}, "allreduce.backend": {"choices": values}}}))
    job = {"study": "ar", "report_dir": str(tmp_path / "reports"), "gpus_per_node": 4, "space": "space.yaml",
           "backend": {"kind": kind, "settings": {"model": "/models/m", "version": version}},
           "nccl_version": "2.28.9", **extra}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def validate_commands(job: Path) -> subprocess.CompletedProcess:
    """``ncclsweep validate JOB --commands`` as a user runs it (in a directory where no vLLM or
    SGLang is installed: the bundled tables decide)."""
    return subprocess.run([sys.executable, "-m", "orchestrator", "validate", str(job), "--commands"],
                          capture_output=True, text=True, cwd=REPO, timeout=180)


def commands(out: str) -> list[tuple[dict[str, str], list[str]]]:
    """(environment, argv) of every sample line ``validate --commands`` printed."""
    lines = out.splitlines()
    got = []
    for i, line in enumerate(lines):
        if line.startswith("# sample"):
            words = shlex.split(lines[i + 1])
            n = next(j for j, w in enumerate(words) if "=" not in w or w.startswith("-"))
            got.append((dict(w.split("=", 1) for w in words[:n]), words[n:]))
    return got


@pytest.mark.parametrize("kind,version", list(OFFERED))
def test_validate_commands_spells_every_value_as_the_release_takes_it(tmp_path, kind, version):
    res = validate_commands(job_file(tmp_path, kind, version, OFFERED[(kind, version)]))
    assert res.returncode == 0, res.stderr
    seen: dict[str, tuple[dict[str, str], list[str]]] = {}
    for env, argv in commands(res.stdout):
        value = _value_of(kind, env, argv)
        assert value not in seen, f"two samples of {value}"
        seen[value] = (env, argv)
    assert sorted(seen) == sorted(OFFERED[(kind, version)])  # every value printed once, each its own spelling
    for value, (env, argv) in seen.items():
        if kind == "vllm":
            want_env, want_words, fused = VLLM_SPELLING[value]
            assert {k: v for k, v in env.items() if k.startswith("VLLM_")} == want_env, value
            assert [w for w in argv if w in ALL_SWITCHES] == want_words, value
            config = argv[argv.index("--compilation-config") + 1]
            assert f'"pass_config": {{"fuse_allreduce_rms": {"true" if fused else "false"}}}' in config, value
        else:
            assert _sglang_words(argv) == SGLANG_SPELLING[value], value
            assert not [k for k in env if k.startswith(("VLLM_", "SGLANG_"))]


def _sglang_words(argv: list[str]) -> list[str]:
    """The all-reduce switches of an SGLang command line, with the fusion backend's value."""
    fusion = "--flashinfer-allreduce-fusion-backend"
    return [w for i, w in enumerate(argv) if w in ALL_SWITCHES or argv[i - 1] == fusion]


def _value_of(kind: str, env: dict[str, str], argv: list[str]) -> str:
    """Which value a printed command spells (the inverse of the tables above)."""
    if kind == "sglang":
        return next(v for v, words in SGLANG_SPELLING.items() if words == _sglang_words(argv))
    config = argv[argv.index("--compilation-config") + 1]
    return next(v for v, (want_env, want_words, fused) in VLLM_SPELLING.items()
                if {k: x for k, x in env.items() if k.startswith("VLLM_")} == want_env
                and [w for w in argv if w in ALL_SWITCHES] == want_words
                and ('"fuse_allreduce_rms": true' in config) == fused)


@pytest.mark.parametrize("kind,version,value", [
    ("vllm", "0.26.0", "flashinfer_pcie_ipc"),  # FlashInfer's PCIe all-reduce arrived in 0.33
    ("vllm", "0.33.0", "mscclpp"),
    ("sglang", "0.5.23", "flashinfer_pcie_ipc"),
    ("sglang", "0.5.23", "Custom"),
])
def test_a_value_the_release_lacks_is_one_line_exit_2(tmp_path, kind, version, value):
    res = validate_commands(job_file(tmp_path, kind, version, ["nccl", value]))
    assert res.returncode == 2 and res.stdout == ""
    line = res.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert f"params.allreduce.backend: {value!r} is not an all-reduce backend of" in line
    assert f"{'vLLM' if kind == 'vllm' else 'SGLang'} {version}" in line
    assert "allowed: " + ", ".join(OFFERED[(kind, version)]) in line


# ---- the shared rules --------------------------------------------------------------------------

def vllm(version: str = "0.33.0", **settings) -> VllmBackend:
    return VllmBackend({"model": "/models/m", "version": version, **settings}, "job.yaml")


@pytest.mark.parametrize("text,size", [(65536, 65536), ("64KB", 65536), ("64 KiB", 65536), ("1MB", 1 << 20),
                                       ("512k", 512 * 1024), ("4096", 4096)])
def test_size_spellings(text, size):
    assert allreduce.size_bytes(text) == size


@pytest.mark.parametrize("text", ["64 GB", "-1", 0, True, "lots"])
def test_bad_sizes(text):
    with pytest.raises(ValueError, match="allreduce.max_size must be"):
        allreduce.size_bytes(text)


def test_the_fusion_size_limit_is_vllms_pass_config_in_mib():
    backend = vllm()
    config = backend.normalize({"tp_size": 4, "allreduce.backend": "flashinfer_fusion", "allreduce.max_size": "512KB"})
    backend.check_config(config)
    assert config["allreduce.max_size"] == 512 * 1024
    argv = backend.launch_spec(config, "h", 1).argv
    assert '"fi_allreduce_fusion_max_size_mb": 0.5' in argv[argv.index("--compilation-config") + 1]


@pytest.mark.parametrize("backend,value,needle", [
    (vllm(), "custom", "vLLM 0.33.0's custom all-reduce limit is fixed"),
    (SglangBackend({"model": "m", "version": "0.5.23"}), "custom", "SGLang 0.5.23 has no setting"),
])
def test_a_size_where_the_path_has_no_limit_to_set_is_refused(backend, value, needle):
    with pytest.raises(ConfigRejected) as exc:
        backend.check_config(backend.normalize({"tp_size": 4, "allreduce.backend": value,
                                                "allreduce.max_size": 65536}))
    assert exc.value.key == "allreduce.max_size" and needle in str(exc.value)


def test_refusals_one_line_each():
    backend = vllm()
    cases = [
        ({"tp_size": 2, "allreduce.backend": "nccl", "custom_all_reduce": False}, "custom_all_reduce",
         "both choose the all-reduce path"),
        ({"tp_size": 2, "allreduce.backend": "custom", "env.VLLM_ALLREDUCE_USE_FLASHINFER": "1"},
         "env.VLLM_ALLREDUCE_USE_FLASHINFER", "set by the tuner from allreduce.backend=custom"),
        ({"tp_size": 2, "allreduce.max_size": 4096}, "allreduce.max_size", "needs allreduce.backend"),
        ({"tp_size": 2, "allreduce.backend": "nccl", "allreduce.max_size": "huge"}, "allreduce.max_size",
         "must be a size"),
    ]
    for config, key, needle in cases:
        with pytest.raises(ConfigRejected) as exc:
            backend.check_config(config)
        assert exc.value.key == key and needle in str(exc.value) and "\n" not in str(exc.value)


def test_your_compilation_config_may_not_contradict_the_path():
    backend = vllm(compilation_config={"pass_config": {"fuse_allreduce_rms": False}})
    backend.check_config(backend.normalize({"tp_size": 2, "allreduce.backend": "nccl"}))  # agrees: fine
    with pytest.raises(ConfigRejected, match="sets pass_config.fuse_allreduce_rms: false, which allreduce.backend="
                                             "flashinfer_fusion sets to true"):
        backend.check_config(backend.normalize({"tp_size": 2, "allreduce.backend": "flashinfer_fusion"}))


def test_normalize_drops_what_cannot_matter():
    backend = vllm()
    assert "allreduce.backend" not in backend.normalize({"tp_size": 1, "allreduce.backend": "nccl"})
    two = backend.normalize({"tp_size": 2, "allreduce.backend": "nccl"})
    assert two["allreduce.backend"] == "nccl" and "custom_all_reduce" not in two  # the path decides
    assert backend.normalize({"tp_size": 2, "allreduce.backend": "custom", "allreduce.max_size": "64KB"})[
        "allreduce.max_size"] == 65536


@pytest.mark.parametrize("backend", [RefServerBackend({"model": "tiny", "device": "cpu"}, "job.yaml"),
                                     LlamaCppBackend({"model": "/m.gguf", "version": "b6000"}, "job.yaml")])
def test_backends_without_paths_refuse_them(backend):
    with pytest.raises(ConfigRejected, match="has no all-reduce path the tuner can choose; drop allreduce.backend"):
        backend.check_config({"tp_size": 1, "allreduce.backend": "nccl"})


def test_a_release_whose_table_lacks_the_variables_offers_nccl_and_custom():
    paths = vllm("0.20.0").allreduce_paths()
    assert paths is not None and paths.names == ("nccl", "custom") and paths.assumed
    spec = vllm("0.20.0").launch_spec(vllm("0.20.0").normalize({"tp_size": 2, "allreduce.backend": "nccl"}), "h", 1)
    assert "--disable-custom-all-reduce" in spec.argv and not [k for k in spec.env if k.startswith("VLLM_")]
