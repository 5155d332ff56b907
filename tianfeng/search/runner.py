"""Running a study: storage, study creation with priors, local worker processes, the trial budget."""

from __future__ import annotations

import logging
import multiprocessing
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.trial import TrialState

from tianfeng import search_command
from tianfeng.search.objective import ProxyObjective
from tianfeng.search.progress import StudyProgress
from tianfeng.search.registry import PRUNERS, SAMPLERS
from tianfeng.search.space import SearchSpace, load_space
from trainers.config import ConfigError
from trainers.names import STUDY_MAX_LENGTH, check_name

log = logging.getLogger("tianfeng.search")

DEFAULT_STORAGE = search_command.DEFAULT_STORAGE
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


def open_storage(url: str, heartbeat_s: int | None = 10, grace_s: int = 60) -> RDBStorage:
    """Optuna's RDB storage with heartbeats: a trial whose worker died goes stale after `grace_s`
    and is queued again with the same parameters (up to twice), resuming its checkpoint.
    `heartbeat_s=None` for ask-and-tell drivers (the Ray backend), which Optuna cannot heartbeat."""
    engine_kwargs = {"connect_args": {"timeout": 120}} if url.startswith("sqlite") else {"pool_pre_ping": True}
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    if heartbeat_s is None:
        return RDBStorage(url, engine_kwargs=engine_kwargs)
    return RDBStorage(url, engine_kwargs=engine_kwargs, heartbeat_interval=heartbeat_s,
                      grace_period=grace_s,
                      heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(
                          max_retry=2, inherit_intermediate_values=True))


UNLIMITED_TRIALS = 10**6  # a plan's `trials` when only a time or epoch budget bounds it


@dataclass(frozen=True)
class SearchPlan:
    """Everything a worker process needs; plain values, so it crosses a process boundary."""
    space_path: str
    data: str | None
    storage: str
    study: str
    sampler: str
    pruner: str
    seed: int
    trials: int
    timeout_s: float | None
    runs_root: str
    rung: str
    heartbeat_s: int = 10
    grace_s: int = 60
    verbose: bool = False
    # set by `tianfeng scale`: every run at this global batch, extra `set:` entries (key ->
    # expression), whether to enqueue the space's priors, named parameter sets to enqueue
    # first (warm start), and extra study attributes
    batch_size: int | None = None
    set_overrides: dict[str, str] = field(default_factory=dict)
    priors: bool = True
    warm_start: tuple[tuple[str, dict[str, Any]], ...] = ()
    copied_trials: tuple[optuna.trial.FrozenTrial, ...] = ()  # finished elsewhere, added to a new study
    study_attrs: dict[str, Any] = field(default_factory=dict)
    epoch_budget: int | None = None  # training epochs summed over trials (pruned ones count what they ran)

    def __post_init__(self) -> None:
        check_name(self.study, "--study", "", max_length=STUDY_MAX_LENGTH)  # runs/<study>/trial-N


def plan_space(plan: SearchPlan) -> SearchSpace:
    """The space a plan searches: the file's, pinned and adjusted as the plan says."""
    space = load_space(plan.space_path, data=plan.data)
    if plan.batch_size is None and not plan.set_overrides and plan.priors:
        return space
    from tianfeng.scale.space import at_batch

    return at_batch(space, plan.batch_size, assignments=plan.set_overrides, priors=plan.priors)


