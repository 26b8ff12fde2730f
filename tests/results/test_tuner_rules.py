"""NCCL tuner-plugin rules (``results.tuner_rules``): one rule from a config's settings, rules per
size range from the pre-screen's sweep as the example plugin's own reader loads them, the tuner API
by NCCL release, the choice between the two sources and the lines kept within the plugin's buffer."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import recorded_study as fx  # a real journal study with every outcome

from conftest import REPO, write_job
from orchestrator.config.job import load_job
from orchestrator.core import prescreened
from orchestrator.core.study_dir import StudyDir
from orchestrator.driver.prescreen import run_prescreen
from orchestrator.results.export import export
from orchestrator.results.tuner_rules import (
    MAX_LINE,
    PREAMBLE,
    fit,
    nccl_tuner_rules,
    rules_for,
    sweep_of,
    tuner_api,
    tuner_sweep_rules,
)
from orchestrator.study.evidence import history


def test_nccl_tuner_rule_variants():
    rule, _ = nccl_tuner_rules({"tp_size": 4, "env.NCCL_ALGO": "allreduce:tree;broadcast:ring",
                                "env.NCCL_PROTO": "simple", "env.NCCL_MIN_CTAS": 4, "env.NCCL_MAX_CTAS": 4})
    assert rule == ["allreduce,0,4294967295,tree,simple,4,1,4"]
    none, notes = nccl_tuner_rules({"tp_size": 2})
    assert none == [] and "nothing to export" in notes[0]
    none, notes = nccl_tuner_rules({"tp_size": 2, "env.NCCL_ALGO": "^Tree", "env.NCCL_PROTO": "LL"})
    assert none == [] and "excludes" in notes[0]
    # protocol only: the algorithm NCCL logged in the measured run completes the rule
    rule, notes = nccl_tuner_rules({"tp_size": 2, "env.NCCL_PROTO": "LL"}, {"allreduce_algo": "RING"})
    assert rule == ["allreduce,0,4294967295,ring,ll,-1,1,2"] and "as NCCL chose it" in notes[0]
    none, notes = nccl_tuner_rules({"tp_size": 2, "env.NCCL_PROTO": "LL"})
    assert none == [] and "NCCL_ALGO is not set" in notes[0]
    rule, _ = nccl_tuner_rules({"tp_size": 8, "env.NCCL_ALGO": "NVLSTree", "env.NCCL_PROTO": "LL128"})
    assert rule == ["allreduce,0,4294967295,nvls_tree,ll128,-1,1,8"]


PLUGIN_COLLECTIVES = ("broadcast", "reduce", "allgather", "reducescatter", "allreduce")
PLUGIN_ALGORITHMS = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")
PLUGIN_PROTOCOLS = ("ll", "ll128", "simple")


def plugin_rules(text: str) -> list[dict]:
    """The rules NCCL's example tuner plugin loads from ``text``, by its reader's rules
    (NVIDIA/nccl plugins/tuner/example/plugin.c, ext-tuner/example in 2.28-2.29): each line
    read into a 256-byte buffer (a longer one arrives in 255-character pieces), a piece starting
    with '#' or a newline skipped, fields split at commas with empty fields dropped and spaces
    and tabs trimmed, 8 to 10 fields kept (numPipeOps and regBuff -1 when absent), sizes read as
    unsigned decimals, the names compared exactly. The plugin silently reads an unknown name as
    allreduce, ring or simple; here it fails the test instead."""
    rules = []
    for line in text.splitlines(keepends=True):
        for start in range(0, len(line), 255):
            piece = line[start:start + 255]
            if piece[:1] in ("#", "\n"):
                continue
            fields = [f.strip(" \t") for f in piece.rstrip("\n").split(",") if f.strip(" \t") != ""][:10]
            if not 8 <= len(fields) <= 10:
                continue
            coll, lo, hi, algo, proto, channels, nodes, ranks = fields[:8]
            assert coll in PLUGIN_COLLECTIVES and algo in PLUGIN_ALGORITHMS and proto in PLUGIN_PROTOCOLS, fields
            rules.append({"coll": coll, "min": int(lo), "max": int(hi), "algo": algo, "proto": proto,
                          "channels": int(channels), "nNodes": int(nodes), "nRanks": int(ranks),
                          "pipeOps": int(fields[8]) if len(fields) > 8 else -1,
                          "regBuff": int(fields[9]) if len(fields) > 9 else -1})
    return rules


def plugin_choice(rules: list[dict], nbytes: int, n_ranks: int) -> tuple[str, str] | None:
    """What the plugin applies to an all-reduce of ``nbytes`` on one node of ``n_ranks``: the
    first rule that matches (both size ends included)."""
    for r in rules:
        if (r["coll"] == "allreduce" and r["min"] <= nbytes <= r["max"] and r["nNodes"] in (-1, 1)
                and r["nRanks"] in (-1, n_ranks)):
            return r["algo"], r["proto"]
    return None


@pytest.mark.slow
def test_tuner_rules_from_a_cpu_sweep_load_in_the_plugins_reader(tmp_path):
    """The acceptance chain on CPU: the pre-screen sweeps the decode sizes on a 2-process gloo
    group and writes its table; the nccl-tuner export of the best config has rows per measured
    size range, none wider than 16 KB up to 512 KB, each choosing what the sweep measured
    fastest there, and the plugin's reader loads every row."""
    space = ("params:\n  tp_size: {choices: [2]}\n  env.NCCL_PROTO: {choices: [LL, Simple]}\n"
             "  env.NCCL_ALGO: {choices: [Ring]}\n")
    job = load_job(write_job(tmp_path, study="sweep", space_text=space, baseline={"tp_size": 2}))
    data = run_prescreen(job, iters=20, say=lambda _: None)
    table = job.dir.prescreen_sweep.read_text().splitlines()
    assert table[0] == "tp_size,setting,bytes,latency_us,ci_lo_us,ci_hi_us,algo,proto,fastest"
    sizes = data.sizes
    assert len(table) - 1 == 2 * len(sizes)  # every size, both settings
    fast: dict[int, set[str]] = {}  # per size, the settings clearly fastest or within the noise of it
    for line in table[1:]:
        cells = line.split(",")
        assert float(cells[4]) <= float(cells[3]) <= float(cells[5])  # the median inside its interval
        if cells[-1] in ("1", "tie"):
            fast.setdefault(int(cells[2]), set()).add(cells[1])
    assert sorted(fast) == sorted(sizes)

    study_job = SimpleNamespace(**vars(fx.make_job(tmp_path / "study")), dir=StudyDir(job.report_dir))
    _, study = fx.build_study(tmp_path / "study")
    text = export(study_job, history.trial_rows(study), "nccl-tuner")
    assert all(len(line) < 200 for line in text.splitlines())
    # the trial ran NCCL 2.21.5 (its record), which has no file-reading example plugin: the file says so
    assert "# rules from the pre-screen's sweep" in text and "NCCL 2.21.5; tuner API none: NCCL before 2.28" in text
    rules = plugin_rules(text)
    assert len(rules) == len([ln for ln in text.splitlines() if ln and not ln.startswith("#")])  # every row loads
    assert rules[0]["min"] == 0 and rules[-1]["max"] == max(sizes)
    for a, b in zip(rules, rules[1:]):
        assert b["min"] == a["max"] + 1  # contiguous, no overlap: the first match is the only match
    assert all(r["max"] - r["min"] + 1 <= 16 * 1024 for r in rules if r["max"] <= 512 * 1024)
    assert {(r["nRanks"], r["nNodes"], r["channels"]) for r in rules} == {(2, 1, -1)}
    for size in sizes:  # what the plugin applies is a setting the sweep found fastest there (or tied with it)
        chosen = plugin_choice(rules, size, 2)
        assert chosen is not None and chosen[0] == "ring"
        assert any(dict(p.split("=") for p in setting.split())["NCCL_PROTO"].lower() == chosen[1]
                   for setting in fast[size]), (size, chosen, fast[size])


