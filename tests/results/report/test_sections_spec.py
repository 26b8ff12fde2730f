"""The report on a speculative study: the top configs carry the acceptance the server counted,
and the ceiling section tells the one-token-per-step bandwidth ceiling from what speculation
reaches (tokens per weight pass x that ceiling): a best above the one-token ceiling is
explained, never called impossible, unless it is above even that."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from orchestrator.backends.command import CommandBackend
from orchestrator.core.records import COMPLETE, TrialRow
from orchestrator.results.report import document as doc
from orchestrator.results.report.sections import build_blocks

BANDWIDTH = 4.8e12  # bytes/s; with 2 GB read per token: a one-token ceiling of 2400 tok/s


def backend() -> CommandBackend:
    return CommandBackend({**CommandBackend.example_settings(), "model_facts": {"bytes_per_token": 2e9}}, "job.yaml")


def row(number: int, value: float, params: dict, **kw) -> TrialRow:
    return TrialRow(number=number, state=COMPLETE, params=params, value=value, counted=True,
                    config_key=f"k{number}", metrics={"decode_tok_s": value, "decode_samples": [value] * 3}, **kw)


NGRAM = {"speculative.method": "ngram", "speculative.num_tokens": 4}


def report(tmp_path: Path, best: TrialRow) -> tuple[str, dict]:
    rows = [row(0, 500.0, {}, is_baseline=True), best]
    job = SimpleNamespace(study="s", storage=f"journal:{tmp_path}/study.journal", report_dir=tmp_path,
                          backend=SimpleNamespace(kind="command", settings={}), env={})
    blocks, summary = build_blocks(job, rows, tmp_path, backend=backend(), bandwidth_bytes_s=BANDWIDTH)
    return doc.render_markdown(blocks), summary


def section(md: str, title: str) -> str:
    return md.split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def test_a_speculative_best_above_the_one_token_ceiling_is_explained(tmp_path):
    md, summary = report(tmp_path, row(1, 3000.0, NGRAM, acceptance_rate=0.766, mean_accepted_length=3.74))
    ceiling = section(md, "Ceiling")
    assert "ceiling at TP=1: 2400.00 tok/s" in ceiling and "reaches 125% of the ceiling" in ceiling
    assert "3.74 tokens per weight pass" in ceiling and "77% of drafted tokens accepted" in ceiling
    assert "3.74 x 2400.00 = **8976.00 tok/s**" in ceiling and "reaches 33%" in ceiling
    assert "explained: speculation yields several tokens per weight pass" in ceiling
    assert "wrong" not in ceiling
    assert summary["ceiling"]["speculative_ceiling_tok_s"] == 8976.0
    top = section(md, "Top 2 configs")
    assert "| Speculation |" in top and "77% accepted, 3.74 tokens/step" in top


def test_without_speculation_above_the_ceiling_is_wrong_facts(tmp_path):
    md, _ = report(tmp_path, row(1, 3000.0, {"tp_size": 1}))
    ceiling = section(md, "Ceiling")
    assert "exceeds the ceiling: the declared bandwidth or the model facts are wrong" in ceiling
    assert "Speculation" not in section(md, "Top 2 configs")  # no column where nothing speculated


def test_above_even_the_speculative_ceiling_is_wrong_facts(tmp_path):
    md, _ = report(tmp_path, row(1, 9500.0, NGRAM, acceptance_rate=0.9, mean_accepted_length=3.0))
    assert "exceeds even the speculative ceiling" in section(md, "Ceiling")


def test_a_speculative_best_without_counters_is_not_called_impossible(tmp_path):
    md, _ = report(tmp_path, row(1, 3000.0, NGRAM))
    ceiling = section(md, "Ceiling")
    assert "tokens per weight pass are unknown" in ceiling and "speculation explains that" in ceiling
    assert "wrong" not in ceiling
