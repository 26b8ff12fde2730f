"""orchestrator.core.nccl: value rules, PCIe safety, and parsing real NCCL 2.28.9 logs
(tests/fixtures/nccl/, see its README for where each came from) and the NCCL lines of real
vLLM workers (tests/fixtures/vllm/)."""

from __future__ import annotations

import warnings

import pytest

from conftest import TESTS
from orchestrator.core import nccl

FIXTURES = TESTS / "fixtures" / "nccl"
LOGS = TESTS / "fixtures" / "vllm"  # real vLLM logs: NCCL's lines of its workers


def log(name: str) -> str:
    return (FIXTURES / name).read_text()


# ---- validate_value / normalize_value -------------------------------------------------------

@pytest.mark.parametrize("name,value,canonical", [
    ("NCCL_PROTO", "ll", "LL"),
    ("NCCL_PROTO", "simple,LL", "LL,Simple"),  # a set: NCCL's order, duplicates dropped
    ("NCCL_PROTO", "LL,ll", "LL"),
    ("NCCL_PROTO", "^ll128", "^LL128"),
    ("NCCL_PROTO", " LL128 ", "LL128"),
    ("NCCL_ALGO", "ring", "Ring"),
    ("NCCL_ALGO", "TREE,ring", "Tree,Ring"),
    ("NCCL_ALGO", "collnetdirect", "CollNetDirect"),
    ("NCCL_ALGO", "nvlstree,pat", "NVLSTree,PAT"),
    ("NCCL_ALGO", "allreduce:tree;broadcast:ring", "AllReduce:Tree;Broadcast:Ring"),
    ("NCCL_ALGO", "ring;allreduce:^ring", "Ring;AllReduce:^Ring"),
    ("NCCL_PROTO", "LL,Simple;allreduce:^LL", "LL,Simple;AllReduce:^LL"),
    ("NCCL_PROTO", "allreduce:LL;ALLGATHER:simple", "AllReduce:LL;AllGather:Simple"),
    ("NCCL_P2P_LEVEL", "phb", "PHB"),
    ("NCCL_P2P_LEVEL", "3", "3"),
    ("NCCL_P2P_DISABLE", True, "1"),
    ("NCCL_SHM_DISABLE", "0", "0"),
    ("NCCL_NVLS_ENABLE", False, "0"),
    ("NCCL_GRAPH_MIXING_SUPPORT", 1, "1"),
    ("NCCL_MIN_CTAS", "4", "4"),
    ("NCCL_MAX_CTAS", 16, "16"),
    ("NCCL_MIN_NCHANNELS", "2", "2"),
    ("NCCL_MAX_NCHANNELS", "8", "8"),
    ("NCCL_BUFFSIZE", "0x400000", "4194304"),  # NCCL reads it with strtoll(.., 0)
    ("NCCL_NTHREADS", "256", "256"),
])
def test_validate_value_canonical(name, value, canonical):
    assert nccl.validate_value(name, value) == canonical
    assert nccl.normalize_value(name, value) == canonical


@pytest.mark.parametrize("name,value,needle", [
    ("NCCL_PROTO", "LL129", "'LL129' is not a known value; allowed: LL, LL128, Simple"),
    ("NCCL_PROTO", "", "must not be empty"),
    ("NCCL_PROTO", "LL,,Simple", "empty element"),
    ("NCCL_PROTO", "tree", "allowed: LL, LL128, Simple"),
    ("NCCL_PROTO", "^LL,LL128,Simple", "leaves Broadcast no protocol"),
    ("NCCL_ALGO", "allreduc:tree", "unknown collective 'allreduc'"),
    ("NCCL_ALGO", "tree;ring", "every entry after the first needs a collective prefix"),
    ("NCCL_ALGO", "LL", "allowed: Tree, Ring, CollNetDirect, CollNetChain, NVLS, NVLSTree, PAT"),
    ("NCCL_P2P_LEVEL", "PCI", "LOC, NVL, PIX, PXB, PHB, SYS"),
    ("NCCL_P2P_DISABLE", "true", "must be 0 or 1"),
    ("NCCL_SHM_DISABLE", "2", "must be 0 or 1"),
    ("NCCL_MIN_CTAS", "0", "positive integer"),
    ("NCCL_BUFFSIZE", "4MB", "positive integer"),
    ("NCCL_NTHREADS", "96", "64, 128, 256, 512"),
])
def test_validate_value_refuses_with_rule_and_value(name, value, needle):
    with pytest.raises(ValueError) as exc:
        nccl.validate_value(name, value)
    assert needle in str(exc.value)
    if value:
        assert repr(value) in str(exc.value) or value in str(exc.value)
    assert nccl.normalize_value(name, value) == str(value)  # never raises