def test_tuner_api_by_release():
    assert tuner_api("2.28.9") == "v5" and tuner_api("2.30.7").startswith("v6")
    assert tuner_api("2.27.3").startswith("none")


def test_rules_for_takes_the_sweep_at_the_configs_tp_else_the_configs_own_rule():
    sweep = prescreened.read(REPO / "tests" / "fixtures" / "prescreen" / "prescreen.json")
    winner = {"tp_size": 2, "env.NCCL_PROTO": "LL", "env.NCCL_ALGO": "Ring"}
    source, notes, rules = rules_for(winner, {"version": "2.28.3"}, 7, sweep)
    assert (rules, notes) == tuner_sweep_rules(winner, sweep)  # gloo's sweep: sizes without a rule, said
    assert source == (f"rules from the pre-screen's sweep ({len(rules)} size ranges, prescreen.json) and trial 7's "
                      "settings; NCCL 2.28.3; tuner API v5")
    # no sweep at TP 4, and none at all: the config's one rule, the release from the sweep or unknown
    for at_tp4 in (sweep, None):
        source, notes, rules = rules_for(winner | {"tp_size": 4}, None, 3, at_tp4)
        assert rules == ["allreduce,0,4294967295,ring,ll,-1,1,4"] and notes == []
        assert source.startswith("rules from trial 3's settings (no pre-screen sweep at its TP: one rule); NCCL ")
    assert "NCCL unknown; tuner API v5 (NCCL 2.28, 2.29) or v6" in rules_for(winner, None, 3, None)[0]


def test_sweep_of_reads_the_studys_prescreen_and_nothing_without_one(tmp_path):
    assert sweep_of(SimpleNamespace()) is None  # a job without a study folder
    where = StudyDir(tmp_path)
    assert sweep_of(SimpleNamespace(dir=where)) is None  # never pre-screened
    where.prescreen.write_bytes((REPO / "tests" / "fixtures" / "prescreen" / "prescreen.json").read_bytes())
    assert sweep_of(SimpleNamespace(dir=where)) == prescreened.read(where.prescreen)


def test_fit_keeps_every_line_within_the_plugins_buffer():
    long = "# " + "x" * 300
    assert fit(["short", long]) == ["short", long[: MAX_LINE - 4] + "..."]
    assert all(len(line) < MAX_LINE for line in fit([long, "y" * MAX_LINE]))
    assert all(line.startswith("#") and len(line) < MAX_LINE for line in PREAMBLE)
