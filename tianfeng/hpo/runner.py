"""Running a study: storage, study creation with priors, local worker processes, the trial budget."""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import pickle
import signal
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.trial import TrialState

from tianfeng.defaults import ObjectiveMode
from tianfeng.hpo.dashboard import metric_names
from tianfeng.hpo.locked_storage import BudgetReached, LockedSQLiteStorage, rdb_storage
from tianfeng.hpo.objective import ProxyObjective
from tianfeng.hpo.outcomes import Outcome, outcome
from tianfeng.hpo.peer_pruning import PeerPruner
from tianfeng.hpo.progress import StudyProgress
from tianfeng.hpo.registry import PRUNERS, make_sampler
from tianfeng.hpo.scores import best_trial, epochs_reported, score
from tianfeng.hpo.space import SearchSpace, load_space, per_gpu_range
from tianfeng.hpo.stored_space import store_space_text
from tianfeng.hpo.walltime import format_seconds
from tianfeng.interrupts import (
    deferred_interrupt,
    held_for_children,
    raise_if_interrupted,
    run_quietly,
)
from tianfeng.logs import quiet_optuna
from tianfeng.ownership import check_folder, claim_folder, new_uid, study_owner
from tianfeng.storage_url import engine_options
from tianfeng.trainers.config import ConfigError, config_from_dict
from tianfeng.trainers.names import STUDY_MAX_LENGTH, check_name
from tianfeng.trainers.schedules import peak_lr

log = logging.getLogger("tianfeng.search")

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
# 2: priors must be complete and the min_steps guard applies; a study stored without this (made
# before them) re-reads its space as it ran: partial priors allowed, no guard
SPACE_FORMAT = 2


def open_storage(url: str, heartbeat_s: int | None = 10, grace_s: int = 60) -> RDBStorage:
    """Optuna's RDB storage with heartbeats: a trial whose worker died goes stale after `grace_s`
    and is queued again with the same parameters (up to twice), resuming its checkpoint.
    `heartbeat_s=None` for ask-and-tell drivers (the Ray backend), which Optuna cannot heartbeat."""
    engine_kwargs = engine_options(url)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    if heartbeat_s is None:
        return rdb_storage(url, engine_kwargs=engine_kwargs)
    return rdb_storage(url, engine_kwargs=engine_kwargs, heartbeat_interval=heartbeat_s,
                      grace_period=grace_s,
                      heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(
                          max_retry=2, inherit_intermediate_values=True))


FAILURE_LIMIT = 3  # consecutive failures with one error that stop a search
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
    failure_limit: int = FAILURE_LIMIT  # this many trials in a row failing with one error stop the search
    gpus: int | None = None  # the cluster's size, replacing the space's cluster section
    gpus_per_node: int | None = None
    objective: str | None = None  # objective mode, replacing the space's
    target: float | None = None  # time-to-target's target, replacing the space's
    min_accuracy: float | None = None  # pareto's accuracy floor, replacing the space's

    def __post_init__(self) -> None:
        check_name(self.study, "--study", "", max_length=STUDY_MAX_LENGTH)  # runs/<study>/trial-N


def plan_space(plan: SearchPlan) -> SearchSpace:
    """The space a plan searches: the file's, pinned and adjusted as the plan says."""
    space = load_space(plan.space_path, data=plan.data, gpus=plan.gpus, gpus_per_node=plan.gpus_per_node)
    space = with_objective(space, plan.objective, plan.target, plan.min_accuracy)
    if plan.batch_size is None and not plan.set_overrides and plan.priors:
        return space
    from tianfeng.hpo.pinned import at_batch

    return at_batch(space, plan.batch_size, assignments=plan.set_overrides, priors=plan.priors)