def test_per_collective_form_needs_nccl_2_24():
    assert nccl.validate_value("NCCL_ALGO", "allreduce:ring", nccl_version="2.24.3") == "AllReduce:Ring"
    with pytest.raises(ValueError, match="needs NCCL >= 2.24"):
        nccl.validate_value("NCCL_ALGO", "allreduce:ring", nccl_version="2.23.4")
    assert nccl.validate_value("NCCL_ALGO", "Ring", nccl_version="2.21.5") == "Ring"


def test_unknown_nccl_variable_passes_with_a_warning():
    with pytest.warns(nccl.UnknownNcclVariable, match="NCCL_IB_HCA"):
        assert nccl.validate_value("NCCL_IB_HCA", "mlx5_0") == "mlx5_0"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert nccl.normalize_value("NCCL_IB_HCA", "mlx5_0") == "mlx5_0"


def test_enable_matrix_replays_parse_list():
    m = nccl.enable_matrix("NCCL_PROTO", "^LL")
    assert m["AllReduce"] == {"LL": 0, "LL128": 1, "Simple": 1}  # exclusion forces LL128
    assert nccl.enable_matrix("NCCL_PROTO", "LL")["AllReduce"] == {"LL": 1, "LL128": 0, "Simple": 0}
    m = nccl.enable_matrix("NCCL_ALGO", "allreduce:tree;broadcast:ring")
    assert m["AllReduce"]["Tree"] == 1 and m["AllReduce"]["Ring"] == 0
    assert m["Broadcast"]["Ring"] == 1 and m["Broadcast"]["Tree"] == 0
    assert all(m["AllGather"].values())  # collectives not named keep every algorithm


# ---- unsafe_on_pcie ---------------------------------------------------------------------------

@pytest.mark.parametrize("name,value,needle", [
    ("NCCL_PROTO", "LL128", "names LL128"),
    ("NCCL_PROTO", "ll,ll128", "names LL128"),
    ("NCCL_PROTO", "^LL", "exclusion list"),  # the subtle one: forces LL128 on
    ("NCCL_PROTO", "allreduce:LL128", "AllReduce"),
    ("NCCL_ALGO", "NVLS", "NVSwitch"),
    ("NCCL_ALGO", "ring,nvlstree", "NVSwitch"),
    ("NCCL_ALGO", "CollnetDirect", "CollNet"),
    ("NCCL_ALGO", "collnetchain", "CollNet"),
    ("NCCL_ALGO", "PAT", "never uses for all-reduce"),
    ("NCCL_NVLS_ENABLE", "1", "NVSwitch"),
])
def test_unsafe_on_pcie(name, value, needle):
    reason = nccl.unsafe_on_pcie(name, value)
    assert reason and needle in reason


@pytest.mark.parametrize("name,value", [
    ("NCCL_PROTO", "LL"), ("NCCL_PROTO", "Simple"), ("NCCL_PROTO", "LL,Simple"), ("NCCL_PROTO", "^LL128"),
    ("NCCL_PROTO", "^LL,LL128"), ("NCCL_ALGO", "Ring"), ("NCCL_ALGO", "Tree,Ring"), ("NCCL_ALGO", "^NVLS"),
    ("NCCL_ALGO", "allreduce:tree;broadcast:ring"), ("NCCL_NVLS_ENABLE", "0"), ("NCCL_P2P_DISABLE", "1"),
    ("NCCL_PROTO", "garbage"),
])
def test_safe_on_pcie(name, value):
    assert nccl.unsafe_on_pcie(name, value) is None


