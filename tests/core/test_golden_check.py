"""The golden reference is checked before any comparison: calibrated on real outputs
(tests/data/reference_outputs.json), and in studies of real reference servers an unusable
reference stops the study at once with one line naming the cause, never moving to
another trial."""

from __future__ import annotations

import io
import json
import math
from contextlib import redirect_stderr

import pytest

from conftest import TESTS, write_job
from orchestrator.cli import main
from orchestrator.config.job import load_job
from orchestrator.core import golden_check
from orchestrator.core.correctness import Golden
from orchestrator.driver.golden import GoldenSource
from orchestrator.driver.run import StudyDriver
from orchestrator.study.history import best_rows, trial_rows
from orchestrator.study.storage import GOLDEN_ATTR, open_study

OUTPUTS = json.loads((TESTS / "data" / "reference_outputs.json").read_text())


def golden(name: str, **kw) -> Golden:
    data = OUTPUTS[name]
    texts = data["texts"]
    return Golden(prompts=[f"p{i}" for i in range(len(texts))], texts=texts, tokens=data.get("tokens") or [], **kw)


@pytest.mark.parametrize("name", ["refserver-tiny-12", "refserver-tiny-32", "gpu-8b", "gpu-1b"])
def test_real_outputs_of_working_servers_are_usable(name):
    """Random-weight models repeat words (' pekuge pekuge pekuge pekuge pekuge dofo',
    ' tanifo' six times): repetition inside an output is not degeneration."""
    assert golden_check.unusable(golden(name)) == (None, [])


@pytest.mark.parametrize("name", ["refserver-tiny-garbage-12", "refserver-tiny-garbage-32"])
def test_garbage_fault_looks_like_text_so_its_own_check_passes(name):
    """The reference server's shard-order bug gives another random function, text as
    plausible as the working server's: no check of the text alone can refuse it (the
    study-level test below catches it by the configs that outvote it)."""
    assert golden_check.unusable(golden(name)) == (None, [])


def test_the_old_1b_output_is_refused_even_when_repetition_is_allowed():
    for allow in (False, True):
        why, _ = golden_check.unusable(golden("gpu-1b-before-fix"), allow)
        assert why and "not text on 2 of 3 prompts" in why and "only whitespace" in why


def test_a_two_token_cycle_is_refused_unless_the_job_allows_it():
    texts = [OUTPUTS["vllm-dummy"]["texts"][0], " ROMtax ROMtax ROMtax ROMtax ROMtax", " qa qa qa qa qa qa qa"]
    g = Golden(prompts=["a", "b", "c"], texts=texts,
               tokens=[[" FAIL", "er"] * 8, [" ROM", "tax"] * 5, [" qa"] * 7])
    why, _ = golden_check.unusable(g)
    assert "repeats ' FAILer'" in why and "allow_repetitive_reference: true" in why
    why, warnings = golden_check.unusable(g, allow_repetitive=True)
    assert why is None and "repetitive" in warnings[0]
    assert golden_check.cycle_unit(" a b c a b c a b c") is None  # a longer cycle reads as text


def test_same_output_for_every_prompt_and_non_finite_logprobs_are_refused():
    same = OUTPUTS["gpu-8b"]["texts"][0]
    assert "same output" in golden_check.unusable(Golden(prompts=["a", "b"], texts=[same, same]))[0]
    g = golden("gpu-8b", logprobs=[[-0.1, -0.2], [-0.3, math.nan], [-0.1]])
    assert "not finite" in golden_check.unusable(g)[0]
    bad = Golden(prompts=["a", "b"], texts=["\ufffd\ufffd\ufffd x", "<0xFD><0xDA><0x80> y"])
    assert "replacement characters or raw bytes" in golden_check.unusable(bad)[0]


def test_outvoted_needs_two_distinct_configs_that_agree():
    ref = ["x1 x2", "y1 y2"]
    other = ["a1 a2", "b1 b2"]
    assert golden_check.outvoted(ref, [(1, "k1", other)]) is None
    assert golden_check.outvoted(ref, [(1, "k1", other), (2, "k1", other)]) is None  # the same config twice
    assert golden_check.outvoted(ref, [(1, "k1", other), (2, "k2", ["c", "d"])]) is None  # they disagree
    why = golden_check.outvoted(ref, [(1, "k1", other), (2, "k2", other)])
    assert "trials 1, 2" in why and "odd one out" in why


# ---- studies of real reference servers --------------------------------------------------------

def run_cli(*argv: str) -> tuple[int, str]:
    err = io.StringIO()
    with redirect_stderr(err):
        code = main(list(argv))
    return code, err.getvalue()


