"""The export's figure and provenance read back from an exported file: the YAML documents the kept
studies export (their golden files: a race left tied, a plan exported at its lowest level, goodput)
read as typed records and write back key for key; an export of an earlier release, without the
prompts and the engine's notices, reads too."""

from __future__ import annotations

import pytest
import yaml

from conftest import REPO
from orchestrator.results.figure import EXPORT_VERSION, ExportDocument

GOLDEN = REPO / "tests" / "fixtures" / "golden"


def exported(study: str) -> list[dict]:
    """The YAML documents a kept study exported (``--top 3``)."""
    text = (GOLDEN / study / "export.yaml.txt").read_text().split("--- stderr\n")[0]
    return [d for d in yaml.safe_load_all(text) if d]


@pytest.mark.parametrize("study", ["h200-vllm-1b-race", "h200-vllm-1b-plan", "h200-vllm-1b-goodput",
                                   "recorded-cpu-faults"])
def test_an_exported_document_reads_back_as_it_was_written(study):
    docs = exported(study)
    assert docs
    for doc in docs:
        back = ExportDocument.from_record(doc)
        assert doc["ncclsweep_export"] == EXPORT_VERSION and back.to_record() == doc
        prov, fig = back.provenance, back.provenance.figure
        assert prov.trial == doc["provenance"]["trial"] and fig.value == doc["provenance"]["figure"]["value"]
        assert fig.launches == len(fig.launch_values) == doc["provenance"]["figure"]["launches"]


def test_the_tie_the_race_left_reads_as_typed_fields():
    first, second = exported("h200-vllm-1b-race")[:2]
    race = ExportDocument.from_record(first).provenance.figure.race
    assert race is not None and not race.decided and race.tied_trials == (3,)
    vs = ExportDocument.from_record(second).provenance.figure.vs_baseline
    assert vs is not None and vs.verdict == "faster" and vs.beyond_noise and vs.point == vs.interval.ratio


def test_an_export_of_an_earlier_release_reads():
    doc = exported("h200-vllm-1b")[0]
    for key in ("prompts", "engine_notices", "engine_fallbacks"):
        doc["provenance"].pop(key)
    prov = ExportDocument.from_record(doc).provenance
    assert prov.prompts is None and prov.engine_notices == () and prov.engine_fallbacks == ()
    assert prov.client_notices == ()  # written only where there is one
    assert prov.value_tok_s == doc["provenance"]["value_tok_s"] and prov.x_baseline == doc["provenance"]["x_baseline"]
