"""No trial is judged while its own warm-up is still ramping its learning rate.

During warm-up a recipe's accuracy says more about the warm-up's length than about the recipe:
a trial that warms up over three epochs trails one that warms up over one at every epoch before
the third, whatever either ends at. A trial's warm-up is its own (a searched value, compressed
with the rung's epochs), so no rung placed for the study as a whole is past everyone's; this
wrapper asks the study's pruner about a trial only once that trial's warm-up is over. A rung the
trial passed meanwhile is judged then, on its value at that later epoch: the doubt goes to the
trial.
"""

from __future__ import annotations

import optuna

from tianfeng.hpo.trial_attrs import TrialKey


def warmup_epochs(trial: optuna.trial.FrozenTrial) -> float:
    """The trial's warm-up in its own (rung) epochs, from the config it recorded; 0 if none."""
    schedule = trial.user_attrs.get(TrialKey.CONFIG, {}).get("schedule", {})
    return float(schedule.get("warmup_epochs") or 0.0)


class PastWarmup(optuna.pruners.BasePruner):
    """`inner`'s judgement, asked only after the trial's warm-up epochs."""

    def __init__(self, inner: optuna.pruners.BasePruner) -> None:
        self.inner = inner

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        if trial.last_step is None or trial.last_step <= warmup_epochs(trial):
            return False
        return self.inner.prune(study, trial)
