"""compare: which trials ``--also`` adds, and how the table shows them (no servers here; the
end-to-end run with real servers is in test_study_e2e.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from orchestrator import history
from orchestrator.cli import main, parse_also
from orchestrator.compare import _also_rows, format_compare
from orchestrator.errors import BadInput

_HERE = Path(__file__).parent
_spec = importlib.util.spec_from_file_location("_history_fixture", _HERE / "test_history.py")
fx = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fx)


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    job, _study = fx.build_study(tmp_path_factory.mktemp("compare"))
    return history.trial_rows(history.load_study(job))


def _pick(rows, also):
    best = history.best_rows(rows, 1)[0]
    return [r["number"] for r in _also_rows(rows, best, history.baseline_row(rows), also)]


def test_also_takes_ranked_trials_once_and_never_baseline_or_best(rows):
    assert _pick(rows, [1]) == [1]
    assert _pick(rows, [1, 1, 7, 0]) == [1]  # 7 answers from the best's cache, 0 is the baseline
    assert _pick(rows, [8]) == []  # the baseline's config measured again on another node
    assert _pick(rows, "ties") == []  # the best (57 +-1%) is beyond the noise of the rest
    assert _pick(rows, None) == []


@pytest.mark.parametrize("number", [3, 6, 11, 99])  # wrong output, stopped early, running, absent
def test_also_refuses_a_trial_that_is_not_a_ranked_measurement(rows, number):
    with pytest.raises(BadInput, match=rf"trial {number} is not a measured, ranked trial.*ranked trials: "):
        _pick(rows, [number])


def test_also_parsing(capsys):
    assert parse_also(None) is None and parse_also("ties") == "ties" and parse_also("4, 6") == [4, 6]
    with pytest.raises(BadInput, match="comma-separated trial numbers or 'ties'"):
        parse_also("best")
    assert main(["compare", str(_HERE.parent / "jobs" / "demo.yaml"), "--also", "x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--also takes comma-separated trial numbers or 'ties', not 'x'" in err[0]


def test_table_shows_other_trials_against_the_best():
    data = {"concurrency": [1, 256], "baseline_trial": 0, "best_trial": 3,
            "baseline": {"1": 97.8, "256": 3077.7}, "best": {"1": 192.6, "256": 3144.6},
            "others": [{"trial": 6, "params": {"backend.max_batch": 256}, "median": {"1": 192.0, "256": 3590.0},
                        "samples": {"1": [192.0], "256": [3590.0]}}],
            "constraints": [], "failures": []}
    text = format_compare(data)
    assert "vs best (trial #3) and trial 6," in text
    assert "| Concurrency | baseline | best | Improvement | trial 6 |" in text
    assert "| 256 | 3077.7 tok/s | 3144.6 tok/s | 1.02x | 3590.0 tok/s (1.14x best) |" in text
    assert "| 1 | 97.8 tok/s | 192.6 tok/s | 1.97x | 192.0 tok/s (1.00x best) |" in text