def test_unsafe_prediction_matches_what_nccl_printed():
    """NCCL_PROTO=^LL: we predict LL128 forced (1); NCCL 2.28.9's own matrix says the same."""
    parsed = nccl.parse_log(log("percoll-tree-excl-ll-2xh200-2.28.9.log"))
    assert parsed["enabled_matrix"]["AllReduce"]["LL128"] == 1
    assert nccl.enable_matrix("NCCL_PROTO", "^LL")["AllReduce"]["LL128"] == 1
    assert nccl.unsafe_on_pcie("NCCL_PROTO", "^LL")


# ---- parse_log on real logs ------------------------------------------------------------------

def test_parse_ll_ring_log():
    p = nccl.parse_log(log("ll-ring-2xh200-nvlink-2.28.9.log"))
    assert p["version"] == "2.28.9" and p["cuda_version"] == "13.0"
    assert p["env_applied"] == {"NCCL_NVLS_ENABLE": "0", "NCCL_PROTO": "LL"}
    assert p["transports"] == ["P2P/CUMEM"]
    assert p["channels"] == 24
    assert p["nranks"] == 2
    assert ["AllReduce", 12288, "RING", "LL"] in p["per_call"]
    assert ["AllReduce", 1048576, "RING", "LL"] in p["per_call"]
    assert len(p["per_call"]) == len({tuple(c) for c in p["per_call"]})  # distinct
    assert p["per_call_count"] > 100
    assert p["allreduce_algo"] == "RING" and p["allreduce_proto"] == "LL"
    assert p["enabled_matrix"]["AllReduce"]["LL"] == 1 and p["enabled_matrix"]["AllReduce"]["Simple"] == 0
    assert p["errors"] == [] and p["invalid"] is False
    assert nccl.classify_failure(log("ll-ring-2xh200-nvlink-2.28.9.log")) is None


def test_parse_invalid_value_log():
    text = log("bad-proto-LL129-2.28.9.log")
    p = nccl.parse_log(text)
    assert p["invalid"] is True
    assert p["env_applied"]["NCCL_PROTO"] == "LL129"
    assert any('Unrecognized element token "LL129"' in e for e in p["errors"])
    assert any("invalid usage" in e for e in p["errors"])
    assert nccl.classify_failure(text) == "nccl-invalid"


def test_parse_bad_prefix_log():
    text = log("bad-prefix-2xh200-2.28.9.log")
    assert nccl.classify_failure(text) == "nccl-invalid"
    p = nccl.parse_log(text)
    assert any('Unrecognized prefix token "allreduc"' in e for e in p["errors"])


def test_parse_p2p_disabled_log():
    p = nccl.parse_log(log("p2p-disabled-simple-ring-2xh200-2.28.9.log"))
    assert p["transports"] == ["SHM/direct/direct"]
    assert p["env_applied"]["NCCL_P2P_DISABLE"] == "1"
    assert p["channels"] == 4
    assert p["per_call"] == [["AllReduce", 12288, "RING", "SIMPLE"], ["AllReduce", 1048576, "RING", "SIMPLE"]]


def test_parse_world_size_one_log():
    p = nccl.parse_log(log("ws1-ll-1xh200-2.28.9.log"))
    assert p["nranks"] == 1
    assert "NCCL_PROTO" not in p["env_applied"]  # NCCL never reads it at one rank
    assert p["per_call"] == [] and p["transports"] == []
    assert nccl.verify_applied({"NCCL_PROTO": "LL"}, p) == []  # nothing can matter


