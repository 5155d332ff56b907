"""`tianfeng search --promote leader`: whenever a proxy trial takes the lead, its recipe is trained
at full fidelity (as `tianfeng promote` trains it) while the search waits, so the study has a
full-fidelity result early and the search ends with its leader's full run.

Nothing ranked below a promoted trial is promoted: a leader that scores less at full fidelity
than its proxy said does not send the runner-up after it. The first promotion waits for
`FIRST_AFTER` complete proxy trials, so the leader is the best of a few (ASHA's top third)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial

from tianfeng.hpo.scores import best_trial, completed
from tianfeng.promotion.run import promote
from tianfeng.store import RunRecordStatus, RunStore

log = logging.getLogger("tianfeng.promote")
FIRST_AFTER = 3  # complete proxy trials before the first promotion: the default pruner's reduction factor
DONE = (RunRecordStatus.COMPLETED, RunRecordStatus.DIVERGED)


def proxy_leader(study: optuna.Study, first_after: int = FIRST_AFTER) -> FrozenTrial | None:
    """The study's best trial (time-to-target: the fastest that reached the target), once
    `first_after` trials are complete."""
    return best_trial(study) if len(completed(study)) >= first_after else None


class LeaderPromotion:
    """What the search runs between trials (`run_search`'s `between_trials`): the current
    proxy leader's full run, once per trial. A leader promoted before (an earlier run of the
    same search, then resumed) is not trained again; one whose run was cut continues it from its
    checkpoint. A promotion that fails is logged and the search goes on."""

    def __init__(self, storage: str, study_name: str, runs_dir: Path) -> None:
        self.storage, self.study_name, self.runs_dir = storage, study_name, runs_dir
        self.promoted: set[int] = {r["trial_number"] for r in RunStore(storage).runs(study_name)
                                   if r["kind"] == "promote" and r["status"] in DONE}

    def __call__(self, study: optuna.Study) -> Callable[[], None] | None:
        leader = proxy_leader(study)
        if leader is None or leader.number in self.promoted:
            return None
        self.promoted.add(leader.number)
        return lambda: self._promote(leader.number)

    def _promote(self, number: int) -> None:
        log.info("trial %d leads the search: training it at full fidelity while the search waits", number)
        try:  # the run's record in the store is its result
            promote(self.storage, self.study_name, number, batch_size=None, overrides=[], runs_dir=self.runs_dir,
                    dry_run=False)
        except Exception as error:  # noqa: BLE001 - one failed full run does not end the search
            log.warning("promotion of trial %d failed: %s: %s; the search goes on", number, type(error).__name__,
                        str(error).strip().splitlines()[0] if str(error).strip() else "")
