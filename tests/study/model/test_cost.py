"""The launch cost model (study/model/cost.py): fitted on real TrialRows as ``history.trial_rows``
gives them, it must rank a config by what its values cost to start, keep failures at start and
blameless failures from teaching it, know the compile cache (NCCL-only changes load it), and
say nothing before any measured trial."""

from __future__ import annotations

import pytest

from orchestrator.core.records import COMPLETE, FAIL, FailureKind, TrialRow
from orchestrator.study.model.cost import FIRST_COMPILE, LaunchCost, compile_key, got_past_start, trial_cost


def row(number: int, params: dict, seconds: float | None, *, state: str = COMPLETE, kind: str | None = None,
        phases: dict | None = None, **kw) -> TrialRow:
    """One launched trial; ``seconds`` its wall time (durations.total_s), None: not recorded."""
    return TrialRow(number=number, state=state, params=params, failure_kind=kind, counted=True,
                    value=10.0 if state == COMPLETE else None,
                    durations={"total_s": seconds} if seconds is not None else {},
                    startup_phases=phases or {}, **kw)


def graphs_rows() -> list[TrialRow]:
    """GLM-5-like: graphs on start in 450 s, eager in 212 s, whatever the NCCL protocol."""
    out = []
    for i, (mode, proto) in enumerate([("full", "LL"), ("eager", "LL"), ("full", "Simple"), ("eager", "Simple"),
                                       ("full", "LL"), ("eager", "Simple")]):
        ready = 450.0 if mode == "full" else 212.0
        out.append(row(i, {"graph_mode": mode, "env.NCCL_PROTO": proto}, None,
                       phases={"ready_s": ready, "segments": [["weights", 63.0]]}))
    return out


def test_a_value_that_adds_start_up_seconds_is_predicted_costlier():
    """The model's point: at equal promise the policy launches the cheaper config first."""
    model = LaunchCost.fit(graphs_rows())
    for proto in ("LL", "Simple", "LL128"):  # LL128: a value no trial had
        full = model.predict({"graph_mode": "full", "env.NCCL_PROTO": proto})
        eager = model.predict({"graph_mode": "eager", "env.NCCL_PROTO": proto})
        assert full is not None and eager is not None
        assert eager < full, proto
    # the protocol, which costs nothing here, moves a prediction less than the graphs do (it
    # does move it: the medians' backfit leaks part of the graphs' cost onto a protocol seen
    # more often with graphs on, as LL is here)
    graphs = model.effect("graph_mode", "full") - model.effect("graph_mode", "eager")
    proto = abs(model.effect("env.NCCL_PROTO", "LL") - model.effect("env.NCCL_PROTO", "Simple"))
    assert graphs > proto
    assert model.trials == 6


def test_one_trial_is_half_believed():
    """An effect seen in n trials is shrunk by n / (n + 1): one launch each of two values
    puts each halfway between the study's median and what it measured."""
    model = LaunchCost.fit([row(0, {"m": "a"}, 100.0), row(1, {"m": "b"}, 300.0)])
    assert model.median == 200.0
    assert model.predict({"m": "a"}) == pytest.approx(150.0)
    assert model.predict({"m": "b"}) == pytest.approx(250.0)


def test_parameters_that_move_together_share_one_saving():
    """Graphs off always comes with no capture sizes: the saving is one, not counted once per
    parameter (which would predict graphs off cheaper than it ever measured)."""
    rows = [row(0, {"graphs": "off"}, 200.0), row(1, {"graphs": "off"}, 200.0),
            row(2, {"graphs": "on", "capture": "1,2,4"}, 400.0), row(3, {"graphs": "on", "capture": "1,2,4"}, 400.0)]
    model = LaunchCost.fit(rows)
    off, on = model.predict({"graphs": "off"}), model.predict({"graphs": "on", "capture": "1,2,4"})
    assert off is not None and on is not None
    assert 200.0 <= off < on <= 400.0


def test_one_slow_outlier_does_not_make_its_value_costlier():
    """Medians, not means: one launch that took ten times as long (a slow disk) does not rank
    its value last."""
    rows = [row(0, {"m": "a"}, 400.0), row(1, {"m": "a"}, 4000.0), row(2, {"m": "a"}, 400.0),
            row(3, {"m": "b"}, 400.0), row(4, {"m": "b"}, 400.0), row(5, {"m": "b"}, 400.0)]
    model = LaunchCost.fit(rows)
    assert model.predict({"m": "a"}) == pytest.approx(model.predict({"m": "b"}))


def test_a_failed_start_teaches_the_policy_nothing_but_counts_for_the_time_to_go():
    """A server that crashed at start was cheap, but its values are not cheap when they work:
    ``started_only`` (the policy's choices) leaves it out; the time-to-go keeps it."""
    rows = [row(0, {"m": "a"}, 400.0), row(1, {"m": "a"}, 400.0),
            row(2, {"m": "b"}, 60.0, state=FAIL, kind=FailureKind.START_CRASH, phases={"ended_s": 60.0}),
            row(3, {"m": "b"}, 400.0)]
    everything = LaunchCost.fit(rows)
    assert everything.trials == 4
    assert everything.predict({"m": "b"}) < everything.predict({"m": "a"})
    started = LaunchCost.fit(rows, started_only=True)
    assert started.trials == 3
    assert started.predict({"m": "b"}) == pytest.approx(started.predict({"m": "a"}))


