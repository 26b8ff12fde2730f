"""The golden reference is checked before any comparison: calibrated on real outputs
(tests/data/reference_outputs.json), and in studies of real reference servers an unusable
reference stops the study at once with one line naming the cause, never moving to
another trial."""

from __future__ import annotations

import io
import json
import math
from contextlib import redirect_stderr
from pathlib import Path

import pytest

from conftest import write_job
from orchestrator import reference
from orchestrator.cli import main
from orchestrator.correctness import Golden
from orchestrator.history import best_rows, trial_rows
from orchestrator.job import load_job
from orchestrator.study import GOLDEN_ATTR, StudyDriver, open_study

OUTPUTS = json.loads((Path(__file__).with_name("data") / "reference_outputs.json").read_text())


def golden(name: str, **kw) -> Golden:
    data = OUTPUTS[name]
    texts = data["texts"]
    return Golden(prompts=[f"p{i}" for i in range(len(texts))], texts=texts, tokens=data.get("tokens") or [], **kw)


@pytest.mark.parametrize("name", ["refserver-tiny-12", "refserver-tiny-32", "gpu-8b", "gpu-1b"])
def test_real_outputs_of_working_servers_are_usable(name):
    """Random-weight models repeat words (' pekuge pekuge pekuge pekuge pekuge dofo',
    ' tanifo' six times): repetition inside an output is not degeneration."""
    assert reference.unusable(golden(name)) == (None, [])


@pytest.mark.parametrize("name", ["refserver-tiny-garbage-12", "refserver-tiny-garbage-32"])
def test_garbage_fault_looks_like_text_so_its_own_check_passes(name):
    """The reference server's shard-order bug gives another random function, text as
    plausible as the working server's: no check of the text alone can refuse it (the
    study-level test below catches it by the configs that outvote it)."""
    assert reference.unusable(golden(name)) == (None, [])


def test_the_old_1b_output_is_refused_even_when_repetition_is_allowed():
    for allow in (False, True):
        why, _ = reference.unusable(golden("gpu-1b-before-fix"), allow)
        assert why and "not text on 2 of 3 prompts" in why and "only whitespace" in why


def test_a_two_token_cycle_is_refused_unless_the_job_allows_it():
    texts = [OUTPUTS["vllm-dummy"]["texts"][0], " ROMtax ROMtax ROMtax ROMtax ROMtax", " qa qa qa qa qa qa qa"]
    g = Golden(prompts=["a", "b", "c"], texts=texts,
               tokens=[[" FAIL", "er"] * 8, [" ROM", "tax"] * 5, [" qa"] * 7])
    why, _ = reference.unusable(g)
    assert "repeats ' FAILer'" in why and "allow_repetitive_reference: true" in why
    why, warnings = reference.unusable(g, allow_repetitive=True)
    assert why is None and "repetitive" in warnings[0]
    assert reference.cycle_unit(" a b c a b c a b c") is None  # a longer cycle reads as text


def test_same_output_for_every_prompt_and_non_finite_logprobs_are_refused():
    same = OUTPUTS["gpu-8b"]["texts"][0]
    assert "same output" in reference.unusable(Golden(prompts=["a", "b"], texts=[same, same]))[0]
    g = golden("gpu-8b", logprobs=[[-0.1, -0.2], [-0.3, math.nan], [-0.1]])
    assert "not finite" in reference.unusable(g)[0]
    bad = Golden(prompts=["a", "b"], texts=["\ufffd\ufffd\ufffd x", "<0xFD><0xDA><0x80> y"])
    assert "replacement characters or raw bytes" in reference.unusable(bad)[0]


def test_outvoted_needs_two_distinct_configs_that_agree():
    ref = ["x1 x2", "y1 y2"]
    other = ["a1 a2", "b1 b2"]
    assert reference.outvoted(ref, [(1, "k1", other)]) is None
    assert reference.outvoted(ref, [(1, "k1", other), (2, "k1", other)]) is None  # the same config twice
    assert reference.outvoted(ref, [(1, "k1", other), (2, "k2", ["c", "d"])]) is None  # they disagree
    why = reference.outvoted(ref, [(1, "k1", other), (2, "k2", other)])
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
    from orchestrator.errors import BadInput

    with pytest.raises(BadInput, match="reference file .* is unusable: its output is not text"):
        StudyDriver(job, out=io.StringIO())._golden(open_study(job))


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