def test_parse_env_formats_of_every_kind():
    p = nccl.parse_log(log("percoll-tree-excl-ll-2xh200-2.28.9.log"))
    assert p["env_applied"] == {
        "NCCL_MIN_CTAS": "2", "NCCL_MAX_CTAS": "16", "NCCL_P2P_LEVEL": "PHB", "NCCL_NVLS_ENABLE": "0",
        "NCCL_BUFFSIZE": "2097152", "NCCL_GRAPH_MIXING_SUPPORT": "0", "NCCL_NTHREADS": "256",
        "NCCL_PROTO": "^LL", "NCCL_ALGO": "allreduce:tree;broadcast:ring"}
    assert p["channels"] == 16  # NCCL_MAX_CTAS=16
    assert p["per_call"] == [["AllReduce", 12288, "TREE", "SIMPLE"], ["AllReduce", 1048576, "TREE", "SIMPLE"]]


def test_parse_reset_lines_without_param_lines():
    text = ("h:1:1 [0] NCCL INFO NCCL version 2.27.3+cuda12.9\n"
            "h:1:1 [0] NCCL INFO Comm config minCTAs reset to NCCL_MIN_CTAS=4\n"
            "h:1:1 [0] NCCL INFO Comm config graphUsageMode reset to 2 by NCCL_GRAPH_MIXING_SUPPORT=1\n"
            "h:1:1 [0] NCCL INFO Channel 00/1 : 0[0] -> 1[1] via NET/Socket/0\n"
            "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read\n")
    p = nccl.parse_log(text)
    assert p["version"] == "2.27.3" and p["cuda_version"] == "12.9"
    assert p["env_applied"] == {"NCCL_MIN_CTAS": "4", "NCCL_GRAPH_MIXING_SUPPORT": "1"}
    assert p["transports"] == ["NET/Socket", "P2P/IPC/read"]


def test_parse_empty_log():
    p = nccl.parse_log("server starting\nready\n")
    assert p["version"] is None and p["env_applied"] == {} and p["invalid"] is False
    assert nccl.classify_failure("") is None


# ---- verify_applied --------------------------------------------------------------------------

def test_verify_applied_confirms_what_nccl_took():
    p = nccl.parse_log(log("ll-ring-2xh200-nvlink-2.28.9.log"))
    assert nccl.verify_applied({"NCCL_PROTO": "LL", "NCCL_NVLS_ENABLE": "0", "NCCL_DEBUG": "INFO"}, p) == []
    assert nccl.verify_applied({"NCCL_PROTO": "ll"}, p) == []  # case does not matter to NCCL


def test_verify_applied_every_setting_of_a_rich_log():
    p = nccl.parse_log(log("percoll-tree-excl-ll-2xh200-2.28.9.log"))
    requested = {"NCCL_ALGO": "allreduce:tree;broadcast:ring", "NCCL_PROTO": "^LL", "NCCL_MIN_CTAS": "2",
                 "NCCL_MAX_CTAS": "16", "NCCL_NTHREADS": "256", "NCCL_BUFFSIZE": "2097152", "NCCL_P2P_LEVEL": "PHB",
                 "NCCL_GRAPH_MIXING_SUPPORT": "0", "NCCL_SHM_DISABLE": "1", "NCCL_NVLS_ENABLE": "0"}
    warns = nccl.verify_applied(requested, p)
    # NCCL_SHM_DISABLE is read only when SHM is considered; P2P worked, so it never said
    assert len(warns) == 1 and "NCCL_SHM_DISABLE=1" in warns[0] and "did not report" in warns[0]


def test_verify_applied_warns_when_nccl_ignored_a_value():
    p = nccl.parse_log(log("p2p-level-lowercase-2xh200-2.28.9.log"))
    warns = nccl.verify_applied({"NCCL_P2P_LEVEL": "phb"}, p)
    assert len(warns) == 1 and "NCCL_P2P_LEVEL=phb" in warns[0]


