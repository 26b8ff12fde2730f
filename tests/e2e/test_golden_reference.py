"""The golden reference in studies of real reference servers (through `ncclsweep run` on real
Ray, and a reference config through the driver in this process; real journals): an unusable
or outvoted reference stops the study at once with one line naming the cause, never moving
to another trial; a reference config the job names gates the study; a disputed reference
crowns no config; nothing wrong is exported."""

from __future__ import annotations

import io
import shutil
from contextlib import redirect_stderr

import pytest

from conftest import run_end, run_in_process, start_local_ray, write_job
from logtext import log_lines
from orchestrator.cli import main
from orchestrator.config.job import load_job
from orchestrator.core.records import TIMEOUT_KINDS
from orchestrator.study.evidence.history import best_rows, trial_rows
from orchestrator.study.storage.storage import GOLDEN_ATTR, open_study


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
    last = log_lines(err)[-1]
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
        assert "start-crash" in log_lines(err)[-1]
        rows = trial_rows(open_study(load_job(job_path), create=False))
        assert len(rows) == attempt and all(r.is_baseline and not r.counted for r in rows)


@pytest.mark.slow
def test_a_reference_config_the_job_names_is_captured_first_and_gates_the_study(tmp_path, no_leftover_servers):
    """correctness.reference: a config (here 2 threads, the baseline 1): one launch of it
    captures the golden reference before anything else; it is not a trial of the study."""
    job_path = write_job(tmp_path, study="refconfig", budget={"trials": 2},
                         correctness={"reference": {"backend.threads": 2}, "check_tokens": 12,
                                      "prompts": ["The quick brown fox", "Once upon a time"]})
    job = load_job(job_path)
    out = io.StringIO()
    run_in_process(job, out=out)
    study = open_study(job, create=False)
    rows = trial_rows(study)
    ref = [r for r in rows if not r.counted and r.cached_from is None]
    assert len(ref) == 1 and ref[0].params["backend.threads"] == 2, out.getvalue()
    assert study.user_attrs[GOLDEN_ATTR]["trial"] == ref[0].number == 0
    assert study.user_attrs[GOLDEN_ATTR]["source"] == "config"
    counted = [r for r in rows if r.counted]
    assert len(counted) == 2 and all(r.state == "COMPLETE" and r.correctness["ok"] for r in counted)
    assert "capturing the golden reference from correctness.reference" in out.getvalue()


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


def garbage_study(directory, case: str, **overrides):
    """The job of a garbage-baseline case in ``directory`` (a budget of 6 it never spends)."""
    return write_job(directory, study=f"garbage-{case}", **{
        "budget": {"trials": 6}, "sampler": {"name": "tpe", "seed": 0}, "max_consecutive_failures": 10,
        **GARBAGE_BASELINES[case], **overrides})


@pytest.fixture(scope="module")
def several_params_stopped(tmp_path_factory, _ray_session):
    """The "several-params" garbage study run once, stopped: (its folder, the run's exit code and
    stderr). Read by the test of the stop; a test that goes on from it works on a copy."""
    start_local_ray()
    directory = tmp_path_factory.mktemp("several-params")
    code, err = run_cli("run", str(garbage_study(directory, "several-params")))
    return directory, code, err


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(GARBAGE_BASELINES))
def test_every_garbage_baseline_stops_the_study_and_nothing_is_exported(tmp_path, ray_local, no_leftover_servers,
                                                                       case, request):
    """Acceptance (the class of garbage baselines): correct configs that agree with each other
    and share nothing but default values outvote the garbage baseline; the study stops with one
    line naming them before the budget is spent, bans nothing, and `export` refuses with one
    line (the baseline's own correctness is in question) instead of exporting the garbage."""
    if case == "several-params":  # the run a fixed baseline then goes on from
        directory, code, err = request.getfixturevalue("several_params_stopped")
        job_path = directory / "job.yaml"
    else:
        job_path = garbage_study(tmp_path, case)
        code, err = run_cli("run", str(job_path))
    assert code == 1, err
    last = log_lines(err)[-1]
    job = load_job(job_path)
    rows = trial_rows(open_study(job, create=False))
    # the baseline's launch that captured the reference (trial 0, or its retry when a busy host timed it out)
    ref = next(r.number for r in rows if r.is_baseline and (r.correctness or {}).get("reference") and r.counted)
    assert last.startswith(f"ncclsweep: error: stopping: the golden reference (the baseline, trial {ref}) looks "
                           "wrong"), err
    # a timeout the tool re-queued (a busy host's start-up or benchmark, uncounted) is no vote either way
    launched = [r for r in rows if r.cached_from is None and not r.skipped
                and not (r.failure_kind in TIMEOUT_KINDS and not r.counted)]
    outvoters = [r for r in launched if not r.is_baseline]
    assert 2 <= len(outvoters) <= 3 and len(launched) < 6, err  # stopped before the budget
    assert all(r.state == "FAIL" and not r.counted and r.params["backend.fault"] == "none" for r in outvoters)
    assert f"trials {', '.join(str(r.number) for r in outvoters)} (different configs) agree" in last
    assert best_rows(rows, 5) == [] and "not proposing" not in err
    code, err = run_cli("export", str(job_path), "--format", "env")
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert f"nothing to export: the golden reference (trial {ref}) was outvoted" in err
    assert f"best: none: the golden reference (trial {ref}) was outvoted" in _status(job_path)


def _status(job_path) -> str:
    """What `ncclsweep status JOB` prints (stdout)."""
    from contextlib import redirect_stdout

    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(io.StringIO()):
        assert main(["status", str(job_path)]) == 0
    return out.getvalue()


@pytest.mark.slow
def test_a_fixed_baseline_measures_the_configs_that_outvoted_the_old_one_and_one_is_best(
        tmp_path, ray_local, no_leftover_servers, several_params_stopped):
    """After the stop, the user fixes the baseline: the configs that outvoted the garbage one
    were not held against them, so they are measured again, pass the gate and can be best."""
    stopped, code, err = several_params_stopped  # a copy of the stopped study, continued here
    assert code == 1 and "looks wrong" in err, err
    shutil.copytree(stopped, tmp_path, dirs_exist_ok=True)
    job_path = tmp_path / "job.yaml"
    first = trial_rows(open_study(load_job(garbage_study(tmp_path, "several-params")), create=False))
    outvoted_keys = {r.config_key for r in first if r.correctness.get("outvoted_reference")}
    assert outvoted_keys
    case = GARBAGE_BASELINES["several-params"]
    garbage_study(tmp_path, "several-params", budget={"trials": 4},
                  baseline={**case["baseline"], "backend.fault": "none"})
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
    said = run_end(err.strip().splitlines())[0]
    assert said.startswith(f"no config is called best: trial {wrong[0].number} failed the correctness gate"), said
    code, out = run_cli("export", str(job_path), "--format", "env")
    assert code == 1 and "nothing to export" in out and "golden reference (trial 0)" in out, out
    code, err = run_cli("run", str(job_path), "--trials", "4")
    assert code == 0, err
    rows = trial_rows(open_study(load_job(job_path), create=False))
    assert any(r.correctness.get("ok") and not r.is_baseline for r in rows), err
    end = run_end(err.strip().splitlines())
    assert any(line.startswith("next: ") for line in end) and "no config is called best" not in end[0], end
    assert run_cli("export", str(job_path), "--format", "env")[0] == 0
