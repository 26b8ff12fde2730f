"""One exception root for everything ncclsweep reports to a user.

    NcclsweepError                 any failure the CLI prints as one line
    ├── BadInput                   exit 2: a job, space, flag or file the user must fix
    │   └── ConfigRejected         a configuration a backend cannot express (found at validate time)
    └── RuntimeFailure             exit 1: something broke while running (storage, Ray, a lock)
        ├── StudyLocked            another live driver owns the study
        └── CircuitOpen            the study stopped itself after repeated failures

Only ``orchestrator.cli`` catches these, prints ``str(exc)`` and picks the exit code.
A failed *trial* is not an exception: it is data (see ``orchestrator.records``).
"""


class NcclsweepError(Exception):
    """Root of every error the CLI reports as one line."""

    exit_code = 1


class BadInput(NcclsweepError):
    """Input the user must fix; the message names the file, the key path and what is allowed."""

    exit_code = 2

    def __init__(self, message: str, *, file: str | None = None, key: str | None = None):
        self.file = file
        self.key = key
        where = ": ".join(part for part in (file, key) if part)
        super().__init__(f"{where}: {message}" if where else message)


class ConfigRejected(BadInput):
    """A configuration the backend cannot express, or NCCL would refuse."""


class RuntimeFailure(NcclsweepError):
    """Something broke while running; the study stays resumable."""

    exit_code = 1


class StudyLocked(RuntimeFailure):
    """A second driver tried to run a study whose owner is alive."""


class CircuitOpen(RuntimeFailure):
    """Too many consecutive failures, or GPUs unusable after a teardown."""
