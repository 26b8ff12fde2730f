"""What a job's configs must pass across job, space and backend before anything is launched
(job_checks): the baseline and a reference config checked like the space's values, NCCL
values unsafe on PCIe only with allow_unsafe_nccl, TP x PP against gpus_per_node, the
backend's check_config on every config of the space (on a space too large to enumerate,
every value applied to the baseline). Bad input names file and key path."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from job_files import bad, in_tmp, needs_nccl, write  # noqa: F401 - in_tmp: autouse, each test in a tmp dir

from orchestrator.config.job import load_job
from orchestrator.core.errors import BadInput, ConfigRejected


def test_reference_config_merged_onto_defaults():
    job = load_job(write({"correctness": {"reference": {"tp_size": 1, "backend.threads": 1}}}))
    assert job.correctness.reference_kind == "config"
    assert job.correctness.reference == {"tp_size": 1, "graph_capture": False, "backend.threads": 1}


def test_gpu_job_tp_fits(tmp_path):
    job = load_job(write({"gpus_per_node": 2, "backend": {"kind": "refserver",
                                                          "settings": {"model": "tiny", "device": "cuda"}}},
                         space={"params": {"tp_size": [1, 2], "graph_capture": [False, True],
                                           "capture_sizes": {"choices": ["1,2,4,8"],
                                                             "when": {"graph_capture": True}}}}))
    assert job.context()["gpus_per_node"] == 2 and not job.context()["cpu_job"]
    assert job.space.size() == 4


def test_bad_tp_larger_than_gpus():
    msg = bad("params.tp_size", "tp_size=4", "gpus_per_node: 2", "job.yaml", "allowed: tp_size x pp_size <= 2",
              file="space.yaml",
              job={"gpus_per_node": 2,
                   "backend": {"kind": "refserver", "settings": {"model": "tiny", "device": "cuda"}}},
              space={"params": {"tp_size": [1, 2, 4]}})
    assert "needs 4 GPUs" in msg


def test_bad_baseline_tp_larger_than_gpus():
    bad("baseline.tp_size", "gpus_per_node: 1",
        job={"gpus_per_node": 1, "baseline": {"tp_size": 2},
             "backend": {"kind": "refserver", "settings": {"model": "tiny", "device": "cuda"}}},
        space={"params": {"backend.threads": [1, 2]}})


def test_bad_unsafe_nccl_without_opt_in():
    needs_nccl()
    space = {"params": {"tp_size": [1, 2], "env.NCCL_PROTO": ["LL", "LL128"]}}
    msg = bad("params.env.NCCL_PROTO.choices[1]", "LL128", "allow_unsafe_nccl: true", "job.yaml",
              file="space.yaml", space=space)
    assert "unsafe" in msg
    assert load_job(write({"allow_unsafe_nccl": True}, space)).space.size() == 4
    bad("env.NCCL_PROTO", "LL128", "allow_unsafe_nccl", job={"env": {"NCCL_PROTO": "LL128"}})


def test_bad_baseline_key_not_in_space():
    bad("baseline.tp", "unknown parameter 'tp' (did you mean 'tp_size'?)",
        "the space's params: tp_size, backend.threads", job={"baseline": {"tp": 2}})
    bad("baseline.NCCL_PROTO", "did you mean 'env.NCCL_PROTO'", job={"baseline": {"NCCL_PROTO": "LL"}})


def test_bad_baseline_value_not_in_space():
    bad("baseline.backend.threads", "8 is not in the space", "space.yaml params.backend.threads", "one of 1, 2",
        job={"baseline": {"backend.threads": 8}})


def test_bad_config_the_backend_cannot_express():
    err = bad("params.graph_capture", "graph_capture=true needs device cuda", file="space.yaml",
              space={"params": {"tp_size": [1, 2], "graph_capture": [False, True]}})
    assert "graph_capture" in err
    with pytest.raises(ConfigRejected):
        load_job(write(space={"params": {"tp_size": [1, 2], "graph_capture": [False, True]}}))


def test_large_space_checks_each_value_against_baseline():
    # Over 2000 configs: not enumerated at load, but every value is still checked with the backend.
    space = {"params": {"tp_size": [1, 2], "backend.max_batch": {"type": "int", "low": 1, "high": 5000},
                        "graph_capture": [False, True]}}
    bad("params.graph_capture", "needs device cuda", file="space.yaml", space=space)
    space["params"]["graph_capture"] = [False]
    job = load_job(write(space=space))
    assert job.space.size(limit=2000) is None and job.space.size() == 2 * 5000


# A job's speculative configs are checked at validate time like every other config: each config
# of a small space, and on a large one every value with the parameters it brings
# (``speculative.method: ngram`` with its ``speculative.num_tokens``); what the release cannot do
# is one line naming the space file and the parameter, exit code 2. The shipped speculative jobs
# and spaces validate.
REPO = Path(__file__).resolve().parents[2]
LARGE = {  # 4 x 4 x 4 x 4 x 2 x 3 configs before the speculative ones: past the per-config check limit
    "backend.max_num_seqs": [8, 16, 32, 64], "backend.max_num_batched_tokens": [1024, 2048, 4096, 8192],
    "backend.gpu_memory_utilization": [0.5, 0.6, 0.7, 0.8], "backend.block_size": [8, 16, 32, 64],
    "graph_capture": [False, True], "backend.max_model_len": [1024, 2048, 4096]}


def vllm_job(tmp_path: Path, params: dict, large: bool = False) -> Path:
    (tmp_path / "draft").mkdir(exist_ok=True)
    (tmp_path / "space.yaml").write_text(yaml.safe_dump({"params": {**(LARGE if large else {}), **params}}))
    job = {"study": "spec", "report_dir": str(tmp_path / "reports"),
           "backend": {"kind": "vllm", "settings": {"model": str(tmp_path), "version": "0.26.0"}},
           "gpus_per_node": 1, "space": "space.yaml"}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def validate(job: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator", "validate", str(job)], capture_output=True, text=True,
                          cwd=REPO, timeout=120)


GOOD = {"speculative.method": {"choices": ["none", "ngram", "draft_model"]},
        "speculative.num_tokens": {"choices": [2, 4], "when": {"speculative.method": ["ngram", "draft_model"]}},
        "speculative.model": {"choices": ["DRAFT"], "when": {"speculative.method": "draft_model"}}}


@pytest.mark.parametrize("large", [False, True])
def test_a_good_speculative_space_validates(tmp_path, large):
    params = {**GOOD, "speculative.model": {**GOOD["speculative.model"], "choices": [str(tmp_path / "draft")]}}
    job = load_job(vllm_job(tmp_path, params, large=large))
    assert (job.space.size() is None or job.space.size() > 2000) == large
    if not large:
        assert job.space.size() == 5  # none, ngram x 2, draft_model x 2


@pytest.mark.parametrize("large", [False, True])
@pytest.mark.parametrize("params, key, says", [
    ({"speculative.method": {"choices": ["none", "draft_model"]},
      "speculative.num_tokens": {"choices": [2], "when": {"speculative.method": "draft_model"}}},
     "params.speculative.method", "draft_model needs speculative.model"),
    ({"speculative.method": {"choices": ["none", "medusa2"]},
      "speculative.num_tokens": {"choices": [2], "when": {"speculative.method": "medusa2"}}},
     "params.speculative.method", "'medusa2' is not a speculative method of vLLM 0.26.0"),
    ({"speculative.method": {"choices": ["none", "ngram"]},
      "speculative.num_tokens": {"choices": [0, 2], "when": {"speculative.method": "ngram"}}},
     "params.speculative.num_tokens", "must be an integer >= 1, not 0"),
    ({"speculative.method": {"choices": ["none", "ngram"]}}, "params.speculative.method",
     "ngram needs speculative.num_tokens"),
])
def test_what_the_release_cannot_do_is_one_line_exit_2(tmp_path, params, key, says, large):
    res = validate(vllm_job(tmp_path, params, large=large))
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert f"space.yaml: {key}: " in lines[0] and says in lines[0], lines[0]


def test_a_server_without_speculation_refuses_the_params(tmp_path):
    (tmp_path / "space.yaml").write_text(yaml.safe_dump({"params": {
        "speculative.method": {"choices": ["none", "ngram"]},
        "speculative.num_tokens": {"choices": [2], "when": {"speculative.method": "ngram"}}}}))
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"study": "s", "report_dir": str(tmp_path / "r"), "space": "space.yaml",
                                   "backend": {"kind": "refserver", "settings": {"model": "tiny", "device": "cpu"}}}))
    res = validate(job)
    assert res.returncode == 2 and "the reference server has no speculative decoding" in res.stderr, res.stderr


@pytest.mark.parametrize("job, space", [
    ("jobs/h200-vllm-1b-spec.yaml", None),
    ("jobs/h200-vllm-1b-spec-hello.yaml", None),
    ("jobs/glm5-vllm-8xpcie.yaml", "search_spaces/vllm-pcie-spec.yaml"),
])
def test_the_shipped_speculative_jobs_validate(tmp_path, job, space):
    path = REPO / job
    if space:  # the motivating job with the space its comment names
        data = yaml.safe_load(path.read_text())
        data.update(space=str(REPO / space), report_dir=str(tmp_path / "r"))
        data.pop("output_dir", None)
        path = tmp_path / "glm5-spec.yaml"
        path.write_text(yaml.safe_dump(data))
    loaded = load_job(path)
    methods = set(loaded.space.param("speculative.method").choices)
    assert "none" in methods and methods & {"ngram", "mtp", "draft_model"}
    backend = loaded.backend_obj()
    configs = loaded.space.enumerate() or []
    speculating = [c for c in configs if c.get("speculative.method") not in (None, "none")]
    assert configs and speculating or loaded.space.size() is None
    for config in speculating[:50]:
        argv = backend.launch_spec(backend.normalize({**backend.default_config(), **config}), "h", 1).argv
        assert argv.count("--speculative-config") == 1


# ---- the rules that depend on the NCCL release -------------------------------------------------

def nccl_job(tmp_path: Path, params: dict, **top) -> Path:
    """A vLLM 0.33.0 job (its bundled table) at TP 2 whose space tunes ``params``."""
    (tmp_path / "space.yaml").write_text(yaml.safe_dump({"params": {"tp_size": {"choices": [2]}, **params}}))
    job = {"study": "nc", "report_dir": str(tmp_path / "reports"), "gpus_per_node": 2, "space": "space.yaml",
           "backend": {"kind": "vllm", "settings": {"model": "/models/m", "version": "0.33.0"}}, **top}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def run_validate(job: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator", "validate", str(job), *extra], capture_output=True,
                          text=True, cwd=REPO, timeout=120)


@pytest.mark.parametrize("value", ["LL,Simple;AllReduce:LL", "LL,Simple;allreduce:LL"])
def test_a_per_collective_nccl_proto_reaches_the_server_unchanged(tmp_path, value):
    """Sent whole (every collective's entry), shell-quoted for the ';', in NCCL's own names: as
    written when written so, else with the collective's case as NCCL prints it (NCCL compares
    them case-insensitively: the same setting)."""
    res = run_validate(nccl_job(tmp_path, {"env.NCCL_PROTO": {"choices": [value]}}, nccl_version="2.28.9"),
                       "--commands")
    assert res.returncode == 0, res.stderr
    sample = res.stdout.split("# sample 1\n", 1)[1].splitlines()[0]
    assert "NCCL_PROTO='LL,Simple;AllReduce:LL'" in sample


@pytest.mark.parametrize("value,needle", [
    ("allreduc:LL", "unknown collective 'allreduc'"),
    ("allreduce:LL;Simple", "every entry after the first needs a collective prefix"),
    ("allreduce:LL;allgather:LL129", "'LL129' is not a known value"),
    ("allreduce:^LL,LL128,Simple", "leaves AllReduce no protocol"),
])
def test_a_malformed_per_collective_value_is_one_line_exit_2(tmp_path, value, needle):
    res = run_validate(nccl_job(tmp_path, {"env.NCCL_PROTO": {"choices": ["LL", value]}}, nccl_version="2.28.9"))
    assert res.returncode == 2 and needle in res.stderr and res.stderr.count("\n") == 1, res.stderr
    assert "params.env.NCCL_PROTO" in res.stderr


def test_the_per_collective_form_needs_the_release_that_reads_it(tmp_path):
    res = run_validate(nccl_job(tmp_path, {"env.NCCL_ALGO": {"choices": ["allreduce:Ring"]}}, nccl_version="2.23.4"))
    assert res.returncode == 2 and "needs NCCL >= 2.24 (found 2.23.4)" in res.stderr, res.stderr
    assert "params.env.NCCL_ALGO.choices[0]" in res.stderr


@pytest.mark.parametrize("params,env", [
    ({"env.NCCL_SYM_CTAS": {"choices": [4, 8]}}, None),
    ({"allreduce.backend": {"choices": ["custom", "nccl_symm_mem"]}}, None),
    ({}, {"NCCL_SYM_KERNEL": "AllReduce_AGxLL_R"}),
])
def test_knobs_nccl_ignores_on_pcie_are_refused_with_the_reason_and_the_release(tmp_path, params, env):
    top = {"env": env} if env else {}
    res = run_validate(nccl_job(tmp_path, params, nccl_version="2.29.2", **top))
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert "fully NVLink-connected systems" in res.stderr and "NCCL 2.29.2" in res.stderr
    assert "allow_unsafe_nccl: true" in res.stderr
    assert run_validate(nccl_job(tmp_path, params, nccl_version="2.28.9", **top)).returncode == 0  # still ran there
    assert run_validate(nccl_job(tmp_path, params, nccl_version="2.29.2", allow_unsafe_nccl=True,
                                 **top)).returncode == 0


def test_the_release_comes_from_torch_in_the_servers_python_unless_declared(tmp_path, monkeypatch):
    from orchestrator.core import versions

    asked = []

    def torch_nccl(python=None):
        asked.append(python)
        return {"torch": "2.11.0", "cuda": "13.0", "nccl": "2.29.7"}

    monkeypatch.setattr(versions, "torch_versions", torch_nccl)
    plain = nccl_job(tmp_path, {"env.NCCL_PROTO": {"choices": ["LL", "Simple"]}})
    load_job(plain)
    assert asked == []  # no value needs the release: torch is not asked
    with pytest.raises(BadInput, match=r"NCCL 2\.29\.7\).*set allow_unsafe_nccl"):
        load_job(nccl_job(tmp_path, {"env.NCCL_SYM_CTAS": {"choices": [4]}}))
    assert asked
    with pytest.raises(BadInput, match="must be an NCCL release like '2.28.9'"):
        load_job(nccl_job(tmp_path, {}, nccl_version="new"))