def with_objective(space: SearchSpace, mode: str | None, target: float | None,
                   min_accuracy: float | None = None) -> SearchSpace:
    """`--objective`, `--target` and `--min-accuracy` replace the space's objective mode, target
    and accuracy floor."""
    import dataclasses

    if mode is None and target is None and min_accuracy is None:
        return space
    objective = dataclasses.replace(
        space.objective, mode=ObjectiveMode(mode) if mode else space.objective.mode,
        target=space.objective.target if target is None else target,
        min_accuracy=space.objective.min_accuracy if min_accuracy is None else min_accuracy)
    if objective.mode == ObjectiveMode.TIME_TO_TARGET and objective.target is None:
        raise ConfigError("--target", "", f"is required with --objective time-to-target (the {objective.metric} "
                          "the search rung must reach), unless the space's objective gives one")
    return dataclasses.replace(space, objective=objective)


def directions(space: SearchSpace) -> list[str]:
    """Optuna's directions: the metric's; (metric, predicted time); or the predicted time."""
    mode = space.objective.mode
    if mode == ObjectiveMode.PARETO:
        return [space.objective.direction, "minimize"]
    return ["minimize"] if mode == ObjectiveMode.TIME_TO_TARGET else [space.objective.direction]


def make_pruner(space: SearchSpace, plan: SearchPlan) -> optuna.pruners.BasePruner:
    if space.objective.mode != ObjectiveMode.ACCURACY:
        return optuna.pruners.NopPruner()  # the objective's PeerPruner judges, see peer_pruning
    return PRUNERS[plan.pruner](rung_epochs(space, plan.rung))


def open_study(plan: SearchPlan, space: SearchSpace, *, resume: bool, heartbeat: bool = True,
               seed: int | None = None) -> optuna.Study:
    """The plan's study, created whole (Ctrl-C waits for it) or loaded to be resumed."""
    with deferred_interrupt():
        return _open_study(plan, space, resume=resume, heartbeat=heartbeat, seed=seed)


def _open_study(plan: SearchPlan, space: SearchSpace, *, resume: bool, heartbeat: bool,
                seed: int | None) -> optuna.Study:
    storage = open_storage(plan.storage, plan.heartbeat_s if heartbeat else None, plan.grace_s)
    exists = plan.study in optuna.get_all_study_names(storage)
    if exists and not resume:
        raise ConfigError("--study", plan.study, f"already exists in {plan.storage}; pass --resume to "
                          "continue it or choose another --study name")
    if not exists and resume:
        raise ConfigError("--study", plan.study, f"no such study in {plan.storage} to resume")
    if space.objective.mode == ObjectiveMode.PARETO and plan.sampler == "cmaes":
        raise ConfigError("--sampler", "cmaes", "optimises one objective; with objective pareto use tpe, "
                          "random, qmc or grid")
    folder = Path(plan.runs_root) / plan.study
    if exists:
        stored = optuna.load_study(study_name=plan.study, storage=storage)
        was = stored.user_attrs.get("objective_mode", ObjectiveMode.ACCURACY)
        if was != space.objective.mode:
            raise ConfigError("--objective", space.objective.mode, f"study {plan.study} was created with "
                              f"objective {was}; resume it with --objective {was}")
        owner = study_owner(stored, plan.storage)
        claim_folder(folder, owner)
    else:  # before the study exists, so a refusal leaves nothing behind
        check_folder(folder, None)
    study = optuna.create_study(study_name=plan.study, storage=storage, load_if_exists=True,
                                directions=directions(space),
                                sampler=make_sampler(plan.sampler, space, plan.seed if seed is None else seed),
                                pruner=make_pruner(space, plan))
    if not exists:
        with warnings.catch_warnings():  # experimental since Optuna 3.2, and what the dashboard reads
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(metric_names(space.objective.mode, space.objective.metric))
        store_space_text(study, Path(space.path).read_text())
        attrs = {"kind": "search", "space_path": space.path,
                 "objective_mode": space.objective.mode, "direction": space.objective.direction,
                 "target": space.objective.target, "min_accuracy": space.objective.min_accuracy,
                 "cluster": space.cluster.describe(), "per_gpu_batch": per_gpu_range(space),
                 "gpus": space.cluster.gpus, "gpus_per_node": space.cluster.gpus_per_node,
                 "data": plan.data or space.base.data.source, "rung": plan.rung,
                 "sampler": plan.sampler, "pruner": plan.pruner,
                 "metric": space.objective.metric, "runs_root": plan.runs_root,
                 "created": time.strftime("%Y-%m-%d %H:%M:%S"), "space_format": SPACE_FORMAT, "uid": new_uid(),
                 **plan.study_attrs}
        for key, value in attrs.items():
            study.set_user_attr(key, value)
        claim_folder(folder, study_owner(study, plan.storage))
        for trial in plan.copied_trials:
            study.add_trial(trial)
        for label, params in plan.warm_start:
            study.enqueue_trial(params, user_attrs={"warm_start": label})
        if plan.sampler == "grid" and space.priors:
            log.info("grid sampler: the priors are not enqueued (the grid covers the space itself)")
    if plan.sampler != "grid":
        enqueue_priors(study, space, plan)
    return study


