"""Following a study as its workers spend the budget (`tianfeng status --follow`): a line each
time its trial counts or best trial change, until it is over. A study whose workers a
scheduler runs (`search --launcher slurm`) is over when that job has ended; one searched here,
when nothing runs or waits and either its budget (the latest start's `--trials`) is spent or
nothing has changed for `QUIET_S` (a search stopped by repeated failures, or by Ctrl-C)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator

import optuna

from tianfeng.core.states import JobStatus
from tianfeng.hpo.judge.outcomes import Outcome, outcome
from tianfeng.hpo.judge.scores import maximizing, score
from tianfeng.launch.launchers import scheduler
from tianfeng.storage.study_attrs import StudyKey

_LIVE = (Outcome.RUNNING, Outcome.WAITING)
_SPENT = (Outcome.COMPLETED, Outcome.PRUNED, Outcome.FAILED)  # what the budget counts once they end
QUIET_S = 60.0  # a search here with nothing running, unchanged this long, has stopped


def snapshot(study: optuna.Study, job_state: str | None) -> dict:
    """The study now: trials by outcome, the best scored trial, the workers' job state if any."""
    trials = study.get_trials(deepcopy=False)
    counts = Counter(outcome(t) for t in trials)
    scored = [t for t in trials if score(t) is not None]
    pick = max if maximizing(study) else min
    best = pick(scored, key=score) if scored else None
    return {"study": study.study_name, "trials": len(trials), "outcomes": {str(k): v for k, v in counts.items()},
            "best_trial": best.number if best else None, "best_value": score(best) if best else None,
            "workers_job": job_state}


def follow(load: Callable[[], optuna.Study], interval_s: float) -> Iterator[dict]:
    """A snapshot whenever it changes, the last one when the study is over."""
    last, changed_at = None, time.monotonic()
    while True:
        study = load()
        job = study.user_attrs.get(StudyKey.WORKERS_JOB)
        state = scheduler(job["launcher"]).state(job["job"]) if job else None
        now = snapshot(study, state.state if state else None)
        if now != last:
            yield now
            changed_at = time.monotonic()
        live = sum(now["outcomes"].get(str(o), 0) for o in _LIVE)
        budget = study.user_attrs.get(StudyKey.TRIAL_BUDGET)
        spent = sum(now["outcomes"].get(str(o), 0) for o in _SPENT)
        if state is not None:
            over = state.ended or state.state == JobStatus.UNKNOWN
        else:
            over = live == 0 and ((budget is not None and spent >= budget)
                                  or time.monotonic() - changed_at >= QUIET_S)
        if over:
            return
        last = now
        time.sleep(interval_s)
