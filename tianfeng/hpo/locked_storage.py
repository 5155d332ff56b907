"""Optuna's RDB storage for SQLite with a trial's move from WAITING to RUNNING made atomic
across processes.

Optuna takes a waiting (enqueued) trial by reading it with SELECT ... FOR UPDATE and setting
RUNNING when it was still WAITING. SQLite has no row locks, so two local workers can both read
WAITING and both take the trial: one then fails with "Cannot tell a COMPLETE trial" and its
process dies (seen here with `--workers 2` on the priors every search enqueues). An exclusive
file lock beside the database around that read-and-set makes it one step for every process on
this machine, which is the only place a SQLite file is shared.

The same lock makes the trial budget exact for local workers: with a `limit` set, a worker
about to start a trial (a fresh one, or an enqueued one) first counts the study's trials under
the lock, and stops with BudgetReached instead of starting one too many (two workers checking
the budget at once could each start one).
"""

from __future__ import annotations

import fcntl
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from pathlib import Path

from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial, TrialState
from sqlalchemy.engine import make_url


class BudgetReached(Exception):
    """The study holds its budget of trials: this worker starts no more."""


class LockedSQLiteStorage(RDBStorage):
    def __init__(self, url: str, **kwargs) -> None:
        super().__init__(url, **kwargs)
        self._lock_path = str(Path(make_url(url).database).resolve()) + ".lock"
        self._budget: tuple[int, Callable[[list[FrozenTrial]], bool]] | None = None

    @contextmanager
    def _locked(self):
        with open(self._lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def limit(self, study_name: str, exhausted: Callable[[list[FrozenTrial]], bool]) -> None:
        """A search worker's budget: `exhausted(all trials of the study)` says when to stop."""
        self._budget = (self.get_study_id_from_name(study_name), exhausted)

    def _budget_left(self) -> bool:
        if self._budget is None:
            return True
        study_id, exhausted = self._budget
        return not exhausted(self.get_all_trials(study_id, deepcopy=False))

    def _create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> FrozenTrial:
        # the private method: Optuna's cache in front of every study's storage calls this one
        if template_trial is not None and template_trial.state != TrialState.RUNNING:
            return super()._create_new_trial(study_id, template_trial)  # enqueued or copied, not started
        with self._locked():
            if not self._budget_left():
                raise BudgetReached
            return super()._create_new_trial(study_id, template_trial)

    def set_trial_state_values(self, trial_id: int, state: TrialState,
                               values: Sequence[float] | None = None) -> bool:
        if state != TrialState.RUNNING:
            return super().set_trial_state_values(trial_id, state, values)
        with self._locked():
            if not self._budget_left():
                return False  # left waiting; the worker then asks for a new trial and stops
            return super().set_trial_state_values(trial_id, state, values)


def rdb_storage(url: str, **kwargs) -> RDBStorage:
    """RDBStorage, or for a SQLite file the locked one."""
    return LockedSQLiteStorage(url, **kwargs) if url.startswith("sqlite") else RDBStorage(url, **kwargs)
