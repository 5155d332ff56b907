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

Budget. With a `limit` set, a worker about to start a trial (a fresh one, or an enqueued one)
first counts the study's trials, and stops with BudgetReached instead of starting one too many.
Two workers counting at once could each start one, so the count and the start are one step
under a lock: the file lock for SQLite, and for PostgreSQL (workers on many nodes) an advisory
lock of the study held by the database server. Other databases count without a lock.
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
from sqlalchemy import text
from sqlalchemy.engine import make_url

from tianfeng.hpo.optuna_private import trial_id
from tianfeng.hpo.trial_attrs import TrialKey
from tianfeng.terminal.interrupts import deferred_interrupt

ADVISORY_SPACE = 0x7466  # the first key of PostgreSQL's advisory locks that start trials ("tf")


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
    """RDBStorage whose trials, as this process starts them, say which worker runs them, and
    (with a `limit`) start only within the budget."""

    _budget: tuple[int, Callable[[list[FrozenTrial], int | None], bool]] | None = None

    def limit(self, study_name: str, may_start: Callable[[list[FrozenTrial], int | None], bool]) -> None:
        """A search worker's budget: `may_start(all trials of the study, number)` says whether the
        queued trial `number` (or a fresh one, for None) may start."""
        self._budget = (self.get_study_id_from_name(study_name), may_start)

    @contextlib.contextmanager
    def _starting(self, trial_id: int | None = None) -> Iterator[bool]:
        """Around a trial's start (a queued trial's id, or None for a fresh one): yields whether
        it may start, counted under the lock that makes the count and the start one step."""
        if self._budget is None:
            yield True
            return
        study_id, may_start = self._budget
        with self._exclusive(study_id):
            trials = self.get_all_trials(study_id, deepcopy=False)
            number = None if trial_id is None else next((t.number for t in trials if t._trial_id == trial_id), None)
            yield may_start(trials, number)

    @contextlib.contextmanager
    def _exclusive(self, study_id: int) -> Iterator[None]:
        if self.engine.dialect.name != "postgresql":
            yield
            return
        with self.engine.connect() as connection:  # the lock is the session's: held on this connection
            connection.execute(text("SELECT pg_advisory_lock(:space, :study)"), {"space": ADVISORY_SPACE, "study": study_id})
            try:
                yield
            finally:
                connection.execute(text("SELECT pg_advisory_unlock(:space, :study)"), {"space": ADVISORY_SPACE, "study": study_id})

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
        with deferred_interrupt(), self._starting(trial_id) as may_start:
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

    @contextlib.contextmanager
    def _starting(self, trial_id: int | None = None) -> Iterator[bool]:
        with open(self._lock_path, "a") as lock:  # always: a queued trial is taken by one worker
            fcntl.flock(lock, fcntl.LOCK_EX)
            with super()._starting(trial_id) as may_start:
                yield may_start

    @contextlib.contextmanager
    def _exclusive(self, study_id: int) -> Iterator[None]:
        yield  # the file lock is held already


def rdb_storage(url: str, **kwargs) -> RDBStorage:
    """The marking storage, or for a SQLite file the locked one."""
    return LockedSQLiteStorage(url, **kwargs) if url.startswith("sqlite") else MarkingStorage(url, **kwargs)
