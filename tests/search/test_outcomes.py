"""A trial's outcome as users see it: Optuna's FAIL split into failed (an error) and interrupted."""

from __future__ import annotations

import optuna
from optuna.trial import TrialState, create_trial

from tianfeng.hpo.judge.outcomes import Outcome, count_outcomes, outcome, outcomes_text


def _trial(state: TrialState, **attrs) -> optuna.trial.FrozenTrial:
    return create_trial(state=state, value=1.0 if state == TrialState.COMPLETE else None, user_attrs=attrs)


def test_fail_is_failed_only_when_the_recipe_raised() -> None:
    assert outcome(_trial(TrialState.FAIL, status="failed")) == Outcome.FAILED
    assert outcome(_trial(TrialState.FAIL, status="interrupted")) == Outcome.INTERRUPTED
    assert outcome(_trial(TrialState.FAIL)) == Outcome.INTERRUPTED  # a lost heartbeat: retried, not an error
    assert outcome(_trial(TrialState.PRUNED, status="diverged")) == Outcome.PRUNED


def test_the_counts_add_up_to_the_trials_and_name_only_what_happened() -> None:
    trials = [_trial(TrialState.COMPLETE)] * 7 + [_trial(TrialState.PRUNED), _trial(TrialState.FAIL, status="interrupted")]
    counts = count_outcomes(trials)
    assert sum(counts.values()) == len(trials)
    assert outcomes_text(counts) == "7 completed, 1 pruned, 0 failed, 1 interrupted"
    assert "running" not in outcomes_text(count_outcomes(trials[:1]))


def test_a_word_for_how_a_trial_or_run_ended_means_one_thing_everywhere() -> None:
    """Bug: a completed trial shown as "complete" while its status, the engine's and the promoted
    run's say "completed" (a script filtering on one word misses the others)."""
    from tianfeng.core.states import RunStatus
    from tianfeng.hpo.trial_attrs import TrialStatus
    from tianfeng.storage.runs import RunRecordStatus

    assert outcome(_trial(TrialState.COMPLETE)) == TrialStatus.COMPLETED == RunStatus.COMPLETED == RunRecordStatus.COMPLETED
    vocabularies = (Outcome, TrialStatus, RunStatus, RunRecordStatus)
    for words in vocabularies:
        for other in vocabularies:
            shared = {w.name for w in words} & {w.name for w in other}
            assert all(words[name].value == other[name].value for name in shared), (words, other)