@pytest.mark.slow
def test_a_garbage_baseline_stops_the_study_before_the_budget_is_spent(tmp_path, ray_local, no_leftover_servers):
    """Acceptance: the baseline is the reference server with its shard-order bug. The first
    two configs compared with it (no fault; a slow start) agree with each other and not
    with it: the study stops with one line, spends 3 of 6 trials, bans nothing."""
    space = ('params:\n  backend.fault: {choices: [garbage, none, "slow-start:1"]}\n'
             '  backend.threads: {choices: [1, 2]}\n')
    job_path = write_job(tmp_path, study="garbage-baseline", space_text=space,
                         baseline={"backend.fault": "garbage", "backend.threads": 1},
                         budget={"trials": 6}, sampler={"name": "tpe", "seed": 0})
    code, err = run_cli("run", str(job_path))
    assert code == 1, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("ncclsweep: error: stopping: the golden reference (the baseline, trial 0) looks wrong"), err
    job = load_job(job_path)
    study = open_study(job, create=False)
    rows = trial_rows(study)
    launched = [r for r in rows if r.cached_from is None and not r.skipped]
    assert len(launched) <= 3, err
    outvoters = [r for r in launched if not r.is_baseline]
    assert {r.params["backend.fault"] for r in outvoters} == {"none", "slow-start:1"}
    assert all(r.state == "FAIL" and not r.counted for r in outvoters)  # not held against them
    assert not study.user_attrs.get(GOLDEN_ATTR)
    assert [r.params["backend.fault"] for r in best_rows(rows, 5)] == []  # the garbage baseline is never best


@pytest.mark.slow
def test_a_crashing_baseline_stops_at_once_and_is_measured_again_next_run(tmp_path, ray_local, no_leftover_servers):
    """The reference never moves to another trial: a crash of the baseline stops the study
    before anything else launches, and is not held against the config (the next run tries
    the same baseline again)."""
    job_path = write_job(tmp_path, study="crash-baseline", space_text=(
        "params:\n  backend.fault: {choices: [none, crash-on-start]}\n  backend.threads: {choices: [1, 2]}\n"),
        baseline={"backend.fault": "crash-on-start", "backend.threads": 1}, budget={"trials": 4})
    for attempt in (1, 2):
        code, err = run_cli("run", str(job_path))
        assert code == 1 and "the golden reference is unusable: the baseline (trial" in err, err
        assert "start-crash" in err.strip().splitlines()[-1]
        rows = trial_rows(open_study(load_job(job_path), create=False))
        assert len(rows) == attempt and all(r.is_baseline and not r.counted for r in rows)


def test_a_degenerate_reference_file_is_bad_input(tmp_path):
    ref = tmp_path / "ref.json"
    ref.write_text(json.dumps({"prompts": ["a", "b", "c"], "texts": OUTPUTS["gpu-1b-before-fix"]["texts"]}))
    job_path = write_job(tmp_path, study="reffile", correctness={"reference": str(ref), "prompts": ["a", "b", "c"]})
    job = load_job(job_path)
    from orchestrator.core.errors import BadInput

    with pytest.raises(BadInput, match="reference file .* is unusable: its output is not text"):
        GoldenSource(job, job.baseline_config(), print).from_file()


@pytest.mark.slow
def test_a_reference_config_the_job_names_is_captured_first_and_gates_the_study(tmp_path, ray_local,
                                                                              no_leftover_servers):
    """correctness.reference: a config (here 2 threads, the baseline 1): one launch of it
    captures the golden reference before anything else; it is not a trial of the study."""
    job_path = write_job(tmp_path, study="refconfig", budget={"trials": 2},
                         correctness={"reference": {"backend.threads": 2}, "check_tokens": 12,
                                      "prompts": ["The quick brown fox", "Once upon a time"]})
    job = load_job(job_path)
    out = io.StringIO()
    StudyDriver(job, out=out).run()
    study = open_study(job, create=False)
    rows = trial_rows(study)
    ref = [r for r in rows if not r.counted and r.cached_from is None]
    assert len(ref) == 1 and ref[0].params["backend.threads"] == 2, out.getvalue()
    assert study.user_attrs[GOLDEN_ATTR]["trial"] == ref[0].number == 0
    assert study.user_attrs[GOLDEN_ATTR]["source"] == "config"
    counted = [r for r in rows if r.counted]
    assert len(counted) == 2 and all(r.state == "COMPLETE" and r.correctness["ok"] for r in counted)
    assert "capturing the golden reference from correctness.reference" in out.getvalue()


# ---- what counts as a shared departure (the outvote rule's one exception) ------------------------

