"""One process at a time trains a promoted run's directory.

The process that trains a promoted run holds an exclusive lock on a file in the run's directory
for as long as it trains. A second promotion of the same run (another shell, another search
worker) is refused in one line instead of writing the same checkpoints. The operating system
drops the lock when its process ends, however it ends, so a record still marked `running` whose
lock nobody holds was left by a process that is gone (SIGKILL, out of memory, a lost machine):
`tianfeng runs` shows it as interrupted, and promoting it again continues it from its checkpoint.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path

from tianfeng.core.errors import ConfigError
from tianfeng.storage.runs import RunRecordStatus

LOCK_NAME = ".tianfeng-run.lock"


@contextlib.contextmanager
def training_lock(run_dir: Path, trial_number: int, study: str) -> Iterator[None]:
    """Hold `run_dir`'s training lock for the block; ConfigError when another process holds it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / LOCK_NAME, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _trained_elsewhere(run_dir, trial_number, study) from None
        yield  # closing the file releases the lock


def refuse_if_trained(run_dir: Path, trial_number: int, study: str) -> None:
    """ConfigError when another process trains `run_dir` now: said before anything is printed
    (training_lock is what guarantees it)."""
    if is_trained_now(run_dir):
        raise _trained_elsewhere(run_dir, trial_number, study)


def _trained_elsewhere(run_dir: Path, trial_number: int, study: str) -> ConfigError:
    return ConfigError("trial", str(trial_number), f"is being trained by another process (study {study}, run "
                       f"directory {run_dir}, locked); wait for it to end, or see `tianfeng runs`")


def is_trained_now(run_dir: Path) -> bool | None:
    """Whether a process holds `run_dir`'s training lock; None when this machine cannot tell (the
    directory or its lock file is not here: another machine's disk, or a run older than the lock)."""
    try:
        handle = open(run_dir / LOCK_NAME)  # noqa: SIM115 - closed below, after the probe
    except OSError:
        return None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


def with_live_status(record: dict) -> dict:
    """The run's record, `interrupted` where it says `running` but no process trains it here."""
    if record["status"] == RunRecordStatus.RUNNING and is_trained_now(Path(record["run_dir"])) is False:
        return record | {"status": RunRecordStatus.INTERRUPTED}
    return record
