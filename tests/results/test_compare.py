"""compare: which trials ``--also`` adds, and how the table shows them (no servers here; the
end-to-end run with real servers is in tests/e2e/test_study_e2e.py)."""

from __future__ import annotations

import dataclasses
import re
import statistics

import pytest
import recorded_study as fx  # a real journal study with every outcome

from orchestrator.cli import main
from orchestrator.core.errors import BadInput
from orchestrator.results.compare import _also_rows, format_compare
from orchestrator.results.compare_file import CompareFile
from orchestrator.study.evidence import history
from orchestrator.study.storage import storage


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    job, _study = fx.build_study(tmp_path_factory.mktemp("compare"))
    return history.trial_rows(storage.load_study(job))


def _pick(rows, also):
    best = history.best_rows(rows, 1)[0]
    return [r.number for r in _also_rows(rows, best, history.baseline_row(rows), also)]


def test_also_takes_ranked_trials_once_and_never_baseline_or_best(rows):
    assert _pick(rows, [1]) == [1]
    assert _pick(rows, [9, 1]) == [9, 1]
    assert _pick(rows, "ties") == []  # the best (57 +-1%) is beyond the noise of the rest
    assert _pick(rows, None) == []


@pytest.mark.parametrize(("also", "why"), [
    ([0], "trial 0 is the baseline, which every round measures already; --also takes other ranked trials: 1, 9"),
    ([2], "trial 2 is the best, which every round measures already"),
    ([1, 7], "trial 7 has the config of the best (trial 2)"),  # 7 answers from the best's cache
    ([8], "trial 8 has the config of the baseline (trial 0)"),  # the baseline's config again, on another node
    ([1, 1], "trial 1 is given twice in --also"),
])
def test_also_refuses_what_would_add_no_column(rows, also, why):
    """A number that is measured anyway (baseline, best, given twice) is refused, not dropped."""
    with pytest.raises(BadInput, match=re.escape(f"--also: {why}")):
        _pick(rows, also)


