"""An exported speculative config carries what the server counted when it was measured:
acceptance rate and mean accepted length, in the YAML/JSON provenance and the comment header of
the line formats; a config without speculation says nothing about it."""

from __future__ import annotations

import json
from types import SimpleNamespace

from orchestrator.backends.command import CommandBackend
from orchestrator.core.records import COMPLETE, TrialRow
from orchestrator.results.export import export

SETTINGS = {"argv": ["{python}", "-m", "server", "--port", "{port}", "--spec", "{speculative.method}",
                     "--k", "{speculative.num_tokens}"], "defaults": {"speculative.method": "none",
                                                                      "speculative.num_tokens": 0}}


def rows(**best) -> list[TrialRow]:
    return [TrialRow(number=0, state=COMPLETE, value=500.0, counted=True, is_baseline=True, config_key="a"),
            TrialRow(number=1, state=COMPLETE, value=760.0, counted=True, config_key="b",
                     params={"speculative.method": "ngram", "speculative.num_tokens": 4}, **best)]


JOB = SimpleNamespace(study="s", storage="journal:x", backend=SimpleNamespace(kind="command", settings=SETTINGS),
                      env={})


def test_the_provenance_carries_acceptance():
    backend = CommandBackend(SETTINGS, "job.yaml")
    doc = json.loads(export(JOB, rows(acceptance_rate=0.766, mean_accepted_length=3.74), "json", backend=backend))
    assert doc["provenance"]["acceptance_rate"] == 0.766 and doc["provenance"]["mean_accepted_length"] == 3.74
    cmd = export(JOB, rows(acceptance_rate=0.766, mean_accepted_length=3.74), "cmd", backend=backend)
    assert "# speculative decoding: 76.6% of drafted tokens accepted, 3.74 tokens per target step" in cmd
    assert "--spec ngram --k 4" in cmd


def test_no_speculation_says_nothing():
    backend = CommandBackend(SETTINGS, "job.yaml")
    doc = json.loads(export(JOB, rows(), "json", backend=backend))
    assert doc["provenance"]["acceptance_rate"] is None and doc["provenance"]["mean_accepted_length"] is None
    assert "speculative decoding" not in export(JOB, rows(), "env", backend=backend)