def test_returning_to_a_default_is_no_shared_departure():
    """Every form of a garbage baseline: a fault set in the baseline (the correct configs all
    carry the server's own `backend.fault: none`), a baseline that differs from the trials in
    several params (they share `tp_size: 1`, the backend's default), a baseline setting that
    the trials leave out (an NCCL variable dropped at TP 1). None of these shares a setting
    that could explain two configs' agreement; a non-default value both set does."""
    from orchestrator.backends.command import CommandBackend
    from orchestrator.backends.refserver import RefServerBackend

    ref = RefServerBackend({"model": "tiny", "device": "cpu"})
    norm, defaults = ref.normalize, ref.default_values()
    garbage = norm({"tp_size": 2, "backend.threads": 1, "backend.fault": "garbage", "env.NCCL_PROTO": "LL128"})
    a = norm({"tp_size": 1, "backend.threads": 1, "backend.fault": "none"})
    b = norm({"tp_size": 1, "backend.threads": 2, "backend.fault": "none"})
    c = norm({"tp_size": 2, "backend.threads": 2, "backend.fault": "none", "env.NCCL_PROTO": "LL"})
    assert "env.NCCL_PROTO" in garbage and "env.NCCL_PROTO" not in a  # dropped at TP 1: both leave it out
    assert golden_check.shared_departure(a, b, garbage, defaults) is None  # tp_size 1, fault none: defaults
    assert golden_check.shared_departure(b, c, garbage, defaults) == "backend.threads"  # 2: neither default nor base
    assert golden_check.shared_departure(a, c, garbage, defaults) is None  # threads 1 is the baseline's own
    # the same rule without the default: tp_size=1 and fault=none would be departures
    assert golden_check.shared_departure(a, b, garbage, {}) == "backend.fault"
    # the command backend's settings.defaults fill what a config leaves out: they are its defaults
    cmd = CommandBackend({"argv": ["{python}", "-m", "orchestrator.refserver", "--port", "{port}",
                                   "--fault", "{backend.fault}"], "defaults": {"backend.fault": "slow-start:0"}})
    x, y = {"tp_size": 2, "backend.fault": "slow-start:0"}, {"tp_size": 4, "backend.fault": "slow-start:0"}
    assert golden_check.shared_departure(x, y, {"tp_size": 1, "backend.fault": "garbage"}, cmd.default_values()) is None


def test_a_pair_that_shares_a_departure_is_no_vote():
    ref = ["x1 x2", "y1 y2"]
    other = ["a1 a2", "b1 b2"]
    failed = [(1, "k1", other), (2, "k2", other)]
    assert golden_check.outvoted(ref, failed, related=lambda a, b: True) is None
    unrelated_to_3 = lambda a, b: 3 not in (a, b)  # noqa: E731 - 1 and 2 share a setting, 3 shares none
    why = golden_check.outvoted(ref, [*failed, (3, "k3", other)], related=unrelated_to_3)
    assert why is not None and "trials 1, 2, 3" in why


GARBAGE_BASELINES = {
    # the garbage comes from the server itself (backend.settings.fault), the baseline is the
    # backend's defaults; the trials set the healthy default explicitly
    "all-defaults": dict(space_text=("params:\n  backend.fault: {choices: [none]}\n"
                                     "  backend.threads: {choices: [1, 2]}\n  tp_size: {choices: [1, 2]}\n"),
                         baseline={},
                         backend={"kind": "refserver", "settings": {"model": "tiny", "device": "cpu",
                                                                    "fault": "garbage"}}),
    # the baseline differs from the trials in several params: correct configs share tp_size=1
    # (the default) and backend.fault=none (the default), never a value of their own
    "several-params": dict(space_text=("params:\n  tp_size: {choices: [1, 2]}\n  backend.threads: {choices: [1, 2]}\n"
                                       "  backend.fault: {choices: [none, garbage]}\n"
                                       "constraints:\n  - \"backend.fault == 'none' or "
                                       "(tp_size == 2 and backend.threads == 2)\"\n"),
                           baseline={"tp_size": 2, "backend.threads": 2, "backend.fault": "garbage"}),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(GARBAGE_BASELINES))