def enqueue_priors(study: optuna.Study, space: SearchSpace, plan: SearchPlan) -> None:
    """Queue the space's published recipes as the next trials, as many as the budget has room
    for; on a resume with a larger budget, the ones that did not fit before."""
    trials = study.get_trials(deepcopy=False)
    # a prior the warm start already holds (same values for every key the prior names) is dropped
    warm = [params for _, params in plan.warm_start] + [t.params for t in plan.copied_trials]
    queued = {t.user_attrs.get("prior") for t in trials}
    priors = [p for p in space.priors if p.name not in queued
              and not any(all(w.get(k) == v for k, v in p.params.items()) for w in warm)]
    if not priors:
        return
    waiting = sum(t.state == TrialState.WAITING for t in trials)
    room = max(0, plan.trials - len(counted(trials)) - waiting)
    fits, left = priors[:room], priors[room:]
    for prior in fits:
        study.enqueue_trial(prior.params, user_attrs={"prior": prior.name})
    if fits:
        log.info("enqueued %d published recipes as the first trials: %s", len(fits), ", ".join(p.name for p in fits))
    if left:
        log.info("the budget of %d trials has no room for the published recipe(s) %s; a --resume with a larger "
                 "--trials runs them", plan.trials, ", ".join(p.name for p in left))


def rung_epochs(space: SearchSpace, rung: str) -> int:
    from tianfeng.hpo.materialize import max_rung_epochs

    return max_rung_epochs(space, rung)


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
    errors = {t.user_attrs.get("error", "") for t in last}
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


def raise_if_failing(plan: SearchPlan, study: optuna.Study) -> None:
    error = repeated_failure(study, plan.failure_limit)
    if error:
        raise SearchFailed(f"the last {plan.failure_limit} trials of study {plan.study} failed with: {error}; "
                           "completed trials are kept: fix the cause and continue with --resume")


class Budget:
    """Stops a worker once the study holds `trials` finished, running or failed trials (all
    workers), or once another full trial of `trial_epochs` would take the study past `epochs`
    training epochs."""

    def __init__(self, trials: int, epochs: int | None = None, trial_epochs: int = 1) -> None:
        self.trials, self.epochs, self.trial_epochs = trials, epochs, trial_epochs

    def exhausted(self, study: optuna.Study) -> bool:
        return self.exhausted_by(study.get_trials(deepcopy=False))

    def exhausted_by(self, all_trials: list[optuna.trial.FrozenTrial]) -> bool:
        trials = counted(all_trials)
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
    return sum(trial_epochs if t.state == TrialState.RUNNING else epochs_reported(t) for t in trials)


def effective_lr_text(config: dict | None) -> str:
    """`peak lr 0.0864  `: what the optimizer trains at after warm-up, beside the searched values
    (a base LR is per reference batch, and a space may divide it, as large_batch.yaml does for LAMB)."""
    if not config:
        return ""
    cfg = config_from_dict(config)
    return f"peak lr {peak_lr(cfg):.4g}  "


