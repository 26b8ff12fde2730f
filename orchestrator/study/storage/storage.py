"""The study's storage, in one place: every Optuna storage call and every stored name.

The driver is the only writer (``open_study``, the search policy's ask/tell, the uncounted
trials of ``add_uncounted_trial``); ``status``, ``report``, ``export`` and ``compare`` only
read (``load_study`` never creates or changes anything). What the study stores besides
Optuna's own fields is named here once: the trial user attributes below (next to the
``TrialResult`` fields, ``records.TrialResult.to_attrs``) and the study user attributes (the
golden reference, the study's identity, the outvoted references, the records of trials a
dead driver left RUNNING). Only Optuna's public API is used.

    storage_for(url)            "journal:<path>" -> JournalStorage (repaired before a write), else an RDB URL
    open_study(job, sampler)    create or resume the job's study; refuse another study's identity
    load_study(job)             the job's study, read-only
    space_fingerprint(job)      what makes two runs the same study
    prompt_fingerprint(job)     the decode prompts every figure of the study was measured on
    add_uncounted_trial(...)    a launch outside the search (a baseline repeat, a reference run)
    trial_attrs(trial, attrs)   a finished trial's attributes as the driver recorded them
"""

from __future__ import annotations

import hashlib
import json
import logging
import shlex
from pathlib import Path
from typing import Any, Protocol

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState, create_trial

from orchestrator.config import prompts as decode_prompts
from orchestrator.core.errors import BadInput, NcclsweepError, RuntimeFailure
from orchestrator.core.records import COMPLETE, TrialResult
from orchestrator.study.storage import journal
from orchestrator.study.storage import objective as objectives

log = logging.getLogger(__name__)

JOURNAL_PREFIX = "journal:"

# ---- names of what the study stores ----------------------------------------------------------
# trial user attributes written besides the TrialResult fields
ATTR_KEY = "config_key"  # records.config_key of the normalized config
ATTR_COUNTED = "counted"  # counts toward the budget (a launch that measured its config)
ATTR_CACHED_FROM = "cached_from"  # answered from this trial's measurement, not launched
ATTR_BASELINE = "is_baseline"
ATTR_REFERENCE = "is_reference"  # the launch that captured the golden reference
ATTR_REFERENCE_RUN = "reference_run"  # the run of the config correctness.reference names
ATTR_BASELINE_REPEAT = "baseline_repeat"  # the baseline again on another node
ATTR_LAUNCH_ROLE = "launch_role"  # relaunch, race, compare, repeat: a launch outside the search (TrialRow)
ATTR_RACE = "race"  # a race launch: {"id", "round", "finalists", "looks"} (``study.race``)
ATTR_REQUEUE_OF = "requeue_of"  # the config key this enqueued trial re-queues
ATTR_ENQUEUED_BY = "enqueued_by"  # baseline, reference, requeue, fill, startup
ATTR_RUN = "run"  # the `run` that recorded it (that run's start, ISO 8601): reports count time within runs
ATTR_SKIPPED = "skipped"  # "infeasible" | "banned-value" | "in-flight-duplicate" | "deferred": never launched
# study user attributes
GOLDEN_ATTR = "golden"  # the golden reference (correctness.Golden.to_dict + its trial)
FINGERPRINT_ATTR = "space_fingerprint"  # the study's identity
PROMPTS_ATTR = "prompt_set"  # the decode prompts its figures were measured on (part of its identity)
BACKEND_ATTR = "backend"  # the backend kind, for a reader without the job
MEASURE_ATTR = "measure"  # what a level of a launch is worth, where not its throughput (``Measure.identity``)
OUTVOTED_ATTR = "outvoted_references"  # trial numbers whose golden reference later trials outvoted

# The study's one Optuna constraint (feasible when <= 0): ``Trial.set_constraint(CONSTRAINT,
# FEASIBLE or INFEASIBLE)`` on every COMPLETE and PRUNED trial, before ``study.tell``. Its
# name is "0" because Optuna 5 reads the list format of the studies recorded before (the
# system attribute ``constraints: [v]``) as the constraint "0": the old and new trials of a
# resumed study carry the same constraint (the GP sampler requires one set for all trials).
CONSTRAINT = "0"
FEASIBLE = 0.0
INFEASIBLE = 1.0


class StudyJob(Protocol):
    """The two job fields reading a study needs (``orchestrator.config.job.Job`` has them)."""

    study: str
    storage: str



# A trial a dead driver left RUNNING is told FAIL by the next driver. Optuna's public API sets
# a trial's user attributes only through the ``Trial`` its asking process held, so what they
# would say (``outcome``, ``failure_kind``, ``failure_reason``, ``counted``, ...) is a study
# user attribute named ``recovered_attr(number)``, which ``history`` reads as the trial's own.
RECOVERED_PREFIX = "recovered_trial:"