def test_every_garbage_baseline_stops_the_study_and_nothing_is_exported(tmp_path, ray_local, no_leftover_servers,
                                                                       case):
    """Acceptance (the class of garbage baselines): correct configs that agree with each other
    and share nothing but default values outvote the garbage baseline; the study stops with one
    line naming them before the budget is spent, bans nothing, and `export` refuses with one
    line (the baseline's own correctness is in question) instead of exporting the garbage."""
    job_path = write_job(tmp_path, study=f"garbage-{case}", budget={"trials": 6}, sampler={"name": "tpe", "seed": 0},
                         max_consecutive_failures=10, **GARBAGE_BASELINES[case])
    code, err = run_cli("run", str(job_path))
    assert code == 1, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("ncclsweep: error: stopping: the golden reference (the baseline, trial 0) looks wrong"), err
    job = load_job(job_path)
    rows = trial_rows(open_study(job, create=False))
    launched = [r for r in rows if r.cached_from is None and not r.skipped]
    outvoters = [r for r in launched if not r.is_baseline]
    assert 2 <= len(outvoters) <= 3 and len(launched) < 6, err  # stopped before the budget
    assert all(r.state == "FAIL" and not r.counted and r.params["backend.fault"] == "none" for r in outvoters)
    assert f"trials {', '.join(str(r.number) for r in outvoters)} (different configs) agree" in last
    assert best_rows(rows, 5) == [] and "not proposing" not in err
    code, err = run_cli("export", str(job_path), "--format", "env")
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert "nothing to export: the golden reference (trial 0) was outvoted" in err
    assert "best: none: the golden reference (trial 0) was outvoted" in _status(job_path)


def _status(job_path) -> str:
    """What `ncclsweep status JOB` prints (stdout)."""
    from contextlib import redirect_stdout

    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(io.StringIO()):
        assert main(["status", str(job_path)]) == 0
    return out.getvalue()


@pytest.mark.slow
def test_a_fixed_baseline_measures_the_configs_that_outvoted_the_old_one_and_one_is_best(
        tmp_path, ray_local, no_leftover_servers):
    """After the stop, the user fixes the baseline: the configs that outvoted the garbage one
    were not held against them, so they are measured again, pass the gate and can be best."""
    case = GARBAGE_BASELINES["several-params"]
    job_path = write_job(tmp_path, study="fixed", budget={"trials": 4}, sampler={"name": "tpe", "seed": 0},
                         max_consecutive_failures=10, **case)
    code, err = run_cli("run", str(job_path))
    assert code == 1 and "looks wrong" in err, err
    first = trial_rows(open_study(load_job(job_path), create=False))
    outvoted_keys = {r.config_key for r in first if r.correctness.get("outvoted_reference")}
    write_job(tmp_path, study="fixed", budget={"trials": 4}, sampler={"name": "tpe", "seed": 0},
              max_consecutive_failures=10, **{**case, "baseline": {**case["baseline"], "backend.fault": "none"}})
    code, err = run_cli("run", str(job_path))
    assert code == 0, err
    rows = trial_rows(open_study(load_job(job_path), create=False))
    remeasured = [r for r in rows if r.config_key in outvoted_keys and r.counted and r.state == "COMPLETE"]
    assert remeasured and all(r.correctness.get("ok") for r in remeasured), err
    ranked = {r.config_key for r in best_rows(rows, 10)}
    assert outvoted_keys & ranked  # a config that once outvoted the reference is not tainted by it
    code, err = run_cli("export", str(job_path), "--format", "json")
    assert code == 0, err


@pytest.mark.slow
def test_a_study_that_ends_with_its_reference_disputed_calls_no_config_best(tmp_path, ray_local,
                                                                            no_leftover_servers):
    """A correct baseline and one wrong config, and the budget ends there: one config against
    the reference, nothing else compared. The wrong config is recorded wrong-output (as always),
    but the baseline is not crowned either: the last line and `export` say the reference is
    disputed. One more trial that passes settles it."""
    space = "params:\n  backend.fault: {choices: [none, garbage]}\n  backend.threads: {choices: [1, 2]}\n"
    job_path = write_job(tmp_path, study="disputed", space_text=space, budget={"trials": 2},
                         baseline={"backend.fault": "none", "backend.threads": 1}, sampler={"name": "tpe", "seed": 0})
    code, err = run_cli("run", str(job_path))
    assert code == 0, err
    rows = trial_rows(open_study(load_job(job_path), create=False))
    wrong = [r for r in rows if r.state == "FAIL"]
    assert [(r.failure_kind, r.counted, r.params["backend.fault"]) for r in wrong] == [("wrong-output", True,
                                                                                         "garbage")], err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"no config is called best: trial {wrong[0].number} failed the correctness gate"), last
    code, out = run_cli("export", str(job_path), "--format", "env")
    assert code == 1 and "nothing to export" in out and "golden reference (trial 0)" in out, out
    code, err = run_cli("run", str(job_path), "--trials", "4")
    assert code == 0, err
    rows = trial_rows(open_study(load_job(job_path), create=False))
    assert any(r.correctness.get("ok") and not r.is_baseline for r in rows), err
    last = err.strip().splitlines()[-1]
    assert "| next:" in last and "no config is called best" not in last, last
    assert run_cli("export", str(job_path), "--format", "env")[0] == 0
