"""`tianfeng search --promote leader`: whenever a proxy trial takes the lead, its recipe is trained
at full fidelity (as `tianfeng promote` trains it) while the search waits, so the study has a
full-fidelity result early and the search ends with its leader's full run.

Nothing ranked below a promoted trial is promoted: a leader that scores less at full fidelity
than its proxy said does not send the runner-up after it. The first promotion waits for
`FIRST_AFTER` complete proxy trials, so the leader is the best of a few (ASHA's top third). In a
screening study the leader is the trial whose full run is forecast to end best: its screen
score plus what the study's full runs gained over their screens for its epoch budget, up to the
longest of them (screen_forecast). In a time-to-target screening study it is the recipe with the
least predicted time whose forecast reaches the target (screen_target); until a full run reaches
the target, the best untrained forecast is trained too whenever the search has screened as long as
its last full run took without a new leader, so full runs keep at least half the time. That choice
first waits for the screens already running when the wait ran out: they are paid for, end within
a screen's time, and one of them may be the leader.

`--promote balanced` keeps that timing but gives full runs at most half of the search's time: a
new leader's full run waits until the search has screened at least as long as its full runs will
have trained once this one ends (the last full run's time, or before the first one, the leader's
screen scaled to its whole run: `full_run_estimate`). The leader may change while it waits, and
the search screens many recipes before its first full run rather than training the best of the
first few."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial, TrialState

from tianfeng.core.cores import usable_cores
from tianfeng.defaults import LEADER_AFTER, ObjectiveMode
from tianfeng.hpo.judge.scores import best_among, completed, maximizing, mode_of
from tianfeng.hpo.judge.screen_check import check_screen, screen_length, screened_alike
from tianfeng.hpo.judge.screen_forecast import forecast, gain_slope
from tianfeng.hpo.judge.screen_target import fastest_to_target, untrained_best
from tianfeng.hpo.trial_attrs import TrialKey
from tianfeng.promotion.options import PromoteOptions
from tianfeng.promotion.run import promote
from tianfeng.storage.runs import RunRecordStatus, RunStore

log = logging.getLogger("tianfeng.promote")
FIRST_AFTER = LEADER_AFTER
DONE = (RunRecordStatus.COMPLETED, RunRecordStatus.DIVERGED)


def full_run_curves(store: RunStore, study_name: str, metric: str) -> list[tuple[int, list[float]]]:
    """(trial number, the metric after each epoch) of every completed full run of the study."""
    return _curves(_completed_full_runs(store.runs(study_name)), metric)


def _completed_full_runs(runs: list[dict]) -> list[dict]:
    return [r for r in runs if r["kind"] == "promote" and r["status"] == RunRecordStatus.COMPLETED]


def _curves(runs: list[dict], metric: str) -> list[tuple[int, list[float]]]:
    curves = [(r["trial_number"], [e[metric] for e in r["epochs"] if e.get(metric) is not None]) for r in runs]
    return [(number, curve) for number, curve in curves if curve]


def _last_took(runs: list[dict]) -> float | None:
    """The training time of the last completed full run in `runs` (its last epoch's elapsed_s)."""
    timed = [r for r in _completed_full_runs(runs) if r["epochs"] and r["epochs"][-1].get("elapsed_s") is not None]
    return max(timed, key=lambda r: (r["updated"], r["id"]))["epochs"][-1]["elapsed_s"] if timed else None


def full_run_estimate(trial: FrozenTrial, cores: int) -> float | None:
    """Seconds a screened trial's whole run would take on `cores` threads: its screen's time per
    epoch screened, times its run's epochs, scaled from the threads it screened on; None without
    the figures. It errs long by the screen's start-up, which counts as training, and short where
    a multi-stage recipe screens at its start resolution, where more threads are not
    proportionally faster, and for a proxy trial, whose figures are its proxy's."""
    epochs = [p.get("epochs") for p in (trial.user_attrs.get(TrialKey.CONFIG) or {}).get("phases", [])]
    screened = len(trial.intermediate_values)  # the epochs it reported
    if trial.duration is None or not screened or not epochs or not all(isinstance(e, int) for e in epochs):
        return None
    threads = trial.user_attrs.get(TrialKey.CORES) or cores
    return trial.duration.total_seconds() / screened * sum(epochs) * min(1.0, threads / max(1, cores))


def proxy_leader(study: optuna.Study, first_after: int = FIRST_AFTER, screen_epochs: int | None = None,
                 full_curves: Sequence[list[float]] = (), full_ends: Mapping[int, float | None] | None = None,
                 ) -> FrozenTrial | None:
    """The study's best trial (time-to-target: the fastest that reached the target), once
    `first_after` trials are complete; in a screening study (`screen_epochs`, the rung's
    `stop_after_epochs`) among the trials screened as long as the screen is now (screen_check),
    by their forecast full-run score fitted to the study's `full_curves`. A time-to-target
    screening study with a target takes the fastest recipe forecast to reach it that has no full
    run yet (`full_ends`: each promoted trial's full-run end, None when it did not complete) and is
    faster than every full run that reached it; while there is none, the best forecast leads."""
    if screen_epochs is None:
        trials = completed(study)
        return best_among(study, trials) if len(trials) >= first_after else None
    trials, forecasts = screen_forecasts(study, screen_epochs, full_curves)
    if len(trials) < first_after:
        return None
    mode = mode_of(study)
    if mode == ObjectiveMode.PARETO:
        return best_among(study, trials)
    if mode == ObjectiveMode.TIME_TO_TARGET:
        fastest = fastest_to_target(study, trials, forecasts, full_ends or {})
        if fastest is not None:
            return fastest
    return sorted(trials, key=lambda t: forecasts[t.number], reverse=maximizing(study))[0]


def screen_forecasts(study: optuna.Study, screen_epochs: int, full_curves: Sequence[list[float]],
                     ) -> tuple[list[FrozenTrial], dict[int, float | None]]:
    """The complete trials screened as long as the study's screen is now, and each one's forecast
    full-run score (by trial number) fitted to the study's `full_curves`."""
    length = screen_length(study, screen_epochs)
    trials = screened_alike(completed(study), length)
    slope, longest = gain_slope(full_curves, length), max((len(c) for c in full_curves), default=None)
    return trials, {t.number: forecast(t, length, slope, longest) for t in trials}


def balanced_wait_over(screened_s: float, full_s: float, expected_s: float | None) -> bool:
    """`--promote balanced`: whether a leader's full run may start, once the search has screened
    `screened_s` and trained full runs for `full_s`: when the screening is at least as long as
    the full runs will have taken with this one (`expected_s`; unknown counts as nothing)."""
    return screened_s >= full_s + (expected_s or 0.0)


class LeaderPromotion:
    """What the search runs between trials (`run_search`'s `between_trials`): the current
    proxy leader's full run, once per trial. A leader promoted before (an earlier run of the
    same search, then resumed) is not trained again; one whose run was cut continues it from its
    checkpoint. A promotion that fails is logged and the search goes on. With a screening rung
    (`screen_epochs`, its `stop_after_epochs`) each full run checks the screen's length against
    the full runs' curves (`metric`), see screen_check. A time-to-target screening study none of
    whose full runs has reached the target yet also trains its best untrained forecast once the
    screening since the last full run (`clock`'s seconds) has lasted as long as that run took, and
    the screens running then have ended (waiting for them at most half that run's time). With
    `balanced` (`--promote balanced`) a leader's full run waits until the search's screening so
    far (`clock`'s seconds since it began, less its full runs) is at least as long as its full runs
    will have taken with this one (the last full run's time, or `full_run_estimate` on `cores`
    threads, by default every usable core)."""

    def __init__(self, storage: str, study_name: str, runs_dir: Path, screen_epochs: int | None = None,
                 metric: str = "val_top1", clock: Callable[[], float] = time.monotonic, balanced: bool = False,
                 cores: int | None = None) -> None:
        self.storage, self.study_name, self.runs_dir = storage, study_name, runs_dir
        self.screen_epochs, self.metric = screen_epochs, metric  # screen_epochs: a screening rung's
        self.store = RunStore(storage)
        runs = self.store.runs(study_name)
        self.promoted: set[int] = {r["trial_number"] for r in runs if r["kind"] == "promote" and r["status"] in DONE}
        # a screening study's leader rule reads the completed full runs (their curves and ends),
        # which change only when this search promotes: read here and after each promotion
        self.curves: list[list[float]] = []
        self.ends: dict[int, float | None] = {}
        # screening since the last full run ended, and how long that run took (after a resume: the
        # last completed full run's training time, the screening counted from now)
        self.clock, self.last_end, self.last_took = clock, clock(), _last_took(runs)
        self.awaited: set[int] | None = None  # the trials running when the wait ran out
        self.awaited_since = 0.0
        self.balanced, self.cores = balanced, cores or usable_cores()
        self.began, self.full_s = self.last_end, 0.0  # this search's start and its full runs' seconds
        self.waiting: int | None = None  # the leader last logged as waiting for screening time
        if screen_epochs is not None:
            self._keep_full_runs(runs)

    def __call__(self, study: optuna.Study) -> Callable[[], None] | None:
        full_ends = {n: self.ends.get(n) for n in self.promoted}
        leader = proxy_leader(study, screen_epochs=self.screen_epochs, full_curves=self.curves, full_ends=full_ends)
        if leader is None or leader.number in self.promoted:
            leader = self._overdue(study, full_ends)
        if leader is None or (self.balanced and not self._screened_enough(leader)):
            return None
        self.promoted.add(leader.number)
        self.last_end = self.clock()  # no overdue run while this one is pending
        self.awaited = None
        return lambda: self._promote_and_check(study, leader.number)

    def _overdue(self, study: optuna.Study, full_ends: dict[int, float | None]) -> FrozenTrial | None:
        """The best untrained forecast of a time-to-target screen hunting its target, once the
        screening since the last full run has lasted as long as that run took; else None."""
        if (self.screen_epochs is None or self.last_took is None or mode_of(study) != ObjectiveMode.TIME_TO_TARGET
                or self.clock() - self.last_end < self.last_took or self._screens_in_flight(study)):
            return None
        trials, forecasts = screen_forecasts(study, self.screen_epochs, self.curves)
        chosen = untrained_best(study, trials, forecasts, full_ends)
        if chosen is not None:
            log.info("no new leader in %.0f s of screening, as long as the last full run took: training the best "
                     "untrained forecast, trial %d", self.clock() - self.last_end, chosen.number)
        return chosen

    def finish(self, study: optuna.Study) -> None:
        """After the search's last trial (`balanced`): train the leader still waiting for screening
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

    def _screened_enough(self, leader: FrozenTrial) -> bool:
        """Whether the search has screened at least as long as its full runs will have trained
        once `leader`'s ends (`--promote balanced`); logs a leader that waits, once."""
        screened = self.clock() - self.began - self.full_s
        expected = self.last_took if self.last_took is not None else full_run_estimate(leader, self.cores)
        if balanced_wait_over(screened, self.full_s, expected):
            return True
        needed = self.full_s + (expected or 0.0)
        if self.waiting != leader.number:
            self.waiting = leader.number
            log.info("trial %d leads; its full run waits until the search has screened %.0f s more, so that full "
                     "runs take at most half the search's time (--promote balanced)", leader.number, needed - screened)
        return False

    def _screens_in_flight(self, study: optuna.Study) -> bool:
        """Whether a trial that was running when the wait was first found over still runs (for at
        most half the last full run's time: a trial left running by a dead worker does not hold
        the search)."""
        running = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}
        if self.awaited is None:
            self.awaited, self.awaited_since = running, self.clock()
        return bool(self.awaited & running) and self.clock() - self.awaited_since < self.last_took / 2

    def _promote_and_check(self, study: optuna.Study, number: int) -> None:
        began = self.clock()
        self._promote(number)
        self.last_end = self.clock()
        self.last_took = self.last_end - began
        self.full_s += self.last_took
        if self.screen_epochs is not None:
            self._keep_full_runs(self.store.runs(self.study_name))
            check_screen(study, self.curves, self.screen_epochs)

    def _keep_full_runs(self, runs: list[dict]) -> None:
        completed_runs = _completed_full_runs(runs)
        self.curves = [c for _, c in _curves(completed_runs, self.metric)]
        self.ends = {r["trial_number"]: r["final_score"] for r in completed_runs}

    def _promote(self, number: int) -> None:
        log.info("trial %d leads the search: training it at full fidelity while the search waits", number)
        try:  # the run's record in the store is its result
            promote(PromoteOptions(storage=self.storage, study=self.study_name, runs_dir=self.runs_dir), number)
        except Exception as error:  # noqa: BLE001 - one failed full run does not end the search
            log.warning("promotion of trial %d failed: %s: %s; the search goes on", number, type(error).__name__,
                        str(error).strip().splitlines()[0] if str(error).strip() else "")