def recovered_attr(number: int) -> str:
    """The study user attribute holding what a recovered trial's user attributes would say."""
    return f"{RECOVERED_PREFIX}{number}"


def trial_attrs(trial: Any, study_attrs: dict[str, Any]) -> dict[str, Any]:
    """A finished trial's user attributes as the driver recorded them: its own, and for a
    trial a dead driver left RUNNING, the record the next driver kept for it."""
    return {**trial.user_attrs, **(study_attrs.get(recovered_attr(trial.number)) or {})}


def route_optuna_logs() -> None:
    """Optuna prints through its own handler; send its warnings through ours (the CLI's, and
    driver.log where ``run`` writes one)."""
    optuna.logging.disable_default_handler()
    optuna.logging.enable_propagation()
    optuna.logging.set_verbosity(optuna.logging.WARNING)


# ---- opening -------------------------------------------------------------------------------
def journal_path(url: str) -> Path | None:
    """The journal file of a ``journal:<path>`` storage URL, else None."""
    if url.startswith(JOURNAL_PREFIX):
        return Path(url[len(JOURNAL_PREFIX):])
    return None


def storage_for(url: str, *, create: bool = True):
    """Open the Optuna storage a job names.

    ``journal:<path>`` is a journal file (``orchestrator.study.storage.journal``): with ``create`` (the
    driver, the only writer) the file and its folder are made when missing and a partial
    write a crash left is moved aside before anything is written; without it the file is
    only read (status/report/export: never created, never changed; a missing one raises
    ``RuntimeFailure``). Anything of the form ``dialect://...`` is an RDB URL and is returned
    as the string Optuna accepts.
    """
    path = journal_path(url)
    if path is not None:
        if not str(path):
            raise BadInput("a journal storage URL needs a path: journal:<path>", key="storage")
        if not create and not path.exists():
            raise RuntimeFailure(f"no study storage at {path} (run `ncclsweep run` first)")
        return journal.open_storage(path, writable=create)
    if "://" in url:
        return url
    raise BadInput(f"storage must be 'journal:<path>' or an RDB URL such as sqlite:///study.db, not {url!r}",
                   key="storage")


def dashboard_command(url: str) -> str:
    """The command that opens this storage in optuna-dashboard (it takes a journal file path)."""
    path = journal_path(url)
    return f"optuna-dashboard {shlex.quote(str(path) if path is not None else url)}"


def load_study(job: StudyJob):
    """The job's existing study (``optuna.load_study``); RuntimeFailure when there is none."""
    storage = storage_for(job.storage, create=False)
    try:
        return optuna.load_study(study_name=job.study, storage=storage)
    except KeyError:
        raise RuntimeFailure(f"no study named {job.study!r} in {job.storage} (run `ncclsweep run` first)") from None
    except Exception as exc:  # storage errors are runtime failures for the CLI
        raise RuntimeFailure(f"cannot open study {job.study!r} in {job.storage}: {exc}") from exc


def open_study(job, sampler: optuna.samplers.BaseSampler | None = None, create: bool = True,
               say=None, storage: Any = None) -> optuna.Study:
    """Create or load the job's study; refuse one that exists with a different identity
    (``check_identity``). ``create=False``: only read an existing one (no write at all).
    ``storage``: the storage object to open it in (a shared study's, ``study.shared``), else the
    job's URL's."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        storage = storage if storage is not None else storage_for(job.storage, create=create)
    except NcclsweepError:
        raise
    except Exception as exc:  # noqa: BLE001 - any storage problem is one line for the user
        raise RuntimeFailure(f"cannot open storage {job.storage}: {exc}") from None
    if not create:
        try:
            return optuna.load_study(study_name=job.study, storage=storage, sampler=sampler)
        except KeyError:
            raise BadInput(f"no study named {job.study!r} in {job.storage} yet; run `ncclsweep run {job.path}` first",
                           file=str(job.path), key="study") from None
    wanted = objectives.directions(getattr(job, "objective", None))
    try:
        study = optuna.load_study(study_name=job.study, storage=storage, sampler=sampler)
    except KeyError:
        study = None
    if study is not None and [d.name.lower() for d in study.directions] != wanted:
        _other_directions(job, study, storage, wanted, say or log.warning)
        study = None
    if study is None:  # (load_if_exists: Optuna would keep a stored study's directions whatever these say)
        study = optuna.create_study(study_name=job.study, storage=storage, sampler=sampler,
                                    directions=wanted, load_if_exists=True)  # type: ignore[arg-type]
    check_identity(job, study, say or log.warning)
    check_prompts(job, study, say or log.warning)
    measure = objectives.of(getattr(job, "objective", None)).measure.identity()
    if measure is not None and study.user_attrs.get(MEASURE_ATTR) != measure:  # every reader's rows read by it
        study.set_user_attr(MEASURE_ATTR, measure)
    return study


def _other_directions(job, study: optuna.Study, storage, wanted: list[str], say) -> None:
    """A stored study with as many objectives as another ``objective:`` has (a plan of
    several levels against one): refused once a trial finished (its values mean something
    else); one without a finished trial is made again with the job's (nothing was measured)."""
    if any(t.state.is_finished() for t in study.get_trials(deepcopy=False)):
        raise BadInput(
            f"study {job.study!r} already exists in {job.storage} with another objective (its trials tell "
            f"{len(study.directions)} value(s) each; this job's objective, {objectives.describe(job.objective)}, "
            f"tells {len(wanted)}); give this job a new `study:` name (e.g. {job.study}-2) or delete "
            f"{job.report_dir} to start over", file=str(job.path), key="objective")
    say(f"study {job.study!r} has no finished trial yet: it takes this job's objective "
        f"({objectives.describe(job.objective)})")
    optuna.delete_study(study_name=job.study, storage=storage)


