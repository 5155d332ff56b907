"""What a search has spent and when it stops: trials and epochs against the budget, and the
same error failing trial after trial."""

from __future__ import annotations

import logging

import optuna
from optuna.trial import TrialState

from tianfeng.defaults import FAILURE_LIMIT
from tianfeng.hpo.judge.outcomes import Outcome, outcome
from tianfeng.hpo.judge.scores import epochs_reported
from tianfeng.hpo.spec import SearchSpec
from tianfeng.hpo.trial_attrs import TrialKey

log = logging.getLogger("tianfeng.search")


FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
# 2: priors must be complete and the min_steps guard applies; a study stored without this (made
# before them) re-reads its space as it ran: partial priors allowed, no guard
def finished_count(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=FINISHED))


def failed(trial: optuna.trial.FrozenTrial) -> bool:
    """A trial that raised an error (not one cut by Ctrl-C or a dead worker: those are retried)."""
    return outcome(trial) == Outcome.FAILED


def counted(trials: optuna.Study | list[optuna.trial.FrozenTrial]) -> list[optuna.trial.FrozenTrial]:
    """The trials (of a study) the budget counts: finished, running, and failed with an error."""
    if isinstance(trials, optuna.Study):
        trials = trials.get_trials(deepcopy=False)
    return [t for t in trials if t.state in (*FINISHED, TrialState.RUNNING) or failed(t)]


def repeated_failure(study: optuna.Study, limit: int = FAILURE_LIMIT) -> str | None:
    """The error, when the last `limit` trials to end all failed with it (the cause is not the
    recipe, e.g. a missing data directory: more trials would fail the same way)."""
    ended = [t for t in study.get_trials(deepcopy=False) if t.state in FINISHED or failed(t)]
    last = sorted(ended, key=lambda t: t.datetime_complete or t.datetime_start)[-limit:]
    errors = {t.user_attrs.get(TrialKey.ERROR, "") for t in last}
    if len(last) == limit and all(failed(t) for t in last) and len(errors) == 1:
        return errors.pop() or "an unknown error"
    return None


class SearchFailed(RuntimeError):
    pass


class StopOnRepeatedFailure:
    def __init__(self, limit: int) -> None:
        self.limit = limit

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        if trial.state == TrialState.FAIL and repeated_failure(study, self.limit):
            study.stop()


def raise_if_failing(spec: SearchSpec, study: optuna.Study) -> None:
    error = repeated_failure(study, spec.options.failure_limit)
    if error:
        raise SearchFailed(f"the last {spec.options.failure_limit} trials of study {spec.study} failed with: {error}; "
                           "completed trials are kept: fix the cause and continue with --resume")


RETRIES = 2  # how often a trial whose worker died is queued again (the heartbeat's retry callback)


def pending(trials: list[optuna.trial.FrozenTrial]) -> list[optuna.trial.FrozenTrial]:
    """The trials still to run: those waiting in the queue (a prior, the continuation of a cut
    trial), and those cut (Ctrl-C, a dead worker) whose continuation is owed but not yet queued.
    The budget holds room for them: without it, a worker could start a fresh trial in the moment
    between a dead worker's trial failing and its continuation being queued, and the
    continuation would then find the budget spent."""
    retried = {n for t in trials for n in (t.system_attrs.get("failed_trial"), *t.system_attrs.get("retry_history", ()))}
    return [t for t in trials if t.state == TrialState.WAITING or (
        t.state == TrialState.FAIL and not failed(t) and t.number not in retried
        and len(t.system_attrs.get("retry_history", ())) < RETRIES)]


class Budget:
    """Stops a worker once the study holds `trials` finished, running, failed or pending trials
    (all workers), or once another full trial of `trial_epochs` would take the study past `epochs`
    training epochs. Pending trials hold their room: a queued one starts in its turn, a fresh one
    only after them."""

    def __init__(self, trials: int, epochs: int | None = None, trial_epochs: int = 1) -> None:
        self.trials, self.epochs, self.trial_epochs = trials, epochs, trial_epochs

    def exhausted(self, study: optuna.Study) -> bool:
        return self.exhausted_by(study.get_trials(deepcopy=False))

    def exhausted_by(self, all_trials: list[optuna.trial.FrozenTrial]) -> bool:
        """No trial may start: neither a fresh one nor the first in the queue (the one with the
        fewest ahead of it: if it may not start, no later one may)."""
        first = min((t.number for t in all_trials if t.state == TrialState.WAITING), default=None)
        return not self.may_start(all_trials) and (first is None or not self.may_start(all_trials, first))

    def may_start(self, all_trials: list[optuna.trial.FrozenTrial], waiting: int | None = None) -> bool:
        """Whether the trial numbered `waiting` (queued), or a fresh one (None), fits the budget:
        room is held for the trials owed and for those ahead of it in the queue."""
        ahead = [t for t in pending(all_trials)
                 if waiting is None or t.state != TrialState.WAITING or t.number < waiting]
        held = counted(all_trials) + ahead
        if len(held) >= self.trials:
            return False
        return self.epochs is None or epochs_spent(held, self.trial_epochs) + self.trial_epochs <= self.epochs

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        if self.exhausted(study):
            study.stop()


def epochs_spent(trials: list[optuna.trial.FrozenTrial], trial_epochs: int) -> int:
    """Epochs trained by ended trials, plus a full trial's for each one running or pending."""
    return sum(epochs_reported(t) if t.state in FINISHED or failed(t) else trial_epochs for t in trials)