def test_blameless_failures_cached_answers_and_skips_never_count():
    """Interruptions, lost nodes, the node's own errors, answers from another trial and
    proposals never launched say nothing of what a config costs."""
    base = [row(0, {"m": "a"}, 400.0), row(1, {"m": "b"}, 400.0)]
    noise = [row(2, {"m": "b"}, 5.0, state=FAIL, kind=FailureKind.INTERRUPTED),
             row(3, {"m": "b"}, 7.0, state=FAIL, kind=FailureKind.NODE_LOST),
             row(4, {"m": "b"}, 3.0, state=FAIL, kind=FailureKind.ENV_ERROR),
             row(5, {"m": "b"}, 1.0, cached_from=1),
             row(6, {"m": "b"}, 2.0, state="PRUNED", skipped="banned-value")]
    for r in noise:
        assert trial_cost(r) is None, r.number
    model = LaunchCost.fit(base + noise)
    assert model.trials == 2
    assert model.predict({"m": "b"}) == pytest.approx(model.predict({"m": "a"}))


def test_what_got_past_start():
    """Only a ready server, or a failure after start-up, shows the values start."""
    assert got_past_start(row(0, {}, 500.0))
    assert got_past_start(row(1, {}, 500.0, state="PRUNED"))
    assert got_past_start(row(2, {}, 500.0, state=FAIL, kind=FailureKind.BENCH_ERROR))
    assert got_past_start(row(3, {}, 500.0, state=FAIL, kind=FailureKind.WRONG_OUTPUT))
    # a stream that stopped mid-benchmark: ready first, then the hang
    assert got_past_start(row(4, {}, 900.0, state=FAIL, kind=FailureKind.HANG, phases={"ready_s": 400.0}))
    assert not got_past_start(row(5, {}, 900.0, state=FAIL, kind=FailureKind.HANG,
                                  phases={"ended_s": 900.0, "stalled_in": "graph capture"}))
    assert not got_past_start(row(6, {}, 60.0, state=FAIL, kind=FailureKind.NCCL_INVALID))
    assert not got_past_start(row(7, {}, 150.0, state=FAIL, kind=FailureKind.START_TIMEOUT))
    hang = row(8, {}, 900.0, state=FAIL, kind=FailureKind.HANG, phases={"ended_s": 900.0})
    assert trial_cost(hang) == 900.0 and trial_cost(hang, started_only=True) is None


def test_a_trials_cost_is_its_wall_time_else_its_start_up():
    """durations.total_s first; a record without it falls back to spawn -> ready, or to the end
    of a start that never got ready; nothing usable is None, never 0."""
    assert trial_cost(row(0, {}, 520.0, phases={"ready_s": 450.0})) == 520.0
    assert trial_cost(row(1, {}, None, phases={"ready_s": 450.0, "ended_s": 460.0})) == 450.0
    assert trial_cost(row(2, {}, None, state=FAIL, kind=FailureKind.START_CRASH, phases={"ended_s": 70.0})) == 70.0
    assert trial_cost(row(3, {}, None)) is None
    assert trial_cost(row(4, {}, 0.0)) is None
    assert trial_cost(TrialRow(number=5, state=COMPLETE, durations={"total_s": "n/a"})) is None  # type: ignore[dict-item]


def test_compile_key_ignores_nccl_variables_but_not_what_compiles():
    """NCCL variables never change what an engine compiles (a config differing only in them
    loads the cache); graph settings, TP and other environment variables do."""
    base = {"tp_size": 2, "graph_mode": "full", "env.NCCL_PROTO": "LL", "env.NCCL_ALGO": "Ring"}
    assert compile_key(base) == compile_key({**base, "env.NCCL_PROTO": "Simple", "env.NCCL_ALGO": "Tree"})
    assert compile_key(base) == compile_key({"tp_size": 2, "graph_mode": "full"})  # TP=1-like: no NCCL_* at all
    assert compile_key(base) == compile_key(dict(reversed(list(base.items()))))  # order does not matter
    assert compile_key(base) != compile_key({**base, "graph_mode": "piecewise"})
    assert compile_key(base) != compile_key({**base, "tp_size": 4})
    assert compile_key(base) != compile_key({**base, "capture_sizes": "1,2,4"})
    assert compile_key(base) != compile_key({**base, "env.VLLM_ATTENTION_BACKEND": "FLASHINFER"})