def open_study(plan: SearchPlan, space: SearchSpace, *, resume: bool, heartbeat: bool = True) -> optuna.Study:
    storage = open_storage(plan.storage, plan.heartbeat_s if heartbeat else None, plan.grace_s)
    exists = plan.study in optuna.get_all_study_names(storage)
    if exists and not resume:
        raise ConfigError("--study", plan.study, f"already exists in {plan.storage}; pass --resume to "
                          "continue it or choose another --study name")
    if not exists and resume:
        raise ConfigError("--study", plan.study, f"no such study in {plan.storage} to resume")
    study = optuna.create_study(study_name=plan.study, storage=storage, load_if_exists=True,
                                direction=space.objective.direction,
                                sampler=SAMPLERS[plan.sampler](space, plan.seed),
                                pruner=PRUNERS[plan.pruner](rung_epochs(space, plan.rung)))
    if not exists:
        attrs = {"kind": "search", "space_path": space.path, "space_yaml": Path(space.path).read_text(),
                 "data": plan.data or space.base.data.source, "rung": plan.rung,
                 "sampler": plan.sampler, "pruner": plan.pruner,
                 "metric": space.objective.metric, "runs_root": plan.runs_root,
                 "created": time.strftime("%Y-%m-%d %H:%M:%S"), **plan.study_attrs}
        for key, value in attrs.items():
            study.set_user_attr(key, value)
        for trial in plan.copied_trials:
            study.add_trial(trial)
        for label, params in plan.warm_start:
            study.enqueue_trial(params, user_attrs={"warm_start": label})
        if plan.sampler == "grid" and space.priors:
            log.info("grid sampler: the priors are not enqueued (the grid covers the space itself)")
        # a prior the warm start already holds (same values for every key the prior names) is dropped
        warm = [params for _, params in plan.warm_start] + [t.params for t in plan.copied_trials]
        priors = [p for p in space.priors if not any(all(w.get(k) == v for k, v in p.params.items()) for w in warm)]
        priors = priors if plan.sampler != "grid" else []
        for prior in priors:
            study.enqueue_trial(prior.params, user_attrs={"prior": prior.name})
        if priors:
            log.info("enqueued %d published recipes as the first trials: %s", len(priors),
                     ", ".join(p.name for p in priors))
    return study


def rung_epochs(space: SearchSpace, rung: str) -> int:
    return space.fidelities[rung].epochs or space.base.total_epochs


def finished_count(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=FINISHED))


class Budget:
    """Stops a worker once the study holds `trials` finished or running trials (all workers), or
    once another full trial of `trial_epochs` would take the study past `epochs` training epochs."""

    def __init__(self, trials: int, epochs: int | None = None, trial_epochs: int = 1) -> None:
        self.trials, self.epochs, self.trial_epochs = trials, epochs, trial_epochs

    def exhausted(self, study: optuna.Study) -> bool:
        trials = study.get_trials(deepcopy=False, states=(*FINISHED, TrialState.RUNNING))
        if len(trials) >= self.trials:
            return True
        if self.epochs is None:
            return False
        return epochs_spent(trials, self.trial_epochs) + self.trial_epochs > self.epochs

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        if self.exhausted(study):
            study.stop()


def epochs_spent(trials: list[optuna.trial.FrozenTrial], trial_epochs: int) -> int:
    """Epochs trained by finished trials, plus a full trial's for each one still running."""
    return sum(trial_epochs if t.state == TrialState.RUNNING else max(t.intermediate_values, default=0)
               for t in trials)


class TrialLogger:
    def __init__(self, metric: str) -> None:
        self.metric = metric

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        params = "  ".join(f"{k}={_short(v)}" for k, v in trial.params.items())
        took = (trial.datetime_complete - trial.datetime_start).total_seconds() if trial.datetime_complete else 0
        if trial.state == TrialState.COMPLETE:
            try:
                best = study.best_trial
                best_text = f"best {best.value:.4g} (#{best.number})"
            except ValueError:
                best_text = ""
            log.info("trial %d complete  %s %.4g  %s  %.1fs  %s", trial.number, self.metric,
                     trial.value, best_text, took, params)
        elif trial.state == TrialState.PRUNED:
            last = max(trial.intermediate_values) if trial.intermediate_values else 0
            why = "diverged" if trial.user_attrs.get("status") == "diverged" else f"at epoch {last}"
            log.info("trial %d pruned %s  %.1fs  %s", trial.number, why, took, params)
        else:
            log.warning("trial %d %s  %.1fs  %s  %s", trial.number, trial.state.name.lower(), took,
                        params, trial.user_attrs.get("error", ""))