class TrialLogger:
    def __init__(self, metric: str) -> None:
        self.metric = metric

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        params = "  ".join(f"{k}={_short(v)}" for k, v in trial.params.items())
        took = (trial.datetime_complete - trial.datetime_start).total_seconds() if trial.datetime_complete else 0
        predicted = trial.user_attrs.get("predicted")
        full = f"full run {format_seconds(predicted['seconds'])} ({predicted['gpu_hours']:.3g} GPU-h)  " \
            if predicted else ""
        full += effective_lr_text(trial.user_attrs.get("config"))
        if trial.state == TrialState.COMPLETE:
            best = best_trial(study)
            best_text = f"best {score(best):.4g} (#{best.number})" if best else ""
            log.info("trial %d complete  %s %.4g  %s  %.1fs  %s%s", trial.number, self.metric,
                     score(trial), best_text, took, full, params)
        elif trial.state == TrialState.PRUNED:
            why = "diverged" if trial.user_attrs.get("status") == "diverged" else f"at epoch {epochs_reported(trial)}"
            log.info("trial %d pruned %s  %.1fs  %s%s", trial.number, why, took, full, params)
        else:
            log.warning("trial %d %s  %.1fs  %s  %s", trial.number, trial.state.name.lower(), took,
                        params, trial.user_attrs.get("error", ""))


