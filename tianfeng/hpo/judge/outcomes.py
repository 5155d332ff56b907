"""What became of a trial, as users are shown it. Optuna has one FAIL state for two different
things: a trial whose recipe raised an error (it counts against the budget and is not retried)
and one cut short by Ctrl-C, a killed worker or a lost heartbeat (queued again with its
checkpoint: its continuation is a later trial). Every count and table tells them apart."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from enum import StrEnum

from optuna.trial import FrozenTrial, TrialState

from tianfeng.core.states import State
from tianfeng.hpo.trial_attrs import TrialKey, TrialStatus


class Outcome(StrEnum):
    """The words are the trial statuses' (and so the engine's and the promoted runs'): one
    vocabulary for how a trial or run ended; `waiting` is a queued trial's alone."""
    COMPLETED = TrialStatus.COMPLETED.value
    PRUNED = TrialStatus.PRUNED.value
    FAILED = TrialStatus.FAILED.value
    INTERRUPTED = TrialStatus.INTERRUPTED.value
    RUNNING = TrialStatus.RUNNING.value
    WAITING = State.WAITING.value


_BY_STATE = {TrialState.COMPLETE: Outcome.COMPLETED, TrialState.PRUNED: Outcome.PRUNED,
             TrialState.RUNNING: Outcome.RUNNING, TrialState.WAITING: Outcome.WAITING}

# the colour of each outcome in the report's figures
COLOURS = {Outcome.COMPLETED: "#1a7f37", Outcome.PRUNED: "#c4a000", Outcome.FAILED: "#cf222e",
           Outcome.INTERRUPTED: "#8250df", Outcome.RUNNING: "#0969da", Outcome.WAITING: "#6e7781"}


def outcome(trial: FrozenTrial) -> Outcome:
    if trial.state == TrialState.FAIL:
        return Outcome.FAILED if trial.user_attrs.get(TrialKey.STATUS) == TrialStatus.FAILED else Outcome.INTERRUPTED
    return _BY_STATE[trial.state]


def count_outcomes(trials: Iterable[FrozenTrial]) -> Counter[Outcome]:
    counts = Counter({o: 0 for o in Outcome})
    counts.update(outcome(t) for t in trials)
    return counts


def outcomes_text(counts: Counter[Outcome]) -> str:
    """`7 completed, 1 pruned, 0 failed, 1 interrupted`: the first three always, the others when
    there are any; the numbers add up to the trials counted."""
    always = (Outcome.COMPLETED, Outcome.PRUNED, Outcome.FAILED)
    parts = [f"{counts[o]} {o}" for o in Outcome if o in always or counts[o]]
    return ", ".join(parts)