def cache_rows() -> list[TrialRow]:
    """A node that keeps its compile cache: the first launch of each (TP, graph mode) pays a
    cold compile (136 s more), an NCCL-only change of it loads the graphs."""
    return [row(0, {"tp_size": 2, "graph_mode": "full", "env.NCCL_PROTO": "LL"}, 536.0),
            row(1, {"tp_size": 2, "graph_mode": "full", "env.NCCL_PROTO": "Simple"}, 400.0),
            row(2, {"tp_size": 4, "graph_mode": "full", "env.NCCL_PROTO": "Simple"}, 536.0),
            row(3, {"tp_size": 4, "graph_mode": "full", "env.NCCL_PROTO": "LL"}, 400.0)]


def test_a_compile_key_already_launched_is_predicted_warm():
    """The first launch of a compile key is what pays the compile: a new NCCL protocol on a
    compiled key is predicted cheaper than the same protocol on a key never launched."""
    model = LaunchCost.fit(cache_rows())
    assert FIRST_COMPILE in model.effects
    warm = model.predict({"tp_size": 2, "graph_mode": "full", "env.NCCL_PROTO": "LL128"})
    cold = model.predict({"tp_size": 8, "graph_mode": "full", "env.NCCL_PROTO": "LL128"})
    assert warm is not None and cold is not None
    assert warm < model.median < cold


def test_a_start_refused_before_compiling_leaves_its_key_cold():
    """A crash at start compiled nothing, so the next launch of its key still pays the compile;
    a launch that got past start (it failed later) compiled it."""
    tp8 = {"tp_size": 8, "graph_mode": "full", "env.NCCL_PROTO": "LL"}
    crashed = row(4, tp8, 150.0, state=FAIL, kind=FailureKind.START_CRASH, phases={"ended_s": 150.0})
    model = LaunchCost.fit([*cache_rows(), crashed], started_only=True)
    assert compile_key(tp8) not in model.compiled
    assert model.predict({**tp8, "env.NCCL_PROTO": "Simple"}) > model.median
    later = row(4, tp8, 700.0, state=FAIL, kind=FailureKind.BENCH_ERROR, phases={"ready_s": 536.0})
    assert compile_key(tp8) in LaunchCost.fit([*cache_rows(), later], started_only=True).compiled


def test_an_unmeasured_value_is_interpolated_never_extrapolated():
    """Between two measured values of an ordered parameter (numbers; capture sizes by how
    many) the cost lies between theirs; past them it stays at the nearest; an unordered
    value never measured adds nothing."""
    rows = [row(0, {"tp": 2, "capture": "1,2"}, 300.0), row(1, {"tp": 2, "capture": "1,2"}, 300.0),
            row(2, {"tp": 8, "capture": "1,2,4,8,16,32"}, 500.0),
            row(3, {"tp": 8, "capture": "1,2,4,8,16,32"}, 500.0)]
    model = LaunchCost.fit(rows)
    assert model.effect("tp", 2) < model.effect("tp", 4) < model.effect("tp", 8)
    assert model.effect("tp", 16) == model.effect("tp", 8) and model.effect("tp", 1) == model.effect("tp", 2)
    assert model.effect("capture", "1,2") < model.effect("capture", "1,2,4,8") < model.effect("capture",
                                                                                              "1,2,4,8,16,32")
    assert model.effect("capture", "Ring") == 0.0
    assert model.effect("never-fitted", 3) == 0.0
    small, mid, big = (model.predict({"tp": t, "capture": "1,2"}) for t in (2, 4, 8))
    assert small < mid < big


def test_expected_left_is_the_launches_times_the_mean_prediction():
    """The run's time-to-go: ``launches`` x the mean expected cost of the configs still to
    launch, the median trial when they are not known."""
    model = LaunchCost.fit([row(0, {"m": "a"}, 100.0), row(1, {"m": "b"}, 300.0)])
    a, b = model.predict({"m": "a"}), model.predict({"m": "b"})
    assert model.expected_left([{"m": "a"}, {"m": "b"}], 2) == pytest.approx(a + b)
    assert model.expected_left([{"m": "a"}, {"m": "b"}], 4) == pytest.approx(2 * (a + b))
    assert model.expected_left([{"m": "a"}], 3) == pytest.approx(3 * a)
    assert model.expected_left(None, 3) == pytest.approx(3 * model.median)
    assert model.expected_left([], 3) == pytest.approx(3 * model.median)
    assert model.expected_left([{"m": "a"}], 0) == 0.0


def test_no_measured_trial_no_prediction():
    """Before any launch said what it cost nothing is reordered and no ETA is shown."""
    for rows in ([], [row(0, {"m": "a"}, 5.0, state=FAIL, kind=FailureKind.INTERRUPTED)],
                 [row(0, {"m": "a"}, None)]):
        model = LaunchCost.fit(rows)
        assert model.predict({"m": "a"}) is None
        assert model.expected_left([{"m": "a"}], 3) is None
    crashed = [row(0, {"m": "a"}, 60.0, state=FAIL, kind=FailureKind.START_CRASH, phases={"ended_s": 60.0})]
    assert LaunchCost.fit(crashed, started_only=True).predict({"m": "a"}) is None
    assert LaunchCost.fit(crashed).predict({"m": "a"}) == 60.0
