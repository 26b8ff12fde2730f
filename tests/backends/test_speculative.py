"""Speculative decoding as neutral params: spelled per server and release (vLLM's one
--speculative-config JSON with the user's own keys merged, SGLang's --speculative-algorithm
and counts), refused at validate time with one line where the release cannot do it (an unknown
method, a draft method without a draft, num_tokens < 1), normalized where a setting cannot
matter, and the MoE knobs checked against the release's values. The releases are the bundled
tables of vLLM 0.26.0 / 0.33.0 and SGLang 0.5.23, and a release installed in a real venv whose
``SpeculativeMethod`` the parser dump reads."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from launch import checked_argv

from orchestrator.backends import known_flags
from orchestrator.backends.llamacpp import LlamaCppBackend
from orchestrator.backends.refserver import RefServerBackend
from orchestrator.backends.sglang import SglangBackend
from orchestrator.backends.vllm import VllmBackend
from orchestrator.core import versions
from orchestrator.core.errors import BadInput, ConfigRejected

NGRAM = {"speculative.method": "ngram", "speculative.num_tokens": 4, "speculative.prompt_lookup_max": 4,
         "speculative.prompt_lookup_min": 2}
DRAFT = {"speculative.method": "draft_model", "speculative.num_tokens": 3, "speculative.model": "/models/draft-l2"}


@pytest.fixture(autouse=True)
def nothing_installed(monkeypatch, request):
    """Releases from the bundled tables only (the venv test installs its own)."""
    if "venv" in request.fixturenames:
        return
    for cls in (VllmBackend, SglangBackend):
        monkeypatch.setattr(cls, "detect_version", lambda self: None)
    monkeypatch.setattr(VllmBackend, "server_python", lambda self: None)


def vllm(version: str | None = "0.26.0", **settings) -> VllmBackend:
    return VllmBackend({"model": "/models/m", **({"version": version} if version else {}), **settings}, "jobs/x.yaml")


def sglang(**settings) -> SglangBackend:
    return SglangBackend({"model": "/models/m", "version": "0.5.23", **settings}, "jobs/x.yaml")


def spec_json(words: list[str]) -> dict | None:
    if "--speculative-config" not in words:
        return None
    assert words.count("--speculative-config") == 1
    return json.loads(words[words.index("--speculative-config") + 1])


def launched(backend, config: dict) -> list[str]:
    """argv of a config as a trial runs it: checked, normalized, launched."""
    return checked_argv(backend, backend.normalize(config))


# ---- vLLM: one --speculative-config per release ----------------------------------------------

@pytest.mark.parametrize("version", ["0.26.0", "0.33.0"])
def test_vllm_spells_the_params_as_one_speculative_config(version):
    b = vllm(version)
    assert spec_json(launched(b, NGRAM)) == {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4,
                                              "prompt_lookup_min": 2}
    assert spec_json(launched(b, DRAFT)) == {"method": "draft_model", "num_speculative_tokens": 3,
                                             "model": "/models/draft-l2"}
    table = known_flags.bundled("vllm", version)
    for config in (NGRAM, DRAFT):
        for flag in (w for w in launched(b, config) if w.startswith("--")):
            assert table.knows(flag), f"{flag} is not a flag of vLLM {version}"


def test_method_none_is_the_baseline_server():
    b = vllm()
    baseline = b.normalize(b.default_config())
    none = {"speculative.method": "none", "speculative.num_tokens": 4, "speculative.model": "/x"}
    assert b.normalize({**b.default_config(), **none}) == baseline  # the same config: measured once
    words = launched(b, none)
    assert spec_json(words) is None and not [w for w in words if w.startswith("--spec")]


def test_what_a_method_ignores_is_dropped():
    b = vllm()
    with_model = b.normalize({**NGRAM, "speculative.model": "/models/draft-l2"})
    assert "speculative.model" not in with_model and spec_json(launched(b, with_model))["method"] == "ngram"
    eagle = b.normalize({"speculative.method": "eagle", "speculative.num_tokens": 2, "speculative.model": "/e",
                         "speculative.prompt_lookup_max": 4})
    assert "speculative.prompt_lookup_max" not in eagle  # the n-gram window is ngram's
    mtp = b.normalize({"speculative.method": "mtp", "speculative.num_tokens": 1, "speculative.model": "/mtp"})
    assert spec_json(launched(b, mtp)) == {"method": "mtp", "num_speculative_tokens": 1, "model": "/mtp"}


@pytest.mark.parametrize("settings", [
    {"speculative_config": {"draft_tensor_parallel_size": 1}},
    {"extra_args": ["--speculative-config", '{"draft_tensor_parallel_size": 1}']},
    {"extra_args": ['--speculative-config={"draft_tensor_parallel_size": 1}']},
    {"extra_args": ["-sc", '{"draft_tensor_parallel_size": 1}']},
    {"extra_args": ["--speculative-config.draft_tensor_parallel_size=1"]},
])
def test_the_users_own_keys_are_merged(settings):
    b = vllm(extra_args=[*settings.get("extra_args", []), "--max-model-len", "4096"],
             **{k: v for k, v in settings.items() if k != "extra_args"})
    words = launched(b, DRAFT)
    assert spec_json(words) == {"method": "draft_model", "num_speculative_tokens": 3, "model": "/models/draft-l2",
                                "draft_tensor_parallel_size": 1}
    assert "-sc" not in words and words[-2:] == ["--max-model-len", "4096"]
    assert spec_json(launched(b, {})) is None  # no speculation: the user's keys cannot matter, nothing sent


@pytest.mark.parametrize("settings,key,needle", [
    ({"speculative_config": {"method": "ngram"}}, "speculative_config",
     "--speculative-config key 'method' is set by the tuner from speculative.method"),
    ({"extra_args": ["--speculative-config", '{"num_speculative_tokens": 3}']}, "extra_args",
     "'num_speculative_tokens' is set by the tuner from speculative.num_tokens"),
    ({"extra_args": ["--speculative-config.model=/d"]}, "extra_args", "speculative.model"),
    ({"extra_args": ["-sc", '{"prompt_lookup_max": 3}']}, "extra_args", "speculative.prompt_lookup_max"),
    ({"speculative_config": {"draft_tensor_parallel_size": 1},
      "extra_args": ["--speculative-config.draft_tensor_parallel_size=2"]}, "extra_args",
     "'draft_tensor_parallel_size' is given twice"),
    ({"extra_args": ["--speculative-config", "ngram"]}, "extra_args", "takes a JSON object"),
    ({"extra_args": ["--spec-method", "ngram"]}, "extra_args", "set by the tuner from speculative.method"),
    ({"extra_args": ["--spec-tokens", "3"]}, "extra_args", "speculative.num_tokens"),
    ({"speculative_config": "ngram"}, "speculative_config", "must be a mapping"),
])
def test_conflicting_own_keys_are_one_line(settings, key, needle):
    with pytest.raises(BadInput, match=needle) as exc:
        vllm(**settings)
    assert exc.value.key == f"backend.settings.{key}" and "\n" not in str(exc.value)


def test_the_compilation_config_merge_is_unchanged_beside_it():
    b = vllm(compilation_config={"pass_config": {"fuse_allreduce_rms": False}},
             speculative_config={"draft_tensor_parallel_size": 1})
    words = launched(b, {**NGRAM, "graph_capture": True})
    assert json.loads(words[words.index("--compilation-config") + 1]) == {
        "cudagraph_mode": "FULL_AND_PIECEWISE", "pass_config": {"fuse_allreduce_rms": False}}
    assert spec_json(words)["draft_tensor_parallel_size"] == 1


@pytest.mark.parametrize("version,config,key,needle", [
    ("0.26.0", {"speculative.method": "ngrm", "speculative.num_tokens": 2}, "speculative.method",
     "'ngrm' is not a speculative method of vLLM 0.26.0 (did you mean 'ngram'?)"),
    ("0.26.0", {"speculative.method": "NGRAM", "speculative.num_tokens": 2}, "speculative.method", "'ngram'"),
    # medusa is a method of 0.26.0 and no longer of 0.33.0
    ("0.33.0", {"speculative.method": "medusa", "speculative.num_tokens": 2, "speculative.model": "/m"},
     "speculative.method", "not a speculative method of vLLM 0.33.0"),
    ("0.26.0", {"speculative.method": "draft_model", "speculative.num_tokens": 2}, "speculative.method",
     "draft_model needs speculative.model"),
    ("0.33.0", {"speculative.method": "eagle3", "speculative.num_tokens": 2}, "speculative.method",
     "eagle3 needs speculative.model"),
    ("0.26.0", {"speculative.method": "ngram"}, "speculative.method", "needs speculative.num_tokens"),
    ("0.26.0", {"speculative.method": "ngram", "speculative.num_tokens": 0}, "speculative.num_tokens",
     "must be an integer >= 1, not 0"),
    ("0.26.0", {"speculative.method": "none", "speculative.num_tokens": -1}, "speculative.num_tokens", ">= 1"),
    ("0.26.0", {**NGRAM, "speculative.prompt_lookup_min": 5}, "speculative.prompt_lookup_min", "min <= max"),
    ("0.26.0", {"speculative.method": 3}, "speculative.method", "must be a method name"),
    ("0.26.0", {**DRAFT, "speculative.model": ""}, "speculative.model", "checkpoint directory or Hub id"),
    ("0.26.0", {"backend.speculative_config": '{"method": "ngram"}'}, "backend.speculative_config",
     "set by the tuner from the speculative.* params"),
    ("0.26.0", {"backend.spec_tokens": 3}, "backend.spec_tokens", "speculative.num_tokens"),
])
def test_what_the_release_cannot_do_is_refused_at_validate_time(version, config, key, needle):
    with pytest.raises(ConfigRejected, match=re.escape(needle)) as exc:
        vllm(version).check_config(config)
    assert exc.value.key == key and "jobs/x.yaml" in str(exc.value) and "\n" not in str(exc.value)


def test_the_releases_own_methods_are_accepted():
    vllm("0.26.0").check_config({"speculative.method": "medusa", "speculative.num_tokens": 2,
                                 "speculative.model": "/m"})
    vllm("0.33.0").check_config({"speculative.method": "glm4_moe_mtp", "speculative.num_tokens": 1})  # an mtp alias
    vllm("0.33.0").check_config({"speculative.method": "suffix", "speculative.num_tokens": 8})


def test_an_unknown_release_takes_the_neutral_set_and_doctor_says_so():
    b = vllm("0.20.0")  # no table: the neutral methods are assumed
    b.check_config(NGRAM)
    assert spec_json(launched(b, DRAFT))["method"] == "draft_model"
    with pytest.raises(ConfigRejected, match="assumed"):
        b.check_config({"speculative.method": "suffix", "speculative.num_tokens": 2})
    lines, warnings = b.diagnose()
    assert any("speculative methods: ngram, mtp, eagle, eagle3, draft_model" in line for line in lines)
    assert any("not known here" in w for w in warnings)
    assert not vllm("0.26.0").diagnose()[1]  # the bundled table knows its methods: no warning


def test_the_bundled_tables_hold_the_wheels_methods():
    old, new = known_flags.bundled("vllm", "0.26.0"), known_flags.bundled("vllm", "0.33.0")
    old_methods = old.config_choices["--speculative-config.method"]
    new_methods = new.config_choices["--speculative-config.method"]
    assert {"ngram", "mtp", "eagle", "eagle3", "draft_model", "medusa", "mlp_speculator"} <= set(old_methods)
    assert {"ngram", "mtp", "eagle", "eagle3", "draft_model"} <= set(new_methods)
    assert "medusa" not in new_methods and "glm5_next_mtp" in new_methods


# ---- SGLang ---------------------------------------------------------------------------------------

def test_sglang_spells_algorithm_chain_and_draft():
    b = sglang()
    words = launched(b, DRAFT)
    i = words.index("--speculative-algorithm")
    assert words[i:i + 11] == ["--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path",
                               "/models/draft-l2", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                               "--speculative-num-draft-tokens", "4", "--enable-metrics"]
    ngram = launched(b, {"speculative.method": "ngram", "speculative.num_tokens": 4})
    j = ngram.index("--speculative-algorithm")
    assert ngram[j:j + 5] == ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "5",
                              "--enable-metrics"]
    mtp = launched(b, {"speculative.method": "mtp", "speculative.num_tokens": 1})
    assert mtp[mtp.index("--speculative-algorithm") + 1] == "NEXTN" and "--speculative-draft-model-path" not in mtp
    table = known_flags.bundled("sglang", "0.5.23")
    for flag in (w for w in words + ngram + mtp if w.startswith("--")):
        assert table.knows(flag), f"{flag} is not a flag of SGLang 0.5.23"
    assert "--speculative-algorithm" not in launched(b, {}) and "--enable-metrics" not in launched(b, {})


def test_sglang_spelling_and_neutral_name_are_one_config():
    b = sglang()
    assert b.normalize({"speculative.method": "EAGLE", "speculative.num_tokens": 2, "speculative.model": "/e"}) == \
        b.normalize({"speculative.method": "eagle", "speculative.num_tokens": 2, "speculative.model": "/e"})


@pytest.mark.parametrize("config,settings,key,needle", [
    ({"speculative.method": "eagle", "speculative.num_tokens": 2}, {}, "speculative.method",
     "eagle needs speculative.model"),
    ({"speculative.method": "medusa", "speculative.num_tokens": 2}, {}, "speculative.method",
     "not a speculative method of SGLang 0.5.23"),
    ({**NGRAM}, {}, "speculative.prompt_lookup_max", "has no --speculative-ngram-max-match-window-size"),
    ({"backend.speculative_eagle_topk": 4}, {}, "backend.speculative_eagle_topk", "a chain: top-k 1"),
])
def test_sglang_refusals(config, settings, key, needle):
    with pytest.raises(ConfigRejected, match=needle) as exc:
        sglang(**settings).check_config(config)
    assert exc.value.key == key


def test_sglang_managed_flags_stay_out_of_extra_args():
    with pytest.raises(BadInput, match="set by the tuner from speculative.method"):
        sglang(extra_args=["--speculative-algorithm", "EAGLE"])
    with pytest.raises(BadInput, match="speculative.model"):
        sglang(extra_args=["--speculative-draft-model-path", "/d"])


# ---- servers without speculation the tuner can set ----------------------------------------------

def test_backends_without_speculation_refuse_the_params():
    ref = RefServerBackend({"model": "tiny", "device": "cpu"}, "jobs/x.yaml")
    ref.check_config({"tp_size": 1, "speculative.method": "none"})
    with pytest.raises(ConfigRejected, match="the reference server has no speculative decoding") as exc:
        ref.check_config({"tp_size": 1, **NGRAM})
    assert exc.value.key == "speculative.method"
    llama = LlamaCppBackend(LlamaCppBackend.example_settings(), "jobs/x.yaml")
    with pytest.raises(ConfigRejected, match="--model-draft"):
        llama.check_config({"speculative.method": "draft_model", "speculative.num_tokens": 2,
                            "speculative.model": "/d"})


# ---- MoE knobs ------------------------------------------------------------------------------------

def test_moe_values_are_the_releases_and_all2all_needs_expert_parallel():
    b = vllm("0.26.0")
    with pytest.raises(ConfigRejected, match="--moe-backend 'flashinfer_b13x' is not a value vLLM 0.26.0 accepts"):
        b.check_config({"backend.moe_backend": "flashinfer_b13x"})
    with pytest.raises(ConfigRejected, match="--all2all-backend 'moonep' is not a value vLLM 0.26.0"):
        b.check_config({"backend.enable_expert_parallel": True, "backend.all2all_backend": "moonep"})
    vllm("0.33.0").check_config({"backend.enable_expert_parallel": True, "backend.all2all_backend": "moonep"})
    on = {"tp_size": 8, "backend.enable_expert_parallel": True, "backend.all2all_backend": "deepep_low_latency",
          "backend.moe_backend": "triton"}
    words = launched(b, on)
    assert "--enable-expert-parallel" in words and words[words.index("--all2all-backend") + 1] == "deepep_low_latency"
    assert words[words.index("--moe-backend") + 1] == "triton"
    off = b.normalize({**on, "backend.enable_expert_parallel": False})
    assert "backend.all2all_backend" not in off and "backend.enable_expert_parallel" not in off
    assert off == b.normalize({"tp_size": 8, "backend.moe_backend": "triton"})  # vLLM's default: one config


def test_moe_knobs_on_a_dense_model_are_refused(tmp_path):
    dense, moe = tmp_path / "dense", tmp_path / "moe"
    for path, cfg in ((dense, {"num_hidden_layers": 16, "num_attention_heads": 16}),
                      (moe, {"num_hidden_layers": 92, "num_attention_heads": 96, "n_routed_experts": 160})):
        path.mkdir()
        (path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigRejected, match="dense model") as exc:
        VllmBackend({"model": str(dense), "version": "0.26.0"}).check_config({"backend.enable_expert_parallel": True})
    assert exc.value.key == "backend.enable_expert_parallel"
    b = VllmBackend({"model": str(moe), "version": "0.26.0"})
    b.check_config({"backend.enable_expert_parallel": True})
    assert b.model_facts()["moe"] is True and b.model_facts()["experts"] == 160
    declared = VllmBackend({"model": str(dense), "version": "0.26.0", "model_facts": {"moe": True, "experts": 8}})
    declared.check_config({"backend.enable_expert_parallel": True})  # the user's facts win
    vllm().check_config({"backend.enable_expert_parallel": True})  # a model id: unknown, not refused
    with pytest.raises(BadInput, match="model_facts.moe: must be true or false"):
        vllm(model_facts={"moe": 1})


# ---- the installed release's own methods ----------------------------------------------------------

@pytest.fixture
def venv(tmp_path, monkeypatch):
    """A real venv (its own site-packages), each test with its own flag cache."""
    root = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    monkeypatch.setenv("NCCLSWEEP_CACHE_DIR", str(tmp_path / "cache"))
    for cached in (known_flags.installed_table, versions.package_version):
        cached.cache_clear()
    yield str(python), site
    for cached in (known_flags.installed_table, versions.package_version):
        cached.cache_clear()


SERVE = """
from vllm.utils.argparse_utils import FlexibleArgumentParser


