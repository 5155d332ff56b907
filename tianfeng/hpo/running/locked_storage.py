"""Optuna's RDB storage with a trial's start made whole: the trial is marked with the process
that starts it, and for SQLite the move from WAITING to RUNNING is atomic across processes.

Marking. A Ctrl-C can land while Optuna is still asking for a trial: after the trial is RUNNING
in the database, before the objective runs and before its heartbeat exists. Optuna only fails
RUNNING trials whose heartbeat went stale, so such a trial would stay RUNNING for ever and
count against the budget of every later `--resume`. Each trial this process starts is marked
with its `worker` (host:pid) in the same step, with Ctrl-C held back until both writes are
made; the requeue after Ctrl-C then finds and retries it.

Locking. Optuna takes a waiting (enqueued) trial by reading it with SELECT ... FOR UPDATE and
setting RUNNING when it was still WAITING. SQLite has no row locks, so two local workers can
both read WAITING and both take the trial: one then fails with "Cannot tell a COMPLETE trial"
and its process dies (seen with `--workers 2` on the priors every search enqueues). An
exclusive file lock beside the database around that read-and-set makes it one step for every
process on this machine, which is the only place a SQLite file is shared.

The same lock makes the trial budget exact for local workers: with a `limit` set, a worker
about to start a trial (a fresh one, or an enqueued one) first counts the study's trials under
the lock, and stops with BudgetReached instead of starting one too many (two workers checking
the budget at once could each start one).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial, TrialState
from sqlalchemy.engine import make_url

from tianfeng.hpo.optuna_private import trial_id
from tianfeng.hpo.trial_attrs import TrialKey
from tianfeng.terminal.interrupts import deferred_interrupt


def worker_id(pid: int | None = None) -> str:
    """`host:pid`: the `worker` user attribute of the trials a process runs."""
    return f"{socket.gethostname()}:{os.getpid() if pid is None else pid}"


class BudgetReached(Exception):
    """The study holds its budget of trials: this worker starts no more."""


@contextlib.contextmanager
def interrupts_through_optuna() -> Iterator[None]:
    """Around `study.optimize`: a Ctrl-C held back while a trial's end is written (below) is raised
    inside Optuna's trial loop, where Optuna 5.0's cleanup reads a result only its `except
    Exception` sets and raises UnboundLocalError instead. The trial's end is written whole; what
    the caller gets is the Ctrl-C, not a traceback from inside Optuna."""
    try:
        yield
    except UnboundLocalError as error:
        if isinstance(error.__context__, KeyboardInterrupt):
            raise KeyboardInterrupt from None
        raise


class MarkingStorage(RDBStorage):
    """RDBStorage whose trials, as this process starts them, say which worker runs them."""

    @contextlib.contextmanager
    def _starting(self) -> Iterator[bool]:
        """Around a trial's start: yields whether a trial may start."""
        yield True

    def _create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> FrozenTrial:
        # the private method (optuna_private.CREATE_NEW_TRIAL): Optuna's cache calls it for every new trial
        if template_trial is not None and template_trial.state != TrialState.RUNNING:
            return super()._create_new_trial(study_id, template_trial)  # enqueued or copied, not started
        with deferred_interrupt(), self._starting() as may_start:
            if not may_start:
                raise BudgetReached
            trial = super()._create_new_trial(study_id, template_trial)
            self._mark(trial_id(trial))
        trial.user_attrs[TrialKey.WORKER] = worker_id()
        return trial

    def set_trial_state_values(self, trial_id: int, state: TrialState,
                               values: Sequence[float] | None = None) -> bool:
        if state != TrialState.RUNNING:
            with deferred_interrupt():  # a trial's end (state and values) is written whole
                return super().set_trial_state_values(trial_id, state, values)
        with deferred_interrupt(), self._starting() as may_start:
            if not may_start:
                return False  # left waiting; the worker then asks for a new trial and stops
            if not super().set_trial_state_values(trial_id, state, values):
                return False
            self._mark(trial_id)
            return True

    def _mark(self, trial_id: int) -> None:
        self.set_trial_user_attr(trial_id, TrialKey.WORKER, worker_id())


class LockedSQLiteStorage(MarkingStorage):
    def __init__(self, url: str, **kwargs) -> None:
        super().__init__(url, **kwargs)
        self._lock_path = str(Path(make_url(url).database).resolve()) + ".lock"
        self._budget: tuple[int, Callable[[list[FrozenTrial]], bool]] | None = None

    def limit(self, study_name: str, exhausted: Callable[[list[FrozenTrial]], bool]) -> None:
        """A search worker's budget: `exhausted(all trials of the study)` says when to stop."""
        self._budget = (self.get_study_id_from_name(study_name), exhausted)

    @contextlib.contextmanager
    def _starting(self) -> Iterator[bool]:
        with open(self._lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield self._budget_left()

    def _budget_left(self) -> bool:
        if self._budget is None:
            return True
        study_id, exhausted = self._budget
        return not exhausted(self.get_all_trials(study_id, deepcopy=False))


def rdb_storage(url: str, **kwargs) -> RDBStorage:
    """The marking storage, or for a SQLite file the locked one."""
    return LockedSQLiteStorage(url, **kwargs) if url.startswith("sqlite") else MarkingStorage(url, **kwargs)
