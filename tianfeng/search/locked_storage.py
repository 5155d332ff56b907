"""Optuna's RDB storage for SQLite with a trial's move from WAITING to RUNNING made atomic
across processes.

Optuna takes a waiting (enqueued) trial by reading it with SELECT ... FOR UPDATE and setting
RUNNING when it was still WAITING. SQLite has no row locks, so two local workers can both read
WAITING and both take the trial: one then fails with "Cannot tell a COMPLETE trial" and its
process dies (seen here with `--workers 2` on the priors every search enqueues). An exclusive
file lock beside the database around that read-and-set makes it one step for every process on
this machine, which is the only place a SQLite file is shared.
"""

from __future__ import annotations

import fcntl
from collections.abc import Sequence
from pathlib import Path

from optuna.storages import RDBStorage
from optuna.trial import TrialState
from sqlalchemy.engine import make_url


class LockedSQLiteStorage(RDBStorage):
    def __init__(self, url: str, **kwargs) -> None:
        super().__init__(url, **kwargs)
        self._lock_path = str(Path(make_url(url).database).resolve()) + ".lock"

    def set_trial_state_values(self, trial_id: int, state: TrialState,
                               values: Sequence[float] | None = None) -> bool:
        if state != TrialState.RUNNING:
            return super().set_trial_state_values(trial_id, state, values)
        with open(self._lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            return super().set_trial_state_values(trial_id, state, values)


def rdb_storage(url: str, **kwargs) -> RDBStorage:
    """RDBStorage, or for a SQLite file the locked one."""
    return LockedSQLiteStorage(url, **kwargs) if url.startswith("sqlite") else RDBStorage(url, **kwargs)