class ServeSubcommand:
    def subparser_init(self, subparsers):
        parser = subparsers.add_parser("serve")
        parser.add_argument("model_tag", nargs="?")
        for flag in ("--host", "--port", "--tensor-parallel-size", "--served-model-name", "--speculative-config"):
            parser.add_argument(flag)
        return parser
"""
# as vLLM keeps them (vllm/config/speculative.py): a Literal nesting Literals
SPECULATIVE = """from typing import Literal

EagleModelTypes = Literal['eagle', 'eagle3', 'mtp']
SpeculativeMethod = Literal['ngram', 'draft_model', 'tree_walk', EagleModelTypes]
"""


def install_vllm(site: Path, version: str) -> None:
    """A vLLM release in ``site`` with the interface the real one has: its metadata, the
    ``serve`` parser built as ``vllm serve`` builds it (``ServeSubcommand().subparser_init``,
    a ``FlexibleArgumentParser``), and ``vllm.config.speculative.SpeculativeMethod``."""
    files = {"vllm/__init__.py": "", "vllm/utils/__init__.py": "", "vllm/entrypoints/__init__.py": "",
             "vllm/entrypoints/cli/__init__.py": "", "vllm/config/__init__.py": "",
             "vllm/utils/argparse_utils.py": "import argparse\n\n\nclass FlexibleArgumentParser("
                                             "argparse.ArgumentParser):\n    pass\n",
             "vllm/entrypoints/cli/serve.py": SERVE, "vllm/config/speculative.py": SPECULATIVE,
             f"vllm-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n"}
    for name, text in files.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text(text)


def test_the_installed_releases_speculative_methods_decide(venv):
    python, site = venv
    install_vllm(site, "0.40.0")
    b = VllmBackend({"model": "m", "python": python}, "jobs/x.yaml")
    assert b.version() == "0.40.0"
    b.check_config({"speculative.method": "tree_walk", "speculative.num_tokens": 3, "speculative.model": "/d"})
    with pytest.raises(ConfigRejected, match="tree_walk needs speculative.model"):
        b.check_config({"speculative.method": "tree_walk", "speculative.num_tokens": 3})
    with pytest.raises(ConfigRejected, match=r"'suffix' is not a speculative method of vLLM 0\.40\.0; allowed: none, "
                                             r"ngram, draft_model, tree_walk, eagle, eagle3, mtp$"):
        b.check_config({"speculative.method": "suffix", "speculative.num_tokens": 3})
    lines, warnings = b.diagnose()
    assert any(f"the parser of vllm 0.40.0 in {python} (--speculative-config.method)" in line for line in lines)
    assert not [w for w in warnings if "speculative" in w]


def test_a_bad_method_is_a_short_line_listing_what_the_release_allows(tmp_path, capsys):
    """vLLM 0.33 knows some forty methods, most of them one model's MTP head: the line names
    the general ones and counts the model-specific ones (it was a 795-character dump)."""
    from conftest import write_job
    from orchestrator.cli import main

    space = "params:\n  speculative.method: {choices: [none, ngramm]}\n  speculative.num_tokens: {choices: [2]}\n"
    job = write_job(tmp_path, space_text=space, gpus_per_node=1, baseline=None,
                    backend={"kind": "vllm", "settings": {"model": "/models/m", "version": "0.33.0"}})
    assert main(["validate", str(job)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    said = line.split(" (config {", 1)[0]  # the config it was found in follows
    assert said.startswith(f"ncclsweep: error: {tmp_path / 'space.yaml'}: params.speculative.method: 'ngramm' is "
                           "not a speculative method of vLLM 0.33.0 (did you mean 'ngram'?); allowed: none, ngram, "
                           "draft_model, suffix"), said
    assert re.search(r", and \d+ model-specific MTP heads named <model>_mtp \(e\.g\. \w+_mtp, \w+_mtp\)$", said), said
    assert len(said.split("allowed: ", 1)[1]) < 250 and "deepseek_mtp, mimo_mtp" not in said