def test_compare_also_the_baseline_is_one_line_before_any_launch(tmp_path, capsys):
    from conftest import write_job

    fx.build_study(tmp_path)  # its study "demo" in tmp_path/reports/demo/study.journal
    job = write_job(tmp_path, study="demo")
    assert main(["compare", str(job), "--also", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["ncclsweep: error: --also: trial 0 is the baseline, which every round measures already; "
                   "--also takes other ranked trials: 1, 9"]
    assert not (tmp_path / "reports" / "demo" / "compare.json").exists()  # nothing measured, nothing written


def test_compare_plan_of_a_single_level_study_refuses_before_any_launch(tmp_path, capsys):
    """A study of one level has no plan to compare: one line (exit 2) saying what to run, and
    nothing launched or written (it used to start relaunching the baseline)."""
    from conftest import write_job

    fx.build_study(tmp_path)
    job = write_job(tmp_path, study="demo")
    assert main(["compare", str(job), "--plan"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"ncclsweep: error: {job}: objective.concurrency: compare --plan compares the best configs of "
                   "several levels, and this job's objective has one (objective.concurrency: 1); use `ncclsweep "
                   f"compare {job} --concurrency 1,2,10` for the baseline against the best at several concurrencies"]
    assert not (tmp_path / "reports" / "demo" / "compare-plan.json").exists()
    assert not (tmp_path / "reports" / "demo" / "compare-logs").exists()  # no server launched


@pytest.mark.parametrize("plan", [[], ["--plan"], ["--concurrency", "1,8"]])
def test_compare_of_a_study_by_request_rate_refuses_in_one_line_saying_what_measures_it(tmp_path, capsys, plan):
    """compare's figure is total tok/s at a concurrency; a study by request rate ranks by its capacity
    in req/s: one line (exit 2) naming what re-measures that (export, then bench) and what draws it
    (report), before anything is read or launched."""
    from conftest import write_job

    job = write_job(tmp_path, study="rate", objective={"goodput": {"max_rate": 30}},
                    slo={"ttft": "300ms", "attainment": 0.99})
    assert main(["compare", str(job), *plan]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    what = "compare --plan" if plan == ["--plan"] else "compare"
    assert err == [f"ncclsweep: error: {job}: objective.goodput.max_rate: {what} measures total tok/s at "
                   "concurrencies (a closed loop), not the capacity by request rate this study ranks by; re-measure "
                   f"a config's capacity by rate with `ncclsweep export {job} --format yaml -o best.yaml` and "
                   f"`ncclsweep bench {job} --config best.yaml` (every rate probed, the capacity); `ncclsweep "
                   f"report {job}` draws each config's curve against request rate"]
    assert not (tmp_path / "reports" / "rate" / "compare-logs").exists()  # no server launched


@pytest.mark.parametrize("number", [3, 6, 11, 99])  # wrong output, stopped early, running, absent
def test_also_refuses_a_trial_that_is_not_a_ranked_measurement(rows, number):
    with pytest.raises(BadInput, match=rf"trial {number} is not a measured, ranked trial.*ranked trials: "):
        _pick(rows, [number])


def _rounds(per_config: dict[str, dict[int, list[float]]]) -> list[dict]:
    """compare.json's rounds from {label: {concurrency: [tok/s per round]}}."""
    out = []
    n = max(len(vals) for levels in per_config.values() for vals in levels.values())
    for r in range(n):
        for label, levels in per_config.items():
            out.append({"round": r, "config": label, "trial": 0,
                        "levels": {str(c): {"total_tok_s": vals[r] if r < len(vals) else None}
                                   for c, vals in levels.items()}})
    return out


def _file(per_config, *, same_config=False, others=()) -> dict:
    return {"concurrency": sorted(next(iter(per_config.values()))), "baseline_trial": 0,
            "best_trial": 0 if same_config else 3, "same_config": same_config, "complete": True,
            "others": [{"trial": t, "label": f"trial-{t}", "params": {"backend.max_batch": 256}} for t in others],
            "rounds": _rounds(per_config), "failures": []}


def _data(per_config, **kw) -> CompareFile:
    return CompareFile.from_record(_file(per_config, **kw))


def test_table_shows_other_trials_against_the_best():
    data = _data({"baseline": {1: [97.8, 97.1, 98.4], 256: [3077.7, 3001.0, 3150.2]},
                  "best": {1: [192.6, 191.0, 193.9], 256: [3144.6, 3010.5, 3080.0]},
                  "trial-6": {1: [192.0, 190.1, 194.0], 256: [3590.0, 3555.0, 3611.0]}}, others=[6])
    text = format_compare(data)
    assert "vs best (trial #3) and trial 6," in text
    assert "| Concurrency | baseline | best | Improvement | trial 6 |" in text
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in text.splitlines() if line.startswith("| 1 ") or line.startswith("| 256 ")}
    assert rows["1"][:2] == ["97.8 tok/s", "192.6 tok/s"] and rows["1"][2].startswith("1.969x faster (95% CI 1.96")
    assert rows["256"][2].startswith("1.00x, within noise (95% CI ")  # 3144.6 vs 3077.7: medians differ, rounds don't
    assert rows["256"][3].startswith("3590.0 tok/s; vs best 1.16x faster (95% CI 1.11-1.22x)")
    assert rows["1"][3].startswith("192.0 tok/s; vs best 0.998x, within noise (95% CI 0.991-1.004x)")
    assert "faster than the baseline beyond noise at concurrency 1." in text
    assert "Within noise at concurrency 256: 3 round(s) cannot tell the two apart" in text
    assert "SLOWER" not in text


def test_a_loss_is_only_claimed_beyond_noise():
    """The demo's case: 0.96x at concurrency 10 from overlapping launches is within noise; a
    steady 10% loss over 5 rounds is SLOWER."""
    noisy = _data({"baseline": {10: [120.3, 94.9, 146.8]}, "best": {10: [101.0, 140.2, 122.0]}})
    text = format_compare(noisy)
    assert noisy.level_verdicts()["10"].verdict == "within noise" and "SLOWER" not in text and "slower" not in text
    steady = _data({"baseline": {10: [120.0, 100.0, 140.0, 110.0, 130.0]},
                    "best": {10: [108.5, 89.0, 126.5, 99.5, 116.0]}})
    text = format_compare(steady)
    assert steady.level_verdicts()["10"].verdict == "slower"
    assert ("The best config is SLOWER than the baseline beyond noise at concurrency 10 "
            "(0.899x, 95% CI 0.890-0.908x).") in text


def test_a_config_against_itself_is_never_a_verdict():
    """Baseline and best the same config: even a run of launches that drifted one way is no verdict."""
    data = _data({"baseline": {1: [100.0, 101.0, 100.5, 99.8], 2: [150.0, 140.0, 160.0, 155.0]},
                  "best": {1: [90.0, 90.5, 91.0, 90.2], 2: [152.0, 139.0, 158.0, 161.0]}}, same_config=True)
    assert {v.verdict for v in data.level_verdicts().values()} == {"same config"}
    text = format_compare(data)
    assert "slower" not in text.replace("excludes 1.0", "") and "SLOWER" not in text and "faster" not in text
    assert text.count("the same config, its launches ") == 2 and "within noise" not in text
    assert "Baseline and best are the same config (trial #0): no verdict" in text


def test_constraints_are_judged_by_the_same_rule():
    data = _data({"baseline": {8: [100.0, 90.0, 110.0, 95.0, 105.0], 16: [100.0, 80.0, 120.0]},
                  "best": {8: [70.0, 62.0, 78.0, 66.0, 74.0], 16: [85.0, 95.0, 80.0]}})
    rules = dataclasses.replace(data, rules=((8, 0.9), (16, 0.9), (64, 0.9))).constraints()
    assert [(r.concurrency, r.state, r.ok) for r in rules] == [
        (8, "VIOLATED", False), (16, "within noise of the limit", None), (64, "not measured", None)]


def test_the_p99_latencies_per_concurrency_and_what_the_targets_say_of_them():
    """Each launch's level record carries its percentiles: the table gives each config's TTFT and
    TPOT p99 as the median over its launches, and with the job's targets what they broke there."""
    data = _file({"baseline": {1: [97.8, 97.1, 98.4], 64: [3000.0, 3001.0, 3002.0]},
                  "best": {1: [192.6, 191.0, 193.9], 64: [4000.0, 4001.0, 4002.0]}})
    for rnd in data["rounds"]:
        for c, rec in rnd["levels"].items():
            tpot = 0.004 if c == "1" else (0.030 if rnd["config"] == "best" else 0.012) + 0.001 * rnd["round"]
            rec.update(value=rec["total_tok_s"], ttft={"p50": 0.01, "p90": 0.02, "p99": 0.03, "n": 8},
                       tpot={"p50": tpot / 2, "p90": tpot, "p99": tpot, "n": 8})
    text = format_compare(CompareFile.from_record(data))
    assert "p99 latency" in text and "holds the SLO" not in text
    data["slo"] = {"tpot_p99": 0.020}
    text = format_compare(CompareFile.from_record(data))
    assert "p99 latency, TTFT / TPOT in ms (median over the launches); latency targets: TPOT p99 <= 20 ms" in text
    assert "| 1 | 30.0 / 4.0 (holds the SLO) | 30.0 / 4.0 (holds the SLO) |" in text
    assert "| 64 | 30.0 / 13.0 (holds the SLO) | 30.0 / 31.0 (breaks TPOT p99 31.0 ms) |" in text
    old = _data({"baseline": {1: [97.8, 97.1]}, "best": {1: [192.6, 191.0]}})  # a file without percentiles
    assert "p99 latency" not in format_compare(old)
    for rnd in data["rounds"]:  # where the server counted its prefix cache's hits: beside the TTFT, the median
        rnd["levels"]["64"]["prefix_cache_hit_rate"] = 0.1 * rnd["round"] if rnd["config"] == "best" else 0.0
    hits = 100 * statistics.median(0.1 * r["round"] for r in data["rounds"] if r["config"] == "best")
    assert f"| 64 | 30.0 (prefix-cache hits 0%) / 13.0 (holds the SLO) | 30.0 (prefix-cache hits {hits:.0f}%) / " \
           "31.0 (breaks TPOT p99 31.0 ms) |" in format_compare(CompareFile.from_record(data))
