"""Study storage: a journal file opens as optuna-dashboard opens it, an RDB URL passes, and
reading never creates a study or a folder. A study's identity: where the server is found is
not part of it (a full path set as the pre-flight advises opens the same study); studies
recorded by earlier versions, whose fingerprint counted every setting, open unchanged and
are upgraded; a study without a finished trial takes the job's new settings; a different
model or space with finished trials is refused (exit 2). Real journals: the GPU studies
under docs/gpu and the CPU study under tests/data/recorded, opened through ``open_study`` as
``ncclsweep run`` does."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest
import yaml
from optuna.trial import TrialState
from recorded_study import build_study, make_job

from conftest import write_job
from orchestrator.config.job import load_job
from orchestrator.core.errors import BadInput, RuntimeFailure
from orchestrator.study.evidence import history
from orchestrator.study.storage import storage
from orchestrator.study.storage.storage import FINGERPRINT_ATTR, legacy_fingerprint, open_study, space_fingerprint

REPO = Path(__file__).resolve().parents[3]
RECORDED = [  # (journal, the job that recorded it)
    ("docs/gpu/h200-vllm-1b/study.journal", "jobs/h200-vllm-1b.yaml"),
    ("docs/gpu/h200x2-vllm-1b-tp2-p2p/study.journal", "jobs/h200x2-vllm-1b-tp2-p2p.yaml"),
    ("docs/gpu/h200-refserver-1b/study.journal", "jobs/h200-refserver-1b.yaml"),
    ("tests/data/recorded/cpu-faults/study.journal", "tests/data/recorded/cpu-faults/job.yaml"),
]


def job_copy(tmp_path: Path, journal: str, job_file: str, **settings) -> Path:
    """The recorded job, its study in a copy of the recorded journal; ``settings`` changed."""
    src = REPO / job_file
    doc = yaml.safe_load(src.read_text())
    doc["space"] = str((src.parent / doc["space"]).resolve())
    doc.pop("output_dir", None)
    doc["report_dir"] = str(tmp_path / "study")
    doc["storage"] = f"journal:{tmp_path / 'study' / 'study.journal'}"
    doc["backend"]["settings"] = {**doc["backend"]["settings"], **settings}
    doc["backend"]["settings"] = {k: v for k, v in doc["backend"]["settings"].items() if v is not None}
    (tmp_path / "study").mkdir(exist_ok=True)
    if not (tmp_path / "study" / "study.journal").exists():
        shutil.copy(REPO / journal, tmp_path / "study" / "study.journal")
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def stored_fingerprint(job) -> str:
    return open_study(job, create=False).user_attrs[FINGERPRINT_ATTR]


@pytest.mark.parametrize("journal,job_file", RECORDED, ids=lambda v: Path(v).parent.name)
def test_recorded_studies_open_with_their_old_fingerprint_and_then_ignore_the_servers_location(
        tmp_path, journal, job_file):
    job = load_job(job_copy(tmp_path, journal, job_file))
    assert stored_fingerprint(job) == legacy_fingerprint(job)  # what the earlier version stored
    trials = len(open_study(job, create=False).get_trials())
    open_study(job)  # `run` opens it: no refusal
    assert stored_fingerprint(job) == space_fingerprint(job)  # upgraded
    location = "executable" if job.backend.kind in ("llamacpp",) else "python"
    moved = load_job(job_copy(tmp_path, journal, job_file, **{location: "/opt/elsewhere/bin/python3"}))
    study = open_study(moved)
    assert len(study.get_trials()) == trials
    assert stored_fingerprint(moved) == space_fingerprint(job)


@pytest.mark.parametrize("journal,job_file", RECORDED[:1] + RECORDED[-1:], ids=lambda v: Path(v).parent.name)
def test_another_model_with_finished_trials_is_refused(tmp_path, journal, job_file):
    model = "/models/other" if "vllm" in job_file else "1b"
    job = load_job(job_copy(tmp_path, journal, job_file, model=model))
    with pytest.raises(BadInput, match="already exists .* with a different search space or backend") as err:
        open_study(job)
    assert err.value.exit_code == 2


def test_a_study_without_a_finished_trial_takes_the_jobs_new_settings(tmp_path):
    """What an earlier version left after a refused pre-flight: the study, its identity
    computed with the missing path, no trial."""
    wrong = load_job(write_job(tmp_path, study="left", backend={
        "kind": "refserver", "settings": {"model": "tiny", "device": "cpu", "python": "/missing/python3"}}))
    wrong.journal_path.parent.mkdir(parents=True)
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(wrong.journal_path)))
    left = optuna.create_study(study_name="left", storage=storage, direction="maximize")
    left.set_user_attr(FINGERPRINT_ATTR, legacy_fingerprint(wrong))
    fixed = load_job(write_job(tmp_path, study="left", backend={
        "kind": "refserver", "settings": {"model": "tiny", "device": "cpu", "dims": {"layers": 2}}}))
    said: list[str] = []
    open_study(fixed, say=said.append)
    assert said == ["study 'left' has no finished trial yet: it takes this job's backend settings and space"]
    assert stored_fingerprint(fixed) == space_fingerprint(fixed)
    again: list[str] = []
    open_study(fixed, say=again.append)
    assert again == []


def test_reading_a_study_writes_nothing(tmp_path):
    job = load_job(job_copy(tmp_path, *RECORDED[-1]))
    before = job.journal_path.read_bytes()
    open_study(job, create=False)
    assert job.journal_path.read_bytes() == before


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One study for the module: these tests only read it."""
    job, study = build_study(tmp_path_factory.mktemp("history"))
    return job, history.trial_rows(storage.load_study(job))


