"""Every kept study still reads, and says what it said: the GPU studies under docs/gpu and the CPU
studies under tests/data/recorded, each copied with its compare.json, compare-plan.json and
prescreen.json, through the real command line: ``status --json``, ``export`` (yaml, env,
nccl-tuner, benchmark-report) with what it prints beside, and ``report`` (report.md, trials.csv).
Each output is held to its golden file (tests/fixtures/golden/<study>/), written by the code before
the results side became typed records: a refactor that changes a figure, a word or a field fails
here. ``NCCLSWEEP_WRITE_GOLDEN=1`` writes them anew (then review the diff: it is a change users
see)."""

from __future__ import annotations

import io
import os
import re
import shutil
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import optuna
import pytest
import yaml

from conftest import REPO
from orchestrator.cli import main

GOLDEN = REPO / "tests" / "fixtures" / "golden"
KEPT_FILES = ("study.journal", "compare.json", "compare-plan.json", "prescreen.json")
# the job each kept study of docs/gpu was recorded with, where its folder is named otherwise
JOB_OF = {"-torchops": "", "-kill9": "", "tp2-session1": "tp2-p2p"}


def kept_studies() -> list[tuple[str, list[Path], Path]]:
    """(name, its folders, job file) of every kept study; the recorded CPU studies twice, the second
    time with the compare.json and compare-plan.json of tests/fixtures/compare (today's format)."""
    out = []
    for folder in sorted((REPO / "docs" / "gpu").iterdir()):
        if (folder / "study.journal").exists():
            name = folder.name
            for suffix, instead in JOB_OF.items():
                name = name.replace(suffix, instead)
            out.append((folder.name, [folder], REPO / "jobs" / f"{name}.yaml"))
    for folder in sorted((REPO / "tests" / "data" / "recorded").iterdir()):
        out.append((f"recorded-{folder.name}", [folder], folder / "job.yaml"))
    for name in ("demo", "demo-plan"):
        folder = REPO / "tests" / "data" / "recorded" / name
        out.append((f"compared-{name}", [folder, REPO / "tests" / "fixtures" / "compare"], folder / "job.yaml"))
    return out


def study_copy(tmp_path: Path, folders: list[Path], job_file: Path) -> Path:
    """The kept study's files in ``tmp_path`` and its job pointing there (the study's own name)."""
    for folder in folders:
        for name in KEPT_FILES:
            if (folder / name).exists():
                shutil.copy(folder / name, tmp_path / name)
    backend = optuna.storages.journal.JournalFileBackend(str(tmp_path / "study.journal"))
    journal = optuna.storages.JournalStorage(backend)
    doc = yaml.safe_load(job_file.read_text())
    doc["space"] = str((job_file.parent / doc["space"]).resolve())
    doc.pop("output_dir", None)
    doc.update(study=optuna.get_all_study_names(journal)[0], report_dir=str(tmp_path),
               storage=f"journal:{tmp_path / 'study.journal'}")
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return tmp_path / "job.yaml"


def said(argv: list[str]) -> str:
    """What the command prints (stdout, then stderr) and its exit status."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    return f"{out.getvalue()}--- stderr\n{err.getvalue()}--- exit {code}\n"


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_EXPORTED_AT = re.compile(r"(exported_at\"?:) \S+")


def scrubbed(text: str, where: Path) -> str:
    """The output with what differs between runs of the same code left out: the study's folder, the
    export's own time, the ids the benchmark report derives from the storage's path."""
    text = text.replace(str(where), "<study>")
    return _EXPORTED_AT.sub(r"\1 <now>", _UUID.sub("<uuid>", text))


@pytest.mark.parametrize("name,folders,job_file", [pytest.param(*kept, id=kept[0]) for kept in kept_studies()])
def test_a_kept_study_says_what_it_said(tmp_path, name, folders, job_file):
    job = str(study_copy(tmp_path, folders, job_file))
    outputs = {} if name.startswith("compared-") else {  # the same study again: its report's compare sections
        "status.json.txt": said(["status", job, "--json"]),
        "export.yaml.txt": said(["export", job, "--format", "yaml", "--top", "3"]),
        "export.env.txt": said(["export", job, "--format", "env", "--top", "2"]),
        "export.tuner.txt": said(["export", job, "--format", "nccl-tuner"]),
        "benchmark-report.yaml.txt": said(["export", job, "--format", "benchmark-report"]),
    }
    said(["report", job])
    for made in ("report.md", "trials.csv"):
        path = tmp_path / made
        outputs[made] = path.read_text() if path.exists() else "(not written)\n"
    golden = GOLDEN / name
    if os.environ.get("NCCLSWEEP_WRITE_GOLDEN"):
        golden.mkdir(parents=True, exist_ok=True)
        for file, text in outputs.items():
            (golden / file).write_text(scrubbed(text, tmp_path))
    for file, text in outputs.items():
        assert scrubbed(text, tmp_path) == (golden / file).read_text(), f"{name}: {file} differs from its golden file"
