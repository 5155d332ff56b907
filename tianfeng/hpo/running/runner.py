"""Running a study: the search's worker processes (or this one), Ctrl-C and requeueing the trials
it cut, and the result."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import multiprocessing
import os
import pickle
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import optuna
from optuna.trial import TrialState

from tianfeng.core.cores import usable_cores
from tianfeng.hpo.judge.pruning import judging
from tianfeng.hpo.optuna_private import storage_of, trial_id
from tianfeng.hpo.running.budget import (
    Budget,
    StopOnRepeatedFailure,
    finished_count,
    raise_if_failing,
    repeated_failure,
)
from tianfeng.hpo.running.locked_storage import (
    BudgetReached,
    MarkingStorage,
    interrupts_through_optuna,
    worker_id,
)
from tianfeng.hpo.running.objective import ProxyObjective
from tianfeng.hpo.running.progress import StudyProgress
from tianfeng.hpo.running.stale_trials import watch_until_others_end
from tianfeng.hpo.running.study import (
    open_storage,
    open_study,
)
from tianfeng.hpo.running.trial_log import TrialLogger, budget_text, log_objective
from tianfeng.hpo.sampling.registry import make_sampler
from tianfeng.hpo.space.read import SearchSpace
from tianfeng.hpo.spec import UNLIMITED_TRIALS, SearchSpec, rung_epochs, space_of
from tianfeng.hpo.trial_attrs import TrialKey, TrialStatus
from tianfeng.terminal.interrupts import (
    deferred_interrupt,
    held_for_children,
    raise_if_interrupted,
    run_quietly,
)
from tianfeng.terminal.logs import quiet_optuna

log = logging.getLogger("tianfeng.search")


def run_worker(spec: SearchSpec, worker: int = 0, threads: int | None = None,
               progress: StudyProgress | None = None, stream: int = 0, space: SearchSpace | None = None,
               after_trial: Callable[[optuna.Study, optuna.trial.FrozenTrial], None] | None = None,
               idle: Callable[[optuna.Study], None] | None = None) -> None:
    """One worker: run trials of the study until the budget or the timeout is reached, then stay
    while other workers run trials, to continue any whose worker dies. `space`: the spec's space
    when this process has already read it; `after_trial`: called after each of its trials, after
    the budget and the progress bar have seen it; `idle`: called every second while it stays."""
    from tianfeng.terminal.logs import setup_logging

    if worker > 0:  # a spawned process: set up logging and the worker's share of the cores
        setup_logging()
    if not spec.options.verbose:  # per-trial lines only; the engine's epoch lines with --verbose
        logging.getLogger("tianfeng.engine").setLevel(logging.WARNING)
    if threads:
        import torch

        torch.set_num_threads(threads)
    # a failed trial is one line of ours (TrialLogger); Optuna's traceback only with --debug
    quiet_optuna()
    space = space if space is not None else space_of(spec)
    judge = judging(space, spec.rung, spec.options.pruner)
    storage = open_storage(spec.options.storage, spec.options.heartbeat_s, spec.options.grace_s)
    study = optuna.load_study(study_name=spec.study, storage=storage,
                              sampler=make_sampler(spec.sampler, space, sampler_seed(spec, worker, stream), spec.options.seed),
                              pruner=judge.pruner)
    budget = Budget(spec.options.trials, spec.epoch_budget, rung_epochs(space, spec.rung))
    if isinstance(storage, MarkingStorage):  # the count checked as each trial starts
        storage.limit(spec.study, budget.may_start)
    ranks = trial_ranks(spec)
    objective = ProxyObjective(space, spec.study, Path(spec.runs_root), spec.rung,
                               memory_gib=spec.options.trial_memory_gib, ranks=ranks,
                               **({"trainer": ranked_trainer(ranks, threads)} if ranks > 1 else {}))
    callbacks = [budget, StopOnRepeatedFailure(spec.options.failure_limit), TrialLogger(space.objective.metric)] + (
        [progress.update] if progress else []) + [lambda study, trial: raise_if_interrupted()] + (
        [after_trial] if after_trial else [])
    if spec.pause_file:  # before the first trial too: a worker may start while a promoted run trains
        callbacks.append(WaitWhilePaused(Path(spec.pause_file)))
        callbacks[-1].wait()
    deadline = time.monotonic() + spec.options.timeout_s if spec.options.timeout_s else None

    def run_trials() -> None:
        if budget.exhausted(study) or (deadline is not None and time.monotonic() >= deadline):
            return
        # any error fails the trial, not the search; repeated_failure stops a search that cannot work
        with contextlib.suppress(BudgetReached), interrupts_through_optuna():
            study.optimize(objective, timeout=None if deadline is None else deadline - time.monotonic(),
                           callbacks=callbacks, catch=(Exception,))

    run_trials()
    if not repeated_failure(study, spec.options.failure_limit):  # a search that cannot work ends here
        watch_until_others_end(study, run_trials, deadline=deadline, idle=idle)


class WaitWhilePaused:
    """An Optuna callback: after a trial, start no other while the file exists."""

    def __init__(self, path: Path, every_s: float = 0.5) -> None:
        self.path, self.every_s = path, every_s

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        self.wait()

    def wait(self) -> None:
        while self.path.exists():
            time.sleep(self.every_s)
            raise_if_interrupted()


def sampler_seed(spec: SearchSpec, worker: int, stream: int) -> int:
    """Each worker of each process draws from its own stream, and so does each --seed. A new
    study's worker 0 (the search process itself: a one-worker search, or `--promote leader`'s
    own worker) draws from the seed, so a one-worker search repeats with the same --seed; every
    other worker, and a process joining or resuming a study (stream != 0, or it would sample the
    study's first trials again), from a hash of (seed, worker, stream). Not seed + worker: --seed
    1's worker 1 would draw --seed 2's worker 0's trials, and two seeds would share half their
    trials."""
    if stream == 0 and worker == 0:
        return spec.options.seed
    return derived_seed(spec.options.seed, worker, stream)


def derived_seed(*keys: int) -> int:
    """A 32-bit seed of its own for each tuple of keys (numpy's SeedSequence hash)."""
    import numpy as np

    return int(np.random.SeedSequence(keys).generate_state(1)[0])


ExclusiveWork = Callable[[optuna.Study], Callable[[], None] | None]


def run_search(spec: SearchSpec, workers: int | str, *, resume: bool, space: SearchSpace | None = None,
               progress: bool = True, between_trials: ExclusiveWork | None = None) -> optuna.Study:
    """Run the spec's study with `workers` local processes (a count, or auto: see hpo/workers.py).
    `space`: the spec's space when the caller has read it (each worker process reads its own);
    `progress`: the live bar on a terminal. `between_trials(study)`: asked after each trial of
    this process and, once it has none left, until the others end; the work it returns (or None)
    runs here with every core while the other workers start no trial (see `_run_with_exclusive`)."""
    from tianfeng.hpo.workers import resolve_workers

    quiet_optuna()
    space = space if space is not None else space_of(spec)
    log_objective(space, spec.promotion_rule)  # the first line: what is searched, and how
    study = open_study(spec, space, resume=resume)
    done = finished_count(study)
    workers, why = resolve_workers(workers, spec.options.trials - done, per_trial=trial_ranks(spec))
    log.info("study %s: %d trials done, budget %s; sampler %s, pruner %s, rung %s, %d worker(s) (%s)",
             spec.study, done, budget_text(spec), spec.sampler, judging(space, spec.rung, spec.options.pruner).label, spec.rung, workers, why)
    total = spec.options.trials if spec.options.trials < UNLIMITED_TRIALS else None  # None: rich draws a pulsing bar
    stream = new_stream() if resume else 0
    with StudyProgress(total, space.objective.metric, enabled=progress) as bar:
        bar.update(study)
        bar.follow(study)
        if between_trials is not None:
            _run_with_exclusive(spec, workers, study, space, bar, stream, between_trials)
        elif workers <= 1:
            try:
                run_worker(spec, progress=bar, stream=stream, space=space, idle=bar.update)
            except KeyboardInterrupt:  # this process was the worker: none of its trials still runs
                requeue_interrupted(spec.options.storage, spec.study, dead_workers={worker_id()})
                raise
        else:
            _run_processes(spec, workers, study, bar, stream)
    raise_if_failing(spec, study)
    return study


def trial_ranks(spec: SearchSpec) -> int:
    """DDP processes per trial: --gpus-per-trial with the optuna backend (Ray's is a share)."""
    g = spec.options.gpus_per_trial
    return int(g) if spec.options.backend == "optuna" and g else 1


def ranked_trainer(ranks: int, threads: int | None):
    """Trials on `ranks` processes of this node: this worker's GPUs (nccl), else CPU ranks
    (gloo) sharing its cores."""
    import torch

    from tianfeng.hpo.running.ranked_trial import RankedTrainer

    if torch.cuda.is_available():
        return RankedTrainer(ranks, "cuda")
    return RankedTrainer(ranks, "cpu", threads=max(1, (threads or torch.get_num_threads()) // ranks))


def new_stream() -> int:
    """A seed stream no other process is using: from the OS's entropy, not the clock."""
    return int.from_bytes(os.urandom(4), "little") or 1


def _run_processes(spec: SearchSpec, workers: int, study: optuna.Study, progress: StudyProgress,
                   stream: int = 0) -> None:
    procs = _worker_processes(spec, range(1, workers + 1), max(1, usable_cores() // workers), stream,
                              worker_gpus(workers, per_worker=trial_ranks(spec)))
    try:
        _start(procs)
        while any(p.is_alive() for p in procs):
            raise_if_interrupted()
            progress.update(study)
            for p in procs:
                p.join(timeout=1.0 / len(procs))
    except KeyboardInterrupt:
        _interrupt(procs)
        requeue_interrupted(spec.options.storage, spec.study, dead_workers={worker_id(p.pid) for p in procs})
        raise
    _warn_abnormal(procs)


def _worker_processes(spec: SearchSpec, numbers: range, threads: int, stream: int,
                      gpus: list[str | None]) -> list[multiprocessing.Process]:
    """Worker `n` of `numbers` as a spawned process (not started), on `gpus[n - 1]`."""
    ctx = multiprocessing.get_context("spawn")
    return [ctx.Process(target=run_quietly, args=(__name__, "_worker_process",
                                                  pickle.dumps((spec, n, threads, stream, gpus[n - 1]))),
                        name=f"tianfeng-worker-{n}") for n in numbers]


def _start(procs: list[multiprocessing.Process]) -> None:
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()  # its own start unblocks Ctrl-C: start it before holding it
    for p in procs:
        with held_for_children():
            p.start()


def _run_with_exclusive(spec: SearchSpec, workers: int, study: optuna.Study, space: SearchSpace,
                        progress: StudyProgress, stream: int, between_trials: ExclusiveWork) -> None:
    """This process is worker 0 of `workers` (its trials on the first GPU, if any), the others are
    spawned. Before any trial (a resumed search first finishes the work it was cut in), after
    each of its trials, and every second once it has none left until the others end, it asks
    `between_trials`; work it returns runs here with every core while a pause file keeps the
    others from starting a trial (each finishes the one it runs first)."""
    import torch

    cores, before = usable_cores(), torch.get_num_threads()
    threads = max(1, cores // workers)
    with tempfile.TemporaryDirectory(prefix="tianfeng-search-") as folder:
        paused = Path(folder) / "paused"

        def run_due(study: optuna.Study, *_: object) -> None:
            work = between_trials(study)
            if work is None:
                return
            paused.touch()
            torch.set_num_threads(cores)
            try:
                with progress.hidden():
                    work()
            finally:
                torch.set_num_threads(threads)
                paused.unlink(missing_ok=True)

        gpus = worker_gpus(workers, per_worker=trial_ranks(spec))  # worker n on gpus[n]: this process has the first
        procs = _worker_processes(dataclasses.replace(spec, pause_file=str(paused)), range(1, workers), threads,
                                  stream, gpus[1:] + gpus[:1])
        try:
            run_due(study)
            _start(procs)
            run_worker(spec, 0, threads, progress=progress, stream=stream, space=space, after_trial=run_due,
                       idle=lambda study: (progress.update(study), run_due(study)))
            while any(p.is_alive() for p in procs):
                raise_if_interrupted()
                progress.update(study)
                for p in procs:
                    p.join(timeout=1.0 / len(procs))
                run_due(study)
            run_due(study)
        except KeyboardInterrupt:
            _interrupt(procs)
            requeue_interrupted(spec.options.storage, spec.study,
                                dead_workers={worker_id()} | {worker_id(p.pid) for p in procs})
            raise
        finally:
            torch.set_num_threads(before)
    _warn_abnormal(procs)


def _warn_abnormal(procs: list[multiprocessing.Process]) -> None:
    failed = [f"{p.name} ({exit_text(p.exitcode)})" for p in procs if p.exitcode not in (0, None)]
    if failed:
        log.warning("worker(s) %s exited abnormally; their running trials are retried once their heartbeat is "
                    "missed, by a worker still running or on --resume",
                    ", ".join(failed))


def exit_text(code: int) -> str:
    """A process's exit code as words: a negative one is the signal that killed it."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def worker_gpus(workers: int, visible: str | None = None, count: int | None = None,
                per_worker: int = 1) -> list[str | None]:
    """The GPUs each local worker sees (CUDA_VISIBLE_DEVICES), `per_worker` consecutive ones
    (a trial's DDP ranks), round robin over the GPUs this process sees; all None without GPUs.
    Each worker's trials then run on its own `cuda:0` (to `cuda:{per_worker - 1}`)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    if visible is not None:
        ids = [v.strip() for v in visible.split(",") if v.strip()]
    else:
        import torch

        ids = [str(i) for i in range(torch.cuda.device_count() if count is None else count)]
    if not ids:
        return [None] * workers
    sets = [",".join(ids[i:i + per_worker]) for i in range(0, len(ids) - per_worker + 1, per_worker)] or [
        ",".join(ids)]
    return [sets[i % len(sets)] for i in range(workers)]


def _one_line_thread_error(args: threading.ExceptHookArgs) -> None:
    """A background thread's failure (Optuna's heartbeat meeting a locked or lost database) is
    one line on stderr, not a traceback; the trial it heartbeats goes stale and is retried."""
    if args.exc_type is SystemExit:
        return
    log.warning("background thread %s: %s: %s", args.thread.name if args.thread else "?",
                args.exc_type.__name__, str(args.exc_value).strip().splitlines()[0] if str(args.exc_value).strip() else "")


def _worker_process(spec: SearchSpec, worker: int, threads: int, stream: int, gpu: str | None = None) -> None:
    """A spawned worker: on its own GPU if there are any (set before CUDA starts in this process);
    Ctrl-C ends it quietly (its trial is already marked interrupted)."""
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    threading.excepthook = _one_line_thread_error
    try:
        run_worker(spec, worker, threads, stream=stream)
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


def requeue_interrupted(storage: str, study_name: str, dead_workers: set[str] = frozenset()) -> list[int] | None:
    """After Ctrl-C: queue the trials that were cut short again with the same parameters and run
    directory, so `--resume` continues each from its last checkpoint. A trial still RUNNING on a
    worker of `dead_workers` (cut before its objective ran, or terminated before it could say so)
    is failed first. Returns the numbers of the cut trials whose continuation waits in the queue
    (queued now or by an earlier call), or None when the study was never created."""
    with deferred_interrupt():
        return _requeue_interrupted(storage, study_name, dead_workers)


def _requeue_interrupted(storage: str, study_name: str, dead_workers: set[str]) -> list[int] | None:
    if study_name not in optuna.get_all_study_names(storage):
        return None
    study = optuna.load_study(study_name=study_name, storage=storage)
    trials = study.get_trials(deepcopy=False)
    for t in trials:
        if t.state == TrialState.RUNNING and t.user_attrs.get(TrialKey.WORKER) in dead_workers:
            storage_of(study).set_trial_user_attr(trial_id(t), TrialKey.STATUS, TrialStatus.INTERRUPTED)
            storage_of(study).set_trial_state_values(trial_id(t), TrialState.FAIL)
    trials = study.get_trials(deepcopy=False)
    waiting = {t.system_attrs.get("failed_trial") for t in trials if t.state == TrialState.WAITING}
    retried = {t.system_attrs.get("failed_trial") for t in trials}
    cut = [t for t in trials if t.state == TrialState.FAIL and t.number not in retried
           and t.user_attrs.get(TrialKey.STATUS) == TrialStatus.INTERRUPTED]
    for t in cut:
        # a trial cut before it sampled anything keeps the values it was queued with (a prior's)
        fixed = {} if t.params else t.system_attrs.get("fixed_params", {})
        study.add_trial(optuna.create_trial(state=TrialState.WAITING, params=t.params,
                                            distributions=t.distributions, user_attrs=t.user_attrs,
                                            system_attrs={"failed_trial": t.number,
                                                          **({"fixed_params": fixed} if fixed else {})}))
    return sorted(waiting - {None} | {t.number for t in cut})