def test_storage_opens_like_optuna_dashboard(built):
    """optuna-dashboard takes the journal file path and opens it with JournalFileBackend."""
    job, _rows = built
    path = storage.journal_path(job.storage)
    journal = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path)))
    study = optuna.load_study(study_name="demo", storage=journal)
    assert len(study.trials) == 13
    assert storage.dashboard_command(job.storage) == f"optuna-dashboard {path}"
    assert {t.state for t in study.trials} >= {TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED}


def test_open_storage_rdb_and_errors(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    assert storage.storage_for(url) == url
    with pytest.raises(BadInput):
        storage.storage_for("not-a-storage")
    missing = SimpleNamespace(study="x", storage=f"journal:{tmp_path / 'none' / 'study.journal'}")
    with pytest.raises(RuntimeFailure, match="no study storage"):
        storage.load_study(missing)
    assert not (tmp_path / "none").exists()  # reading never creates
    job = make_job(tmp_path)
    optuna.create_study(study_name="other", storage=storage.storage_for(job.storage))
    with pytest.raises(RuntimeFailure, match="no study named 'demo'"):
        storage.load_study(job)


# ---- the decode prompts are part of a study's identity (issue 38) -----------------------------

def prompt_job(tmp_path: Path, texts: list[str], name: str = "prompts.txt"):
    (tmp_path / name).write_text("\n".join(texts) + "\n")
    doc = {"bench": {"prompts": name, "output_tokens": 16, "warmup": 1, "repeats": 2}}
    return load_job(write_job(tmp_path, study="p", **doc))


def finish_a_trial(study) -> None:
    trial = study.ask()
    study.tell(trial, 1.0)


def test_a_changed_prompt_set_is_refused_on_resume_and_the_same_texts_are_not(tmp_path):
    texts = ["The first prompt is a sentence about trains.", "A second one asks about the weather in May."]
    job = prompt_job(tmp_path, texts)
    said: list[str] = []
    finish_a_trial(open_study(job, say=said.append))
    assert said == []  # a new study: the job's set is its own, nothing to say
    stored = open_study(job, create=False).user_attrs[storage.PROMPTS_ATTR]
    assert stored == storage.prompt_fingerprint(job) and stored["count"] == 2 and stored["words"]["max"] == 9
    changed = prompt_job(tmp_path, [*texts, "A third prompt, added later."])
    with pytest.raises(BadInput) as err:
        open_study(changed)
    line = str(err.value)
    assert err.value.exit_code == 2 and err.value.key == "bench.prompts" and "\n" not in line
    assert "was measured on other decode prompts (2 prompt(s) of 8-9 words" in line
    assert "this job has 3 prompt(s)" in line
    assert "put bench.prompts back, or give this job a new `study:` name (e.g. p-2) to fork" in line
    moved = prompt_job(tmp_path, texts, name="same-texts.txt")  # the same texts in another file: the same study
    open_study(moved)
    assert open_study(moved, create=False).user_attrs[storage.PROMPTS_ATTR]["sha256"] == stored["sha256"]


def test_a_study_without_a_finished_trial_takes_the_new_prompt_set(tmp_path):
    job = prompt_job(tmp_path, ["one prompt of a few words"])
    open_study(job)
    changed = prompt_job(tmp_path, ["another prompt of a few words"])
    said: list[str] = []
    open_study(changed, say=said.append)
    assert said == ["study 'p' has no finished trial yet: it takes this job's decode prompts (1 prompt(s) of 6 "
                    f"words ({tmp_path / 'prompts.txt'}), sha256 {storage.prompt_fingerprint(changed)['sha256']})"]


def test_a_study_recorded_before_the_prompt_set_was_its_identity_adopts_the_jobs(tmp_path):
    journal, job_file = RECORDED[-1]  # the CPU study recorded by an earlier release
    job = load_job(job_copy(tmp_path, journal, job_file))
    assert storage.PROMPTS_ATTR not in open_study(job, create=False).user_attrs
    said: list[str] = []
    open_study(job, say=said.append)
    assert said == [f"study {job.study!r} was recorded before its decode prompts were part of its identity: it takes "
                    f"this job's ({storage.prompt_fingerprint(job)['count']} prompt(s) of "
                    f"{said[0].split(' prompt(s) of ', 1)[1].split(' words')[0]} words (the bundled set), sha256 "
                    f"{storage.prompt_fingerprint(job)['sha256']}); its earlier trials say 'unknown'"]
    assert open_study(job, create=False).user_attrs[storage.PROMPTS_ATTR] == storage.prompt_fingerprint(job)
    rows = history.trial_rows(open_study(job, create=False))
    assert rows and all(r.prompt_set == {} for r in rows)  # what they were measured on was not recorded
