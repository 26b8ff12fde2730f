"""Several drivers on one study: a study in PostgreSQL (Optuna's RDB storage) is shared.

A journal study has one driver (``driver.lock``); a study whose ``storage:`` is a PostgreSQL
URL (``postgresql+psycopg2://...``) may be run by several drivers at once, on one cluster or
several, each with its own report folder (its trial logs and server records). They cooperate
through the database alone:

- **claims**: a driver picks its next config (``SearchPolicy.next``: the study read, the trial
  asked, its config key written) holding a PostgreSQL advisory lock of the study
  (``claim``), so the next driver to pick sees it RUNNING and picks another; no config is
  launched by two drivers at once, nor one already measured;
- **heartbeats**: every trial a driver has in flight gets Optuna's heartbeat
  (``RDBStorage.record_heartbeat``, the database's clock) every ``heartbeat_every(grace_s)``
  seconds (``HEARTBEAT_S`` with the default grace) from a thread of the driver, and once as soon
  as it is asked;
- **take-over**: a trial whose heartbeat is older than the grace period (``GRACE_S``, the job's
  ``timeouts.takeover``) belongs to a driver that died
  (kill -9, a lost node): Optuna's ``fail_stale_trials`` moves it to FAIL (one driver wins that
  update) and hands it to ``stale``'s caller, which records it ``interrupted`` and re-queues its
  config (``SearchPolicy.account_stale``), as a journal study's next ``run`` does;
- **extras**: the relaunches and the race of the finalists are run by one driver at a time, the
  one holding the study's second advisory lock (``take_extras``).

An advisory lock is held by the driver's database connection: a driver that dies releases it
when PostgreSQL sees the connection close. Other RDB backends (SQLite, MySQL) keep one driver
per study.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import optuna
import sqlalchemy
from optuna.exceptions import ExperimentalWarning
from optuna.trial import FrozenTrial
from sqlalchemy.pool import NullPool

from orchestrator.config.job import DEFAULT_TAKEOVER_S
from orchestrator.core.errors import RuntimeFailure

log = logging.getLogger(__name__)

HEARTBEAT_S = 10  # a driver's in-flight trials get a heartbeat this often, at most
GRACE_S = round(DEFAULT_TAKEOVER_S)  # a RUNNING trial without one this long is taken over: timeouts.takeover


def heartbeat_every(grace_s: float) -> int:
    """Whole seconds between heartbeats for a grace period: four of them within it, at most
    ``HEARTBEAT_S`` apart, at least a second."""
    return max(1, min(HEARTBEAT_S, int(grace_s // 4)))
_ASK_WARNING = "Heartbeat of storage is supposed to be used with Study.optimize"


def is_shared(url: str) -> bool:
    """Whether a storage URL lets several drivers run its study: PostgreSQL."""
    scheme = url.split("://", 1)[0] if "://" in url else ""
    return scheme.split("+", 1)[0] == "postgresql"


def shown(url: str) -> str:
    """The URL as the lines print it: its password hidden."""
    try:
        return sqlalchemy.engine.make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - a URL SQLAlchemy cannot parse is shown as given
        return url


def _lock_key(study: str, what: str) -> int:
    """A 64-bit advisory lock key of the study (PostgreSQL's bigint)."""
    digest = hashlib.sha1(f"ncclsweep:{study}:{what}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class SharedStudy:
    """One driver's side of a shared study (module docstring): the heartbeat-enabled storage
    Optuna opens the study with (``storage``), the advisory locks, the heartbeat thread."""

    def __init__(self, url: str, study: str, *, heartbeat_s: int | None = None, grace_s: int = GRACE_S):
        self.url = url
        self.study = study
        self.heartbeat_s = heartbeat_every(grace_s) if heartbeat_s is None else heartbeat_s
        self._stale: list[FrozenTrial] = []
        self._ids: dict[int, int] = {}
        self._study_id: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._extras = False
        warnings.filterwarnings("ignore", message=_ASK_WARNING)  # heartbeats are recorded here, not by optimize
        try:
            self.storage = self._storage(grace_s)
            self._engine = sqlalchemy.create_engine(url, poolclass=NullPool)
            self._conn = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        except ModuleNotFoundError as exc:
            raise RuntimeFailure(f"storage {shown(url)} needs the PostgreSQL driver {exc.name!r}: "
                                 "pip install 'ncclsweep[postgresql]' (psycopg2-binary)") from None
        except Exception as exc:  # noqa: BLE001 - any database problem is one line for the user
            raise RuntimeFailure(f"cannot open storage {shown(url)}: {str(exc).splitlines()[0]}") from None

    def _storage(self, grace_s: int) -> optuna.storages.RDBStorage:
        """Optuna's RDB storage with heartbeats on; its schema is created by the first driver, so
        two starting at once may collide there once: tried again."""
        for attempt in range(3):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", ExperimentalWarning)
                    return optuna.storages.RDBStorage(
                        self.url, heartbeat_interval=self.heartbeat_s, grace_period=grace_s,
                        heartbeat_stale_trial_callback=lambda _s, t: self._stale.append(t))
            except Exception as exc:  # IntegrityError of a concurrent create_all
                if attempt == 2 or isinstance(exc, ModuleNotFoundError):
                    raise
                time.sleep(1.0)
        raise AssertionError("unreachable")

    # ---- claims ------------------------------------------------------------------------------
    def _sql(self, statement: str, **params: Any) -> Any:
        return self._conn.execute(sqlalchemy.text(statement), params).scalar()

    @contextlib.contextmanager
    def claim(self) -> Iterator[None]:
        """Hold the study's claim lock (blocking): one driver at a time picks its next configs."""
        key = _lock_key(self.study, "claim")
        self._sql("SELECT pg_advisory_lock(:k)", k=key)
        try:
            yield
        finally:
            self._sql("SELECT pg_advisory_unlock(:k)", k=key)

    def take_extras(self) -> bool:
        """Whether this driver runs the relaunches and the race (it holds, or now takes, the
        study's extras lock; never waits for it)."""
        if not self._extras:
            self._extras = bool(self._sql("SELECT pg_try_advisory_lock(:k)", k=_lock_key(self.study, "extras")))
        return self._extras

    # ---- heartbeats --------------------------------------------------------------------------
    def _trial_id(self, number: int) -> int:
        if number not in self._ids:
            if self._study_id is None:
                self._study_id = self.storage.get_study_id_from_name(self.study)
            self._ids[number] = self.storage.get_trial_id_from_study_id_trial_number(self._study_id, number)
        return self._ids[number]

    def beat(self, numbers: list[int]) -> None:
        """A heartbeat for each of these trials (the database's clock)."""
        for number in numbers:
            self.storage.record_heartbeat(self._trial_id(number))

    def beat_one(self, number: int) -> None:
        """A trial's first heartbeat, as soon as it is asked."""
        self.beat([number])

    def start_beats(self, numbers: Callable[[], list[int]]) -> None:
        """A thread that beats for ``numbers()`` (the driver's trials in flight) every
        ``heartbeat_s``, until ``close``."""
        def loop() -> None:
            while not self._stop.wait(self.heartbeat_s):
                try:
                    self.beat(numbers())
                except Exception:  # a missed beat is retried; GRACE_S allows several
                    log.debug("heartbeat not recorded", exc_info=True)

        self._thread = threading.Thread(target=loop, name="ncclsweep-heartbeat", daemon=True)
        self._thread.start()

    def stale(self, study: optuna.Study) -> list[FrozenTrial]:
        """The RUNNING trials of dead drivers (no heartbeat for the grace period), now FAIL in
        storage; each is handed to exactly one driver."""
        self._stale.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExperimentalWarning)
            optuna.storages.fail_stale_trials(study)
        found, self._stale[:] = list(self._stale), []
        return found

    def close(self) -> None:
        """Stop the heartbeats and give the locks back (a driver killed without it: PostgreSQL releases
        them when it sees its connection end)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with contextlib.suppress(Exception):  # at once: the server would release them when it sees the connection end
            self._sql("SELECT pg_advisory_unlock_all()")
        with contextlib.suppress(Exception):
            self._conn.close()
        with contextlib.suppress(Exception):
            self._engine.dispose()
        with contextlib.suppress(Exception):
            self.storage.remove_session()
            self.storage.engine.dispose()