def test_verify_applied_old_integer_p2p_level():
    p = {"version": "2.28.9", "env_applied": {"NCCL_P2P_LEVEL": "PHB"}, "nranks": 2}
    assert nccl.verify_applied({"NCCL_P2P_LEVEL": "3"}, p) == []  # 3 is PHB in NCCL's old numbering


def test_verify_applied_flags_per_call_contradictions():
    p = nccl.parse_log(log("ll-ring-2xh200-nvlink-2.28.9.log"))
    p["env_applied"]["NCCL_ALGO"] = "Tree"
    p.pop("enabled_matrix")
    warns = nccl.verify_applied({"NCCL_PROTO": "LL", "NCCL_ALGO": "Tree"}, p)
    assert len(warns) == 1
    assert "AllReduce" in warns[0] and "algo RING" in warns[0] and "NCCL_ALGO=Tree allows only Tree" in warns[0]


def test_verify_applied_value_mismatch_and_missing_lines():
    p = nccl.parse_log(log("bad-proto-LL129-2.28.9.log"))
    warns = nccl.verify_applied({"NCCL_PROTO": "LL"}, p)
    assert warns == ["requested NCCL_PROTO=LL but NCCL reports NCCL_PROTO=LL129"]
    p = nccl.parse_log(log("startup-only-2xh200-2.28.9.log"))
    assert nccl.verify_applied({"NCCL_PROTO": "LL", "NCCL_ALGO": "Tree"}, p) == []
    warns = nccl.verify_applied({"NCCL_PROTO": "LL", "NCCL_BUFFSIZE": "1048576"}, p)
    assert len(warns) == 1 and "NCCL_BUFFSIZE=1048576" in warns[0]


def test_verify_applied_compares_nccl_enable_matrix():
    p = nccl.parse_log(log("startup-only-2xh200-2.28.9.log"))
    p["env_applied"]["NCCL_PROTO"] = "Simple"  # pretend it printed what we asked, but the matrix says LL
    warns = nccl.verify_applied({"NCCL_PROTO": "Simple"}, p)
    assert any("enabled matrix" in w for w in warns)


def test_verify_applied_without_nccl_lines():
    warns = nccl.verify_applied({"NCCL_PROTO": "LL"}, nccl.parse_log("no nccl here"))
    assert len(warns) == 1 and "could not be verified" in warns[0]
    assert nccl.verify_applied({}, nccl.parse_log("")) == []
    assert nccl.verify_applied({"NCCL_P2P_DISABLE": "0"}, {"version": "2.28.9", "env_applied": {}}) == []


