"""Plan rows as ``history.trial_rows`` gives them, shared by the plan's and the report's tests."""

from __future__ import annotations

import statistics
from dataclasses import replace

from orchestrator.config.job import Objective
from orchestrator.core.records import COMPLETE, TrialRow, config_key
from orchestrator.study.search.race import RACE, race_state


def row(number: int, params: dict, levels: dict[int, list[float]], *, baseline: bool = False,
        state: str = COMPLETE, **kw) -> TrialRow:
    """A trial's row as ``history.trial_rows`` gives it: every level's samples and median."""
    recs = {str(lv): {"value": statistics.median(s), "samples": list(s), "unit": "decode tok/s" if lv == 1
                      else "total tok/s"} for lv, s in levels.items()}
    first = recs[str(min(levels))]["value"] if state == COMPLETE else None
    metrics = {"decode_samples": list(levels[1]), "decode_tok_s": first} if 1 in levels else {}
    return TrialRow(number=number, state=state, params=params, value=first, counted=True, is_baseline=baseline,
                    config_key=config_key(params), levels=recs, metrics={**metrics, "levels": recs}, **kw)


EAGER = {"graph_capture": False}
UP_TO_8 = {"graph_capture": True, "capture_sizes": "1,2,4,8"}
UP_TO_64 = {"graph_capture": True, "capture_sizes": "1,2,4,8,16,32,64"}
PLAN = Objective(concurrency=(1, 10, 64))


def relaunch(number: int, params: dict, levels: dict[int, list[float]]) -> TrialRow:
    """A relaunch of a config (``study.relaunch``): an uncounted trial of its own."""
    return replace(row(number, params, levels), counted=False, launch_role="relaunch")


def tied_at_one() -> list[TrialRow]:
    """The H200 race study's shape: graphs up to 8 and up to 64 tied at one stream over their
    launches (noisy: 391-572), up to 64 far ahead at 10 and 64."""
    return [row(0, EAGER, {1: [78.8], 10: [994], 64: [5518]}, baseline=True),
            row(1, UP_TO_64, {1: [418.6], 10: [3156], 64: [16146]}),
            row(2, UP_TO_8, {1: [391.0], 10: [761], 64: [4152]}),
            relaunch(3, UP_TO_64, {1: [563.1], 10: [3966], 64: [13502]}),
            relaunch(4, EAGER, {1: [112.4], 10: [979], 64: [5160]}),
            relaunch(5, UP_TO_8, {1: [484.4], 10: [959], 64: [5085]}),
            relaunch(6, UP_TO_64, {1: [425.2], 10: [3605], 64: [13097]}),
            relaunch(7, UP_TO_8, {1: [520.1], 10: [1008], 64: [5567]}),
            relaunch(8, EAGER, {1: [81.9], 10: [807], 64: [4640]})]


def raced(rows: list[TrialRow], objective: Objective | None, figures: dict[str, list[dict[int, float]]],
          budget: int = 8) -> list[TrialRow]:
    """The finalists' race (``study.race``) run on ``rows`` as the driver runs it: each next launch
    of a config (by its key) measures the next of its ``figures`` ({level: median})."""
    rows = list(rows)
    params = {r.config_key: r.params for r in rows}
    race_id = sum(1 for r in rows if r.counted)
    left = {k: list(v) for k, v in figures.items()}
    while (key := (state := race_state(rows, objective, budget, race_id)).next()) is not None:
        got = left[key].pop(0)
        rows.append(replace(row(len(rows), params[key], {lv: [v] for lv, v in got.items()}), counted=False,
                            launch_role=RACE, race=state.plan.record(state.round)))
    return rows


def race_tied_at_one() -> list[TrialRow]:
    """``tied_at_one`` raced: four rounds cannot tell up to 8 (#2, the higher median at one stream)
    from up to 64 (#1, the best at 10 and 64 by far), so level 1 ends tied."""
    up_to_8, up_to_64 = config_key(UP_TO_8), config_key(UP_TO_64)
    return raced(tied_at_one(), PLAN, {
        up_to_8: [{1: v, 10: 900.0, 64: 5000.0} for v in (470.0, 455.0, 500.0, 440.0)],
        up_to_64: [{1: v, 10: 3500.0, 64: 14000.0} for v in (450.0, 480.0, 430.0, 460.0)]})