def _short(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def run_worker(plan: SearchPlan, worker: int = 0, threads: int | None = None,
               progress: StudyProgress | None = None, stream: int = 0) -> None:
    """One worker: run trials of the study until the budget or the timeout is reached."""
    from tianfeng.logs import setup_logging

    if worker > 0:  # a spawned process: set up logging and the worker's share of the cores
        setup_logging()
    if not plan.verbose:  # per-trial lines only; the engine's epoch lines with --verbose
        logging.getLogger("tianfeng.engine").setLevel(logging.WARNING)
    if threads:
        import torch

        torch.set_num_threads(threads)
    # a failed trial is one line of ours (TrialLogger); Optuna's traceback only with --debug
    quiet_optuna()
    space = plan_space(plan)
    storage = open_storage(plan.storage, plan.heartbeat_s, plan.grace_s)
    study = optuna.load_study(study_name=plan.study, storage=storage,
                              sampler=make_sampler(plan.sampler, space, sampler_seed(plan, worker, stream)),
                              pruner=make_pruner(space, plan))
    budget = Budget(plan.trials, plan.epoch_budget, rung_epochs(space, plan.rung))
    if budget.exhausted(study):
        return
    if isinstance(storage, LockedSQLiteStorage):  # the count checked as each trial starts
        storage.limit(plan.study, budget.exhausted_by)
    peers = PeerPruner() if space.objective.mode != ObjectiveMode.ACCURACY and plan.pruner != "none" else None
    objective = ProxyObjective(space, plan.study, Path(plan.runs_root), plan.rung, peers=peers)
    callbacks = [budget, StopOnRepeatedFailure(plan.failure_limit), TrialLogger(space.objective.metric)] + (
        [progress.update] if progress else []) + [lambda study, trial: raise_if_interrupted()]
    # any error fails the trial, not the search; repeated_failure stops a search that cannot work
    with contextlib.suppress(BudgetReached):
        study.optimize(objective, timeout=plan.timeout_s, callbacks=callbacks, catch=(Exception,))


def sampler_seed(plan: SearchPlan, worker: int, stream: int) -> int:
    """Each worker of each process draws from its own stream: a new study's workers from
    seed + worker, so a search repeats with the same --seed; a process joining or resuming a
    study (stream != 0) from one that mixes in the stream, or it would sample the same
    parameters as the study's first trials again."""
    import numpy as np

    if stream == 0:
        return plan.seed + worker
    return int(np.random.SeedSequence((plan.seed, worker, stream)).generate_state(1)[0])


def budget_text(plan: SearchPlan) -> str:
    """The plan's budget as a person would say it: "12 trials", "45 min", "72 epochs or 10 min"."""
    parts = [f"{plan.trials} trials"] if plan.trials < UNLIMITED_TRIALS else []
    if plan.epoch_budget is not None:
        parts.append(f"{plan.epoch_budget} epochs")
    if plan.timeout_s is not None:
        parts.append(f"{plan.timeout_s / 60:g} min")
    return " or ".join(parts) or "unlimited"


def log_objective(space: SearchSpace) -> None:
    """Say once what the search optimises and for which cluster."""
    o = space.objective
    said = {ObjectiveMode.ACCURACY: f"{'maximise' if o.direction == 'maximize' else 'minimise'} {o.metric} "
                        "(--objective pareto or time-to-target weigh the predicted time too)",
            ObjectiveMode.PARETO: f"{o.metric} against the predicted wall time (a Pareto front)",
            ObjectiveMode.TIME_TO_TARGET: f"least predicted wall time with {o.metric} reaching {o.target}"}[o.mode]
    log.info("objective %s: %s; full runs predicted on %s", o.mode, said, space.cluster.describe())


def run_search(plan: SearchPlan, workers: int | str, *, resume: bool) -> optuna.Study:
    """Run the plan's study with `workers` local processes (a count, or auto: see search/workers.py)."""
    from tianfeng.hpo.workers import resolve_workers

    quiet_optuna()
    space = plan_space(plan)
    study = open_study(plan, space, resume=resume)
    log_objective(space)
    done = finished_count(study)
    workers, why = resolve_workers(workers, plan.trials - done)
    log.info("study %s: %d trials done, budget %s; sampler %s, pruner %s, rung %s, %d worker(s) (%s)",
             plan.study, done, budget_text(plan), plan.sampler, plan.pruner, plan.rung, workers, why)
    total = plan.trials if plan.trials < UNLIMITED_TRIALS else None  # None: rich draws a pulsing bar
    stream = new_stream() if resume else 0
    with StudyProgress(total, space.objective.metric) as progress:
        progress.update(study)
        if workers <= 1:
            run_worker(plan, progress=progress, stream=stream)
        else:
            _run_processes(plan, workers, study, progress, stream)
    raise_if_failing(plan, study)
    return study


def new_stream() -> int:
    """A seed stream no other process is using: from the OS's entropy, not the clock."""
    return int.from_bytes(os.urandom(4), "little") or 1


def _run_processes(plan: SearchPlan, workers: int, study: optuna.Study, progress: StudyProgress,
                   stream: int = 0) -> None:
    threads = max(1, (os.cpu_count() or 1) // workers)
    gpus = worker_gpus(workers)
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=run_quietly, args=(__name__, "_worker_process",
                                                   pickle.dumps((plan, i + 1, threads, stream, gpus[i]))),
                         name=f"tianfeng-worker-{i + 1}") for i in range(workers)]
    try:
        from multiprocessing import resource_tracker

        resource_tracker.ensure_running()  # its own start unblocks Ctrl-C: start it before holding it
        for p in procs:
            with held_for_children():
                p.start()
        while any(p.is_alive() for p in procs):
            raise_if_interrupted()
            progress.update(study)
            for p in procs:
                p.join(timeout=1.0 / len(procs))
    except KeyboardInterrupt:
        _interrupt(procs)
        requeue_interrupted(plan.storage, plan.study, dead_workers={_worker_id(p.pid) for p in procs})
        raise
    failed = [f"{p.name} ({exit_text(p.exitcode)})" for p in procs if p.exitcode not in (0, None)]
    if failed:
        log.warning("worker(s) %s exited abnormally; their running trials will be retried on --resume",
                    ", ".join(failed))