def check_identity(job, study: optuna.Study, say) -> None:
    """Is this job's study the stored one? Its identity is ``space_fingerprint``: a study
    without one takes the job's; one stored by an earlier release (``legacy_fingerprint``,
    which counted where the server is found) is upgraded; one without a finished trial
    (nothing measured under the old settings) takes the job's, said in one line; any other
    difference is refused (BadInput)."""
    fingerprint = space_fingerprint(job)
    existing = study.user_attrs.get(FINGERPRINT_ATTR)
    if existing == fingerprint:
        return
    if existing is not None and existing != legacy_fingerprint(job):
        if any(t.state.is_finished() for t in study.get_trials(deepcopy=False)):
            objective = getattr(job, "objective", None)
            tuned = f" (or objective: this job tunes {objectives.describe(objective)})" \
                if objectives.identity(objective) else ""
            raise BadInput(
                f"study {job.study!r} already exists in {job.storage} with a different search space or backend"
                f"{tuned}; give this job a new `study:` name (e.g. {job.study}-2) to fork, or delete "
                f"{job.report_dir} to start over", file=str(job.path), key="study")
        say(f"study {job.study!r} has no finished trial yet: it takes this job's backend settings and space")
    study.set_user_attr(FINGERPRINT_ATTR, fingerprint)
    study.set_user_attr(BACKEND_ATTR, job.backend.kind)


def prompt_fingerprint(job) -> dict[str, Any] | None:
    """The job's decode prompt set (``config.prompts.fingerprint``), None for a job without one."""
    bench = getattr(job, "bench", None)
    if bench is None or not getattr(bench, "prompts", None):
        return None
    return decode_prompts.fingerprint(bench.prompts, getattr(bench, "prompts_from", None))


def check_prompts(job, study: optuna.Study, say) -> None:
    """Were the study's figures measured on this job's decode prompts? A figure means something
    only with its texts: a study measured on another set (another hash) is refused (BadInput:
    configs measured on different texts would be ranked against each other); one without a
    finished trial takes the job's set, said in one line; one recorded before the set was part
    of its identity adopts the job's (its trials say "unknown"), said in one line."""
    wanted = prompt_fingerprint(job)
    if wanted is None:
        return
    stored = study.user_attrs.get(PROMPTS_ATTR)
    if stored is not None and stored.get("sha256") == wanted["sha256"]:
        if stored != wanted:  # the same texts from another file name: keep where they come from now
            study.set_user_attr(PROMPTS_ATTR, wanted)
        return
    finished = any(t.state.is_finished() for t in study.get_trials(deepcopy=False))
    if stored is not None and finished:
        raise BadInput(
            f"study {job.study!r} was measured on other decode prompts ({decode_prompts.describe(stored)}; this job "
            f"has {decode_prompts.describe(wanted)}): its configs would be ranked against figures of other texts; "
            f"put bench.prompts back, or give this job a new `study:` name (e.g. {job.study}-2) to fork",
            file=str(job.path), key="bench.prompts")
    if stored is not None:
        say(f"study {job.study!r} has no finished trial yet: it takes this job's decode prompts "
            f"({decode_prompts.describe(wanted)})")
    elif finished:
        say(f"study {job.study!r} was recorded before its decode prompts were part of its identity: it takes "
            f"this job's ({decode_prompts.describe(wanted)}); its earlier trials say 'unknown'")
    study.set_user_attr(PROMPTS_ATTR, wanted)


