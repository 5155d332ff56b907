"""`tianfeng search --promote leader`: whenever a proxy trial takes the lead, its recipe is trained
at full fidelity (as `tianfeng promote` trains it) while the search waits, so the study has a
full-fidelity result early and the search ends with its leader's full run.

Nothing ranked below a promoted trial is promoted: a leader that scores less at full fidelity
than its proxy said does not send the runner-up after it. The first promotion waits for
`FIRST_AFTER` complete proxy trials, so the leader is the best of a few (ASHA's top third).

`--promote balanced` keeps that timing but gives full runs at most half of the search's time: a
new leader's full run waits until the search has run proxies at least as long as its full runs
will have trained once this one ends (the last full run's time, or before the first one, the
leader's proxy run scaled to its whole run: `full_run_estimate`). The leader may change while it
waits, and the search tries many recipes before its first full run rather than training the best
of the first few."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import optuna
from optuna.trial import FrozenTrial

from tianfeng.core.cores import usable_cores
from tianfeng.defaults import LEADER_AFTER
from tianfeng.hpo.judge.scores import best_among, completed
from tianfeng.hpo.trial_attrs import TrialKey
from tianfeng.promotion.options import PromoteOptions
from tianfeng.promotion.run import promote
from tianfeng.storage.runs import RunRecordStatus, RunStore

if TYPE_CHECKING:
    from tianfeng.hpo.space.read import SearchSpace

log = logging.getLogger("tianfeng.promote")
FIRST_AFTER = LEADER_AFTER
DONE = (RunRecordStatus.COMPLETED, RunRecordStatus.DIVERGED)


def _last_took(runs: list[dict]) -> float | None:
    """The training time of the last completed full run in `runs` (its last epoch's elapsed_s)."""
    timed = [r for r in runs if r["kind"] == "promote" and r["status"] == RunRecordStatus.COMPLETED
             and r["epochs"] and r["epochs"][-1].get("elapsed_s") is not None]
    return max(timed, key=lambda r: (r["updated"], r["id"]))["epochs"][-1]["elapsed_s"] if timed else None


def whole_run_s(took_s: float, trained: int, epochs: int, threads: int, cores: int) -> float:
    """Seconds a run of `epochs` epochs would take on `cores` threads, from one that trained
    `trained` of them in `took_s` on `threads` threads: its time per epoch, scaled to the whole
    run and from the threads it had (more threads are taken to be proportionally faster)."""
    return took_s / trained * epochs * min(1.0, threads / max(1, cores))


def full_run_estimate(trial: FrozenTrial, cores: int, space: SearchSpace | None = None) -> float | None:
    """Seconds a trial's full run would take on `cores` threads: its own run's time scaled to all
    its epochs and to `cores` (`whole_run_s`), then, for a proxy trial of `space`, from the
    proxy's run to the target rung's (`full_run_ratio`); None without the figures."""
    config = trial.user_attrs.get(TrialKey.CONFIG) or {}
    epochs = [p.get("epochs") for p in config.get("phases", [])]
    # the epochs it reported: to Optuna (accuracy), or as its curve (pareto, time-to-target)
    trained = len(trial.intermediate_values) or len(trial.user_attrs.get(TrialKey.CURVE) or {})
    if trial.duration is None or not trained or not epochs or not all(isinstance(e, int) for e in epochs):
        return None
    threads = trial.user_attrs.get(TrialKey.CORES) or cores
    own = whole_run_s(trial.duration.total_seconds(), trained, sum(epochs), threads, cores)
    rung, values = trial.user_attrs.get(TrialKey.FIDELITY), trial.user_attrs.get(TrialKey.VALUES)
    if space is None or rung in (None, "target") or not isinstance(values, dict):
        return own
    from tianfeng.core.errors import ConfigError
    from tianfeng.core.run_config import config_from_dict
    from tianfeng.hpo.space.materialize import build_config
    from tianfeng.promotion.full_run_time import full_run_ratio

    try:
        return own * full_run_ratio(config_from_dict(config), build_config(space, values, "target"))
    except ConfigError as error:  # values the space no longer builds (a resumed study's edited space)
        log.warning("trial %d: its full run is not estimated from its config (%s); taking its own run's time",
                    trial.number, str(error).splitlines()[0])
        return own


def proxy_leader(study: optuna.Study, first_after: int = FIRST_AFTER) -> FrozenTrial | None:
    """The study's best trial (time-to-target: the fastest that reached the target), once
    `first_after` trials are complete."""
    trials = completed(study)
    return best_among(study, trials) if len(trials) >= first_after else None


def balanced_wait_over(searched_s: float, full_s: float, expected_s: float | None) -> bool:
    """`--promote balanced`: whether a leader's full run may start, once the search has run
    proxies for `searched_s` and trained full runs for `full_s`: when the proxies have run at
    least as long as the full runs will have taken with this one (`expected_s`; unknown counts as
    nothing)."""
    return searched_s >= full_s + (expected_s or 0.0)


class LeaderPromotion:
    """What the search runs between trials (`run_search`'s `between_trials`): the current
    proxy leader's full run, once per trial. A leader promoted before (an earlier run of the
    same search, then resumed) is not trained again; one whose run was cut continues it from its
    checkpoint. A promotion that fails is logged and the search goes on. With `balanced`
    (`--promote balanced`) a leader's full run waits until the search's proxy runs so far
    (`clock`'s seconds since it began, less its full runs) are at least as long as its full runs
    will have taken with this one (the last full run's time, or `full_run_estimate` of the
    leader in `space` on `cores` threads, by default every usable core)."""

    def __init__(self, storage: str, study_name: str, runs_dir: Path, space: SearchSpace | None = None,
                 clock: Callable[[], float] = time.monotonic, balanced: bool = False, cores: int | None = None) -> None:
        self.storage, self.study_name, self.runs_dir, self.space = storage, study_name, runs_dir, space
        self.store = RunStore(storage)
        runs = self.store.runs(study_name)
        self.promoted: set[int] = {r["trial_number"] for r in runs if r["kind"] == "promote" and r["status"] in DONE}
        # after a resume: the last completed full run's training time, the search counted from now
        self.clock, self.last_took = clock, _last_took(runs)
        self.balanced, self.cores = balanced, cores or usable_cores()
        self.began, self.full_s = clock(), 0.0  # this search's start and its full runs' seconds
        self.waiting: int | None = None  # the leader last logged as waiting for search time
        self.estimates: dict[int, float | None] = {}  # each leader's full run estimated once, by trial number

    def __call__(self, study: optuna.Study) -> Callable[[], None] | None:
        leader = proxy_leader(study)
        if leader is None or leader.number in self.promoted:
            return None
        if self.balanced and not self._searched_enough(leader):
            return None
        self.promoted.add(leader.number)
        return lambda: self._promote_timed(leader.number)

    def finish(self, study: optuna.Study) -> None:
        """After the search's last trial (`balanced`): train the leader still waiting for search
        time, with every core, so that the search ends with its leader's full run as
        `--promote leader`'s does."""
        if not self.balanced:
            return
        import torch

        self.balanced = False
        work, threads = self(study), torch.get_num_threads()
        if work is None:
            return
        torch.set_num_threads(self.cores)
        try:
            work()
        finally:
            torch.set_num_threads(threads)

    def _searched_enough(self, leader: FrozenTrial) -> bool:
        """Whether the search has run proxies at least as long as its full runs will have trained
        once `leader`'s ends (`--promote balanced`); logs a leader that waits, once."""
        searched = self.clock() - self.began - self.full_s
        if self.last_took is None and leader.number not in self.estimates:  # a complete trial's figures stay
            self.estimates[leader.number] = full_run_estimate(leader, self.cores, self.space)
        expected = self.last_took if self.last_took is not None else self.estimates[leader.number]
        if balanced_wait_over(searched, self.full_s, expected):
            return True
        needed = self.full_s + (expected or 0.0)
        if self.waiting != leader.number:
            self.waiting = leader.number
            log.info("trial %d leads; its full run waits until the search has run proxies %.0f s more, so that full "
                     "runs take at most half the search's time (--promote balanced)", leader.number, needed - searched)
        return False

    def _promote_timed(self, number: int) -> None:
        began = self.clock()
        self._promote(number)
        self.last_took = self.clock() - began
        self.full_s += self.last_took

    def _promote(self, number: int) -> None:
        log.info("trial %d leads the search: training it at full fidelity while the search waits", number)
        try:  # the run's record in the store is its result
            promote(PromoteOptions(storage=self.storage, study=self.study_name, runs_dir=self.runs_dir), number)
        except Exception as error:  # noqa: BLE001 - one failed full run does not end the search
            log.warning("promotion of trial %d failed: %s: %s; the search goes on", number, type(error).__name__,
                        str(error).strip().splitlines()[0] if str(error).strip() else "")
