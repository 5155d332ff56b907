"""A worker whose budget is spent stays while other workers' trials run. Optuna fails a trial
whose worker died (no heartbeat for the grace period) only when some worker starts a trial; once
the budget is spent none does, so without a watcher a killed worker's trial would stay RUNNING
for ever and the budget would never be spent. The watcher fails it, Optuna's stale-trial callback
queues it again with its parameters and run directory, and this worker continues it from its
checkpoint."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime

import optuna
from optuna.trial import TrialState

from tianfeng.hpo.optuna_private import grace_period_s, heartbeating_trials
from tianfeng.terminal.interrupts import raise_if_interrupted

POLL_S = 1.0  # how soon a worker leaves after the last trial ends


def others_running(study: optuna.Study) -> set[int]:
    """The running trials that can go stale: those with a heartbeat, and those whose first
    heartbeat may still come (started less than the grace period ago: a worker takes a queued
    trial a moment before its heartbeat starts, and a watcher that left then would leave a retry
    unwatched). A trial whose worker died before its first heartbeat never goes stale, so it is
    waited for only that long."""
    beating = heartbeating_trials(study)
    grace_s = grace_period_s(study)
    # Optuna stamps a trial's start with its worker's clock: one a little ahead of this one's
    # gives a start in the future, and one far off any time at all, so only a start within the
    # grace either way counts
    now = datetime.now()
    starting = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
                if t.number not in beating and t.datetime_start is not None
                and abs((now - t.datetime_start).total_seconds()) < grace_s}
    return beating | starting


def watch_until_others_end(study: optuna.Study, run_queued: Callable[[], None], *, deadline: float | None = None,
                           idle: Callable[[optuna.Study], None] | None = None, poll_s: float = POLL_S) -> None:
    """Return once no other worker runs a trial (or at `deadline`, a `time.monotonic()` value).
    Meanwhile, stale trials are failed and queued again, and `run_queued` runs what waits in the
    queue; `idle` is called at each poll."""
    while others_running(study) and (deadline is None or time.monotonic() < deadline):
        time.sleep(poll_s)
        raise_if_interrupted()
        if idle:
            idle(study)
        optuna.storages.fail_stale_trials(study)
        if study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            run_queued()