def space_fingerprint(job) -> str:
    """What makes two runs the same study: the backend kind, its settings except where the
    server is found (``Backend.identity_settings``: a path to the same server is not another
    study; each trial records the command and version it ran), and the parameters."""
    return _fingerprint(job, job.backend_obj().identity_settings())


def legacy_fingerprint(job) -> str:
    """The fingerprint earlier versions of ncclsweep stored: every setting, locations included
    (their studies open unchanged: ``check_identity`` upgrades it)."""
    return _fingerprint(job, job.backend.settings)


def _fingerprint(job, settings: dict) -> str:
    params = [(p.name, p.kind, list(p.choices or []), p.low, p.high, p.step, p.when) for p in job.space.params]
    what: dict[str, Any] = {"backend": job.backend.kind, "settings": settings, "params": params}
    objective = objectives.identity(getattr(job, "objective", None))
    if objective is not None:  # the default objective leaves the identity as studies recorded before it have it
        what["objective"] = objective
    blob = json.dumps(what, sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


def forget_study(job: StudyJob, study: optuna.Study, *, journal_made_here: bool) -> None:
    """Remove a study that holds no trial: its journal when this run made it and it holds
    nothing else, else the study from its storage."""
    store = storage_for(job.storage)
    path = journal_path(job.storage)
    if journal_made_here and path is not None and optuna.get_all_study_names(store) == [job.study]:
        path.unlink(missing_ok=True)
    else:
        optuna.delete_study(study_name=job.study, storage=store)


# ---- the golden reference -----------------------------------------------------------------------

def stored_golden(study: optuna.Study) -> dict[str, Any] | None:
    """The golden reference the study keeps (``correctness.Golden.to_dict`` + its ``trial``)."""
    return study.user_attrs.get(GOLDEN_ATTR) or None


def store_golden(study: optuna.Study, golden: dict[str, Any], trial: int | None = None) -> None:
    """Keep the golden reference every later trial is compared with (``trial``: where it came from)."""
    study.set_user_attr(GOLDEN_ATTR, {**golden, **({"trial": trial} if trial is not None else {})})


def outvote_golden(study: optuna.Study) -> int | None:
    """The golden reference was outvoted: forget it (the next run measures it again) and keep
    the trial it came from among the outvoted ones. Returns that trial's number."""
    trial = (stored_golden(study) or {}).get("trial")
    outvoted = [*study.user_attrs.get(OUTVOTED_ATTR, []), *([trial] if trial is not None else [])]
    study.set_user_attr(OUTVOTED_ATTR, outvoted)
    study.set_user_attr(GOLDEN_ATTR, None)
    return trial


# ---- writing outside the search ----------------------------------------------------------------

def contains(dist: BaseDistribution, value: Any) -> bool:
    """Whether ``value`` is a point of an Optuna distribution, by its public fields: a
    categorical choice (``to_internal_repr`` finds it, as Optuna does), or a number in
    ``[low, high]`` on the ``step`` grid of an int or float distribution."""
    try:
        internal = dist.to_internal_repr(value)
    except (ValueError, TypeError):
        return False
    if isinstance(dist, CategoricalDistribution):
        return True
    if not isinstance(dist, (IntDistribution, FloatDistribution)) or not dist.low <= internal <= dist.high:
        return False
    if isinstance(dist, IntDistribution):
        return (internal - dist.low) % dist.step == 0
    if dist.step is None:
        return True
    k = (internal - dist.low) / dist.step
    return abs(k - round(k)) < 1.0e-8


def add_uncounted_trial(study: optuna.Study, result: TrialResult, config: dict[str, Any], key: str,
                        distributions: dict[str, BaseDistribution], attrs: dict[str, Any],
                        values: list[float] | None = None) -> int:
    """Store a launch outside the search (a baseline repeat, the reference config's run) as a
    finished, uncounted trial: COMPLETE with its value (``values``: what the objective tells
    Optuna, ``objective.told_values``; default the result's value) and feasible, else FAIL.
    Its params are the config's values that are points of the space (a setting outside the
    space is in its ``config`` attribute only). Returns its trial number."""
    params = {k: v for k, v in config.items() if k in distributions and contains(distributions[k], v)}
    stored = {**result.to_attrs(), ATTR_KEY: key, ATTR_COUNTED: False, **attrs}
    ok = result.outcome == COMPLETE
    study.add_trial(create_trial(
        state=TrialState.COMPLETE if ok else TrialState.FAIL,
        values=(values if values is not None else [result.value]) if ok else None,  # type: ignore[list-item]
        params=params, distributions={k: distributions[k] for k in params}, user_attrs=stored,
        constraints={CONSTRAINT: FEASIBLE} if ok else None))
    return max(t.number for t in study.get_trials(deepcopy=False))