def _short(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def run_worker(plan: SearchPlan, worker: int = 0, threads: int | None = None,
               progress: StudyProgress | None = None) -> None:
    """One worker: run trials of the study until the budget or the timeout is reached."""
    from tianfeng.logs import setup_logging

    if worker > 0:  # a spawned process: set up logging and the worker's share of the cores
        setup_logging()
    if not plan.verbose:  # per-trial lines only; the engine's epoch lines with --verbose
        logging.getLogger("tianfeng.engine").setLevel(logging.WARNING)
    if threads:
        import torch

        torch.set_num_threads(threads)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = plan_space(plan)
    storage = open_storage(plan.storage, plan.heartbeat_s, plan.grace_s)
    study = optuna.load_study(study_name=plan.study, storage=storage,
                              sampler=SAMPLERS[plan.sampler](space, plan.seed + worker),
                              pruner=PRUNERS[plan.pruner](rung_epochs(space, plan.rung)))
    budget = Budget(plan.trials, plan.epoch_budget, rung_epochs(space, plan.rung))
    if budget.exhausted(study):
        return
    objective = ProxyObjective(space, plan.study, Path(plan.runs_root), plan.rung)
    callbacks = [budget, TrialLogger(space.objective.metric)] + ([progress.update] if progress else [])
    study.optimize(objective, timeout=plan.timeout_s, callbacks=callbacks, catch=(RuntimeError, ValueError))


def budget_text(plan: SearchPlan) -> str:
    """The plan's budget as a person would say it: "12 trials", "45 min", "72 epochs or 10 min"."""
    parts = [f"{plan.trials} trials"] if plan.trials < UNLIMITED_TRIALS else []
    if plan.epoch_budget is not None:
        parts.append(f"{plan.epoch_budget} epochs")
    if plan.timeout_s is not None:
        parts.append(f"{plan.timeout_s / 60:g} min")
    return " or ".join(parts) or "unlimited"


def run_search(plan: SearchPlan, workers: int, *, resume: bool) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = plan_space(plan)
    study = open_study(plan, space, resume=resume)
    done = finished_count(study)
    log.info("study %s: %d trials done, budget %s; sampler %s, pruner %s, rung %s, %d worker(s)",
             plan.study, done, budget_text(plan), plan.sampler, plan.pruner, plan.rung, workers)
    total = plan.trials if plan.trials < UNLIMITED_TRIALS else None  # None: rich draws a pulsing bar
    with StudyProgress(total, space.objective.metric) as progress:
        progress.update(study)
        if workers <= 1:
            run_worker(plan, progress=progress)
        else:
            _run_processes(plan, workers, study, progress)
    return study


def _run_processes(plan: SearchPlan, workers: int, study: optuna.Study, progress: StudyProgress) -> None:
    threads = max(1, (os.cpu_count() or 1) // workers)
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=run_worker, args=(plan, i + 1, threads), name=f"tianfeng-worker-{i + 1}")
             for i in range(workers)]
    for p in procs:
        p.start()
    try:
        while any(p.is_alive() for p in procs):
            progress.update(study)
            for p in procs:
                p.join(timeout=1.0 / len(procs))
    except KeyboardInterrupt:
        for p in procs:
            p.terminate()
        for p in procs:
            p.join()
        raise
    failed = [p.name for p in procs if p.exitcode not in (0, None)]
    if failed:
        log.warning("worker(s) %s exited abnormally; their running trials will be retried on --resume",
                    ", ".join(failed))



def requeue_interrupted(storage: str, study_name: str) -> list[int]:
    """After Ctrl-C: queue the trials that were cut short again with the same parameters and run
    directory, so `--resume` continues each from its last checkpoint. Returns their numbers."""
    study = optuna.load_study(study_name=study_name, storage=storage)
    trials = study.get_trials(deepcopy=False)
    retried = {t.system_attrs.get("failed_trial") for t in trials}
    cut = [t for t in trials if t.state == TrialState.FAIL and t.number not in retried
           and t.user_attrs.get("status") == "interrupted"]
    for t in cut:
        study.add_trial(optuna.create_trial(state=TrialState.WAITING, params=t.params,
                                            distributions=t.distributions, user_attrs=t.user_attrs,
                                            system_attrs={"failed_trial": t.number}))
    return [t.number for t in cut]
