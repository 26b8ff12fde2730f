"""ncclsweep simulate: the replay of tables and, with --suite, whole nights of the stand-in boxes;
markdown out, bad flags one line and exit 2."""

from __future__ import annotations

import argparse
import json

import pytest
from tiny_table import TINY

from orchestrator.study.simulation.replay_table import load_table
from orchestrator.study.simulation.simulate import add_simulate_args, main


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.csv"
    path.write_text(TINY)
    return path

def test_cli_prints_markdown_and_refuses_bad_input(tiny, tmp_path, capsys):
    out = tmp_path / "runs.json"
    assert main([str(tiny), "--sampler", "tpe,random", "--seeds", "2", "--budget", "4", "--json", str(out)]) == 0
    assert "| tpe |" in capsys.readouterr().out and out.exists()
    assert main([str(tmp_path / "missing.csv")]) == 2
    assert "no such table" in capsys.readouterr().err
    assert main([str(tiny), "--sampler", "nope"]) == 2
    assert main([str(tiny), "--target", "2"]) == 2
    assert main([str(tiny), "--sampler", "tpe:bogus=1", "--seeds", "1"]) == 2
    assert "unknown option 'bogus'" in capsys.readouterr().err
    args = add_simulate_args(argparse.ArgumentParser()).parse_args([str(tiny), "--no-prune", "--parallel", "2"])
    assert args.prune is False and args.parallel == 2 and args.seeds == 20 and args.target == 0.02


def test_the_suite_replays_whole_nights_and_scores_the_export(tmp_path, capsys):
    out = tmp_path / "nights.json"
    assert main(["--suite", "near-ties,random-3", "--sampler", "model", "--seeds", "2", "--budget", "8",
                 "--confirm", "2", "--json", str(out), "--write-suite", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "| near-ties | model |" in text and "| random-3 | model |" in text
    assert "first optimal launch, every kind" in text and "export within 2%" in text
    nights = json.loads(out.read_text())
    assert [r["table"] for r in nights] == ["near-ties", "random-3"]
    for r in nights:
        for n in r["nights"]:  # every launch counted: search, relaunches, race
            assert n["launches"] == n["search"] + n["relaunches"] + n["race"] and n["search"] == 8
            assert 0.0 <= n["regret"] <= 1.0
    # the stand-ins it replayed are written as tables that read back as the same boxes
    assert len(load_table(tmp_path / "near-ties.csv").rows) == 384


def test_a_table_replays_as_a_night_too(tiny, capsys):
    assert main([str(tiny), "--night", "--sampler", "model", "--seeds", "1", "--budget", "5"]) == 0
    assert "| tiny.csv | model |" in capsys.readouterr().out


def test_bad_suite_input_is_one_line(tiny, capsys):
    assert main([]) == 2
    assert "needs a TABLE.csv, or --suite" in capsys.readouterr().err
    assert main(["--suite", "no-such-box"]) == 2
    err = capsys.readouterr().err
    assert "unknown stand-in 'no-such-box'; allowed: motivating" in err and "random-N" in err
    assert main(["--suite", "near-ties", "--relaunch", "2"]) == 2
    assert main(["--suite", "near-ties", "--sampler", "nope", "--seeds", "1"]) == 2
    args = add_simulate_args(argparse.ArgumentParser()).parse_args(["--suite"])
    assert args.suite.split(",")[0] == "motivating" and args.suite_seed == 0