def exit_text(code: int) -> str:
    """A process's exit code as words: a negative one is the signal that killed it."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def worker_gpus(workers: int, visible: str | None = None, count: int | None = None) -> list[str | None]:
    """The GPU each local worker sees (CUDA_VISIBLE_DEVICES), round robin over the GPUs this
    process sees; all None without GPUs. Each worker's trials then run on its own `cuda:0`."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    if visible is not None:
        ids = [v.strip() for v in visible.split(",") if v.strip()]
    else:
        import torch

        ids = [str(i) for i in range(torch.cuda.device_count() if count is None else count)]
    return [ids[i % len(ids)] if ids else None for i in range(workers)]


def _one_line_thread_error(args: threading.ExceptHookArgs) -> None:
    """A background thread's failure (Optuna's heartbeat meeting a locked or lost database) is
    one line on stderr, not a traceback; the trial it heartbeats goes stale and is retried."""
    if args.exc_type is SystemExit:
        return
    log.warning("background thread %s: %s: %s", args.thread.name if args.thread else "?",
                args.exc_type.__name__, str(args.exc_value).strip().splitlines()[0] if str(args.exc_value).strip() else "")


def _worker_process(plan: SearchPlan, worker: int, threads: int, stream: int, gpu: str | None = None) -> None:
    """A spawned worker: on its own GPU if there are any (set before CUDA starts in this process);
    Ctrl-C ends it quietly (its trial is already marked interrupted)."""
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    threading.excepthook = _one_line_thread_error
    try:
        run_worker(plan, worker, threads, stream=stream)
    except KeyboardInterrupt:
        raise SystemExit(130) from None


def _interrupt(procs: list, grace_s: float = 20.0) -> None:
    """Ctrl-C reaches the workers too when it comes from a terminal; when it does not (a signal
    to this process alone), pass it on. Each worker marks its trial interrupted and exits;
    one that does not within `grace_s` is terminated (its trial is requeued all the same)."""
    import signal

    for p in procs:
        if p.is_alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGINT)
    deadline = time.monotonic() + grace_s
    for p in procs:
        while p.is_alive() and time.monotonic() < deadline:
            with contextlib.suppress(KeyboardInterrupt):  # a second Ctrl-C does not skip the wait
                p.join(timeout=0.2)
        if p.is_alive():
            p.terminate()
            p.join()


def _worker_id(pid: int | None) -> str:
    import socket

    return f"{socket.gethostname()}:{pid}"


def requeue_interrupted(storage: str, study_name: str, dead_workers: set[str] = frozenset()) -> list[int] | None:
    """After Ctrl-C: queue the trials that were cut short again with the same parameters and run
    directory, so `--resume` continues each from its last checkpoint. A trial still RUNNING on a
    worker of `dead_workers` (terminated before it could say so) is failed first. Returns the
    numbers of the trials queued again, or None when the study was never created."""
    with deferred_interrupt():
        return _requeue_interrupted(storage, study_name, dead_workers)


def _requeue_interrupted(storage: str, study_name: str, dead_workers: set[str]) -> list[int] | None:
    if study_name not in optuna.get_all_study_names(storage):
        return None
    study = optuna.load_study(study_name=study_name, storage=storage)
    trials = study.get_trials(deepcopy=False)
    for t in trials:
        if t.state == TrialState.RUNNING and t.user_attrs.get("worker") in dead_workers:
            study._storage.set_trial_user_attr(t._trial_id, "status", "interrupted")
            study._storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
    trials = study.get_trials(deepcopy=False)
    retried = {t.system_attrs.get("failed_trial") for t in trials}
    cut = [t for t in trials if t.state == TrialState.FAIL and t.number not in retried
           and t.user_attrs.get("status") == "interrupted"]
    for t in cut:
        study.add_trial(optuna.create_trial(state=TrialState.WAITING, params=t.params,
                                            distributions=t.distributions, user_attrs=t.user_attrs,
                                            system_attrs={"failed_trial": t.number}))
    return [t.number for t in cut]