def test_debug_env():
    assert nccl.debug_env() == {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV"}
    assert nccl.debug_env(tuning=True)["NCCL_DEBUG_SUBSYS"] == "INIT,ENV,TUNING"


def test_parses_the_reference_servers_own_world_size_1_log():
    """A real server log (not a probe): version, the env NCCL took, one rank, no warnings."""

    text = (FIXTURES / "refserver-1b-ws1-graphs-h200-2.28.9.log").read_text()
    parsed = nccl.parse_log(text)
    assert parsed["version"].startswith("2.28.9")
    assert parsed["env_applied"].get("NCCL_NVLS_ENABLE") == "0"
    assert parsed["nranks"] == 1 and not parsed["invalid"]
    assert nccl.verify_applied({"NCCL_NVLS_ENABLE": "0"}, parsed) == []
    assert nccl.classify_failure(text) is None


def test_parses_a_tp2_server_log_with_p2p_disabled():
    """The issue-10 study's best trial: what NCCL took, and that traffic went through SHM."""

    text = (FIXTURES /
            "refserver-1b-tp2-p2p-disabled-tree-ll-2xh200-2.28.9.log").read_text()
    parsed = nccl.parse_log(text)
    assert parsed["nranks"] == 2 and parsed["transports"] == ["SHM/direct/direct"]
    assert {k: parsed["env_applied"][k] for k in ("NCCL_PROTO", "NCCL_ALGO", "NCCL_P2P_DISABLE")} == {
        "NCCL_PROTO": "LL", "NCCL_ALGO": "Tree", "NCCL_P2P_DISABLE": "1"}
    assert nccl.verify_applied({"NCCL_PROTO": "LL", "NCCL_ALGO": "Tree", "NCCL_P2P_DISABLE": "1"}, parsed) == []
    # a setting NCCL never reported taking is a warning
    assert nccl.verify_applied({"NCCL_PROTO": "Simple"}, parsed)


def test_parses_a_tp2_server_log_with_ll128_over_nvlink():
    """The LL128 study (allow_unsafe_nccl): NCCL took LL128, the matrix enables only it, NVLink P2P."""

    text = (FIXTURES /
            "refserver-1b-tp2-ll128-nvlink-2xh200-2.28.9.log").read_text()
    parsed = nccl.parse_log(text)
    assert parsed["nranks"] == 2 and parsed["transports"] == ["P2P/CUMEM"]
    assert parsed["env_applied"]["NCCL_PROTO"] == "LL128" and parsed["env_applied"]["NCCL_ALGO"] == "Ring"
    allreduce = parsed["enabled_matrix"]["AllReduce"]
    assert (allreduce["LL128"], allreduce["LL"], allreduce["Simple"]) == (1, 0, 0)
    assert (allreduce["Ring"], allreduce["Tree"]) == (1, 0)
    assert nccl.verify_applied({"NCCL_PROTO": "LL128", "NCCL_ALGO": "Ring"}, parsed) == []


# ---- four ranks (a lent 4x H200 machine, NCCL_P2P_DISABLE=1: host shared memory) ---------------

@pytest.mark.parametrize("name,proto,algo", [("p2p-disabled-ll-ring-4xh200-2.28.9.log", "LL", "RING"),
                                             ("p2p-disabled-simple-tree-4xh200-2.28.9.log", "SIMPLE", "TREE")])
def test_parses_four_rank_probe_logs(name, proto, algo):
    parsed = nccl.parse_log(log(name))
    assert parsed["nranks"] == 4 and parsed["transports"] == ["SHM/direct/direct"]
    assert parsed["version"] == "2.28.9" and parsed["env_applied"]["NCCL_P2P_DISABLE"] == "1"
    # every per-call line of the 12 KiB and 1 MiB all-reduces took the forced pair
    assert parsed["per_call"] and all(c[2:] == [algo, proto] for c in parsed["per_call"])
    asked = {"NCCL_PROTO": proto.capitalize() if proto == "SIMPLE" else proto, "NCCL_ALGO": algo.capitalize()}
    assert nccl.verify_applied(asked, parsed) == []


def test_parses_a_tp4_server_trial_and_its_verification_launch():
    """The TP=4 study's timed trial (start-up lines only) and the TUNING launch of the same
    setting: the decode all-reduce (4096 B: hidden 2048 x bf16 at batch 1) ran Ring/LL."""
    trial = nccl.parse_log(log("refserver-1b-tp4-p2p-disabled-ring-ll-trial-4xh200-2.28.9.log"))
    assert trial["nranks"] == 4 and trial["per_call"] == []
    assert nccl.verify_applied({"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "NCCL_P2P_DISABLE": "1"}, trial) == []
    verify = nccl.parse_log(log("refserver-1b-tp4-p2p-disabled-ll-ring-verify-4xh200-2.28.9.log"))
    decode = [c for c in verify["per_call"] if c[0] == "AllReduce" and c[1] == 4096]
    assert decode and all(c[2:] == ["RING", "LL"] for c in decode)
    assert verify["per_call_count"] > 800  # graph capture and warm-up of every batch size


@pytest.mark.parametrize("name,proto", [("vllm-0.26.0-2xh200-tp2-eager-p2poff-simple-nccl-info.log", "Simple"),
                                        ("vllm-0.26.0-2xh200-tp2-eager-p2poff-ll-nccl-info.log", "LL")])
def test_nccl_lines_of_vllm_workers_parse(name, proto):
    info = nccl.parse_log((LOGS / name).read_text(errors="replace"))
    assert info["version"] == "2.28.9" and info["nranks"] == 2
    assert info["env_applied"]["NCCL_PROTO"] == proto and info["env_applied"]["NCCL_P2P_DISABLE"] == "1"
    assert info["transports"] == ["SHM/direct/direct"]
    assert not nccl.verify_applied({"NCCL_PROTO": proto, "NCCL_P2P_DISABLE": "1"}, info)


def test_a_tp1_server_shows_no_nccl_and_that_is_no_warning():
    info = nccl.parse_log((LOGS / "vllm-0.26.0-h200-tp1-graphs-trial.log").read_text(errors="replace"))
    assert info["version"] is None and info["transports"] == []


def test_a_tp2_graphs_trial_of_vllm_took_the_settings():
    log = LOGS / "vllm-0.26.0-2xh200-tp2-graphs-p2poff-simple-ring-trial.log"
    info = nccl.parse_log(log.read_text(errors="replace"))
    assert info["nranks"] == 2 and info["transports"] == ["SHM/direct/direct"]
    assert not nccl.verify_applied({"NCCL_PROTO": "Simple", "NCCL_ALGO": "Ring", "NCCL_P2P_DISABLE": "1"}, info)



def test_every_kind_of_verification_warning_is_told_from_a_trials_other_warnings():
    # the report lists verify_applied's warnings under "NCCL verification" and the rest apart
    # (nccl.is_verification_warning): each of its kinds, from the real logs above, is one of them
    matrix = nccl.parse_log(log("startup-only-2xh200-2.28.9.log"))
    matrix["env_applied"]["NCCL_PROTO"] = "Simple"
    per_call = nccl.parse_log(log("ll-ring-2xh200-nvlink-2.28.9.log"))
    per_call["env_applied"]["NCCL_ALGO"] = "Tree"
    per_call.pop("enabled_matrix")
    lowercase = nccl.parse_log(log("p2p-level-lowercase-2xh200-2.28.9.log"))
    kinds = [nccl.verify_applied({"NCCL_PROTO": "LL"}, nccl.parse_log(log("bad-proto-LL129-2.28.9.log"))),
             nccl.verify_applied({"NCCL_P2P_LEVEL": "phb"}, lowercase),
             nccl.verify_applied({"NCCL_PROTO": "Simple"}, matrix),
             nccl.verify_applied({"NCCL_PROTO": "LL", "NCCL_ALGO": "Tree"}, per_call),
             nccl.verify_applied({"NCCL_PROTO": "LL"}, nccl.parse_log("no nccl here"))]
    assert all(kinds) and all(nccl.is_verification_warning(w) for warns in kinds for w in warns)
    others = ["rel_ci 0.212 above target 0.05 after 3 rounds", "GPUs not usable after teardown: nvidia-smi hung",
              "this config's server scores text with log-probabilities that are not its model's: they drift 27.2"]
    assert not any(nccl.is_verification_warning(w) for w in others)


# ---- per-collective values: NCCL's own log ---------------------------------------------------------

def test_per_collective_choices_read_from_a_real_log():
    """Real NCCL 2.28.9 with NCCL_ALGO=allreduce:tree;broadcast:ring (tests/fixtures/nccl/README.md):
    the per-collective value as NCCL printed it, each collective's choice from its TUNING lines,
    and the verification confirming it collective by collective."""
    p = nccl.parse_log(log("percoll-tree-excl-ll-2xh200-2.28.9.log"))
    assert p["env_applied"]["NCCL_ALGO"] == "allreduce:tree;broadcast:ring"
    assert p["per_collective"] == {"AllReduce": {"algo": "TREE", "proto": "SIMPLE"}}
    # what the tuner sends for the value the user wrote is what NCCL printed, and it is confirmed
    sent = nccl.validate_value("NCCL_ALGO", "allreduce:tree;broadcast:ring")
    assert nccl.verify_applied({"NCCL_ALGO": sent}, p) == []
    # a per-collective NCCL_PROTO the all-reduce broke: named, with the collective
    p["env_applied"]["NCCL_PROTO"] = "LL,Simple;allreduce:LL"
    (warning,) = nccl.verify_applied({"NCCL_PROTO": "LL,Simple;allreduce:LL"},
                                     {**p, "enabled_matrix": {}})
    assert "AllReduce of 12288 bytes ran proto SIMPLE" in warning and "allows only LL for AllReduce" in warning


def test_per_collective_value_reaches_nccl_meaning_what_it_says():
    for text in ("LL,Simple;allreduce:LL", "allreduce:LL;allgather:Simple;reducescatter:Simple"):
        sent = nccl.validate_value("NCCL_PROTO", text)
        assert nccl.enable_matrix("NCCL_PROTO", sent) == nccl.enable_matrix("NCCL_PROTO", text)
        assert sent.count(";") == text.count(";")  # every collective's entry kept
        assert nccl.unsafe_on_pcie("NCCL_PROTO", text) is None  # LL128 stays NCCL's own (auto) choice


# ---- the release's rules ---------------------------------------------------------------------------

def test_symmetric_kernels_are_ignored_on_pcie_from_2_29():
    assert nccl.ignored_on_pcie("NCCL_SYM_KERNEL", "AllReduce_AGxLL_R", "2.28.9") is None
    reason = nccl.ignored_on_pcie("NCCL_SYM_CTAS", "8", "2.29.2")
    assert reason and "fully NVLink-connected" in reason and "NCCL 2.29.2" in reason
    assert "not known here" in nccl.ignored_on_pcie("NCCL_SYM_KERNEL", "x", None)  # unknown: taken as 2.29+
    assert nccl.ignored_on_pcie("NCCL_PROTO", "LL", "2.29.2") is None
    assert nccl.needs_release("NCCL_SYM_CTAS", "8") and nccl.needs_release("NCCL_PROTO", "allreduce:LL")
    assert not nccl.needs_release("NCCL_PROTO", "LL")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a knob the tuner knows: no "unknown variable" warning
        assert nccl.validate_value("NCCL_SYM_CTAS", "8") == "8"


# ---- P2P between two GPUs ----------------------------------------------------------------------

@pytest.mark.parametrize("env,vendor,gpus,level,why", [
    ({}, "GenuineIntel", 8, "PXB", "NCCL's default"),
    ({}, "AuthenticAMD", 2, "SYS", "AMD CPU with at most two GPUs"),
    ({}, "AuthenticAMD", 4, "PXB", "NCCL's default"),
    ({"NCCL_P2P_LEVEL": "PHB"}, None, 8, "PHB", "NCCL_P2P_LEVEL=PHB"),
    ({"NCCL_P2P_LEVEL": "3"}, None, 8, "PHB", "old numbering"),
    ({"NCCL_P2P_LEVEL": "phb"}, None, 8, "PXB", "not a level NCCL recognises"),  # case-sensitive in NCCL
    ({"NCCL_P2P_DISABLE": "1", "NCCL_P2P_LEVEL": "SYS"}, None, 8, "LOC", "NCCL_P2P_DISABLE=1"),
])
def test_p2p_level(env, vendor, gpus, level, why):
    got, reason = nccl.p2p_level(env, vendor, gpus)
    assert got == level and why in reason


@pytest.mark.parametrize("link,level,p2p", [("PIX", "PXB", True), ("PXB", "PXB", True), ("NODE", "PXB", False),
                                           ("NODE", "PHB", True), ("SYS", "PHB", False), ("SYS", "SYS", True),
                                           ("NV18", "LOC", False), ("NV4", "PXB", True), ("PXB", "LOC", False),
                                           ("BOND", "PXB", None)])
def test_p2p_decision(link, level, p2p):
    assert nccl.p2p_decision(link, level) is p2p
