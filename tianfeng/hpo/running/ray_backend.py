"""The Ray Tune backend: Ray places the trials (local processes or a multi-machine cluster, with
CPUs and GPUs per trial) and stops losers with its own ASHA; the Optuna study stays the record.

The driver asks the study for each trial (so samplers, priors, warm starts and the trial budget
behave as with the local backend), builds and records its proxy run, and tells the study every
epoch and the outcome. A trial runs the same engine on a Ray worker and reports each epoch
through `ray.tune.report`. Reports and `tianfeng promote` therefore do not see which backend ran.
"""

from __future__ import annotations

import contextlib
import logging
import math
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState
from ray.tune.search import Searcher

from tianfeng.core.errors import ConfigError
from tianfeng.core.run_config import config_to_dict
from tianfeng.defaults import ObjectiveMode
from tianfeng.hpo.judge.peers import PeerPruner
from tianfeng.hpo.judge.pruning import judging
from tianfeng.hpo.running.budget import Budget, counted, raise_if_failing, repeated_failure
from tianfeng.hpo.running.locked_storage import worker_id
from tianfeng.hpo.running.objective import (
    objective_value,
    objective_values,
    prepare_trial,
    record_final,
)
from tianfeng.hpo.running.progress import StudyProgress
from tianfeng.hpo.running.runner import new_stream, requeue_interrupted, sampler_seed
from tianfeng.hpo.running.study import open_study
from tianfeng.hpo.running.trial_log import TrialLogger, log_objective
from tianfeng.hpo.space.read import SearchSpace
from tianfeng.hpo.spec import SearchSpec, rung_epochs, space_of
from tianfeng.hpo.trial_attrs import TrialKey, TrialStatus, set_status
from tianfeng.launch.ray_cluster import start_or_join
from tianfeng.terminal.interrupts import deferred_interrupt
from tianfeng.terminal.logs import quiet_optuna

log = logging.getLogger("tianfeng.search")

RAY_PRUNERS = {"asha": "ASHA (Ray AsyncHyperBandScheduler, one bracket)",
               "sh": "ASHA (asynchronous successive halving)",
               "hyperband": "Ray AsyncHyperBandScheduler, three brackets",
               "median": "Ray MedianStoppingRule", "none": "Ray FIFOScheduler"}


@dataclass(frozen=True)
class RayOptions:
    address: str | None = None  # None starts a local Ray; "auto" or HOST:PORT joins a cluster
    cpus_per_trial: float = 1.0
    gpus_per_trial: float | None = None  # None: one GPU per trial on a cluster that has GPUs, else 0
    trainer: str = "tianfeng.trainers.engine:train"  # module:function the workers run (benchmarks swap it)


def ray_trial(config: dict[str, Any]) -> None:
    """One trial on a Ray worker: the engine's proxy run, each epoch reported to Tune."""
    import importlib

    import torch
    from ray import tune

    from tianfeng.core.run_config import config_from_dict

    module, function = config["trainer"].split(":")
    train = getattr(importlib.import_module(module), function)
    torch.set_num_threads(max(1, int(config["threads"])))
    cfg = config_from_dict(config["run_config"], f"trial {config['trial_number']}")
    last: dict[str, Any] = {"worker": worker_id()}

    def report(m) -> None:
        last.update(asdict(m), status=TrialStatus.RUNNING)
        tune.report(dict(last))

    result = train(cfg, report)
    if result.status not in (TrialStatus.COMPLETED, TrialStatus.STOPPED):  # diverged: one last report says so
        worst = -math.inf if config["maximize"] else math.inf
        epoch = last.get("epoch", 0)
        tune.report({**last, config["metric"]: worst, "epoch": epoch, "status": result.status,
                     "message": result.message})


class StudySearcher(Searcher):
    """A Ray Tune searcher backed by an Optuna study through ask and tell."""

    def __init__(self, study: optuna.Study, space: SearchSpace, spec: SearchSpec, options: RayOptions,
                 progress: StudyProgress | None = None) -> None:
        super().__init__()
        self.study, self.space, self.spec, self.progress = study, space, spec, progress
        self.threads, self.trainer = max(1, int(options.cpus_per_trial)), options.trainer
        self.cores = options.cpus_per_trial
        self.budget = Budget(spec.options.trials, spec.epoch_budget, rung_epochs(space, spec.rung))
        self.epochs: dict[str, int] = {}  # each Ray trial's own epochs at the rung (they differ per trial)
        self.log_trial = TrialLogger(space.objective.metric)
        self.trials: dict[str, optuna.Trial] = {}
        self.values: dict[str, dict[int, float]] = {}  # epoch -> value, per Ray trial
        self.runs_root = Path(spec.runs_root).resolve()  # workers run elsewhere

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles its searcher into the experiment directory; the study (a database
        # connection) and the live progress view stay behind and are reopened if it is restored
        return {k: v for k, v in self.__dict__.items() if k not in ("study", "progress", "trials")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.study = optuna.load_study(study_name=self.spec.study, storage=self.spec.options.storage)
        self.progress, self.trials = None, {}

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict, **spec: Any) -> bool:
        return True  # metric and mode come from the space

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        if self.budget.exhausted(self.study) or repeated_failure(self.study, self.spec.options.failure_limit):
            return Searcher.FINISHED
        trial = self.study.ask()
        cfg = prepare_trial(trial, self.space, self.spec.study, self.runs_root, self.spec.rung,
                            cores=self.cores, worker="ray (waiting for a worker)",
                            # the trial trains on a Ray worker, not this driver: only the option sizes it
                            memory_gib=self.spec.options.trial_memory_gib, detect_memory=False)
        trial.set_user_attr(TrialKey.BACKEND, "ray")
        self.trials[trial_id], self.values[trial_id] = trial, {}
        self.epochs[trial_id] = cfg.total_epochs
        return {"run_config": config_to_dict(cfg), "trial_number": trial.number, "threads": self.threads,
                "trainer": self.trainer,
                "metric": self.space.objective.metric,
                "maximize": self.space.objective.direction == "maximize"}

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        trial, values = self.trials.get(trial_id), self.values.get(trial_id)
        value = result.get(self.space.objective.metric)
        if trial is None or result.get("status") != TrialStatus.RUNNING or value is None or not math.isfinite(value):
            return
        epoch = int(result["epoch"])
        if not values and "worker" in result:
            trial.set_user_attr(TrialKey.WORKER, result["worker"])
        if epoch not in values:
            if self.space.objective.mode == ObjectiveMode.ACCURACY:
                trial.report(float(value), epoch)
            else:  # Optuna keeps no intermediate values for these modes
                trial.set_user_attr(TrialKey.CURVE, {**trial.user_attrs.get(TrialKey.CURVE, {}), str(epoch): float(value)})
            values[epoch] = float(value)

    def save(self, checkpoint_path: str) -> None:
        pass  # the study is the record; nothing to save beside it

    def restore(self, checkpoint_path: str) -> None:
        pass

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        if trial_id not in self.trials:
            return
        result = result or {}
        self.on_trial_result(trial_id, result)  # a result that stopped the trial skips on_trial_result
        with deferred_interrupt():  # written whole: cut in between, it would be RUNNING yet forgotten
            trial = self._finish(trial_id, result, error)
        frozen = next(t for t in self.study.get_trials(deepcopy=False) if t.number == trial.number)
        self.log_trial(self.study, frozen)
        if self.progress is not None:
            self.progress.update(self.study)

    def _finish(self, trial_id: str, result: dict, error: bool) -> optuna.Trial:
        """Tell the study how the trial ended, and forget it."""
        trial, values = self.trials.pop(trial_id), list(self.values.pop(trial_id).values())
        own_epochs = self.epochs.pop(trial_id)
        status = result.get("status", TrialStatus.FAILED if error else TrialStatus.RUNNING)
        epochs = int(result.get("epoch", 0))
        if error:
            set_status(trial, TrialStatus.FAILED)
            trial.set_user_attr(TrialKey.ERROR, "the trial raised on its Ray worker; see error.txt in "
                                         f"{ray_folder(self.spec)}")
            self.study.tell(trial, state=TrialState.FAIL)
        elif status == TrialStatus.DIVERGED:
            set_status(trial, TrialStatus.DIVERGED)
            trial.set_user_attr(TrialKey.MESSAGE, result.get("message", ""))
            self.study.tell(trial, state=TrialState.PRUNED)
        elif epochs < own_epochs:  # Ray's scheduler stopped it before its last epoch
            set_status(trial, TrialStatus.PRUNED)
            self.study.tell(trial, state=TrialState.PRUNED)
        else:
            set_status(trial, TrialStatus.COMPLETED)
            final = {k: result[k] for k in self.space_metrics() if k in result}
            record_final(trial, self.space, final)
            value = objective_value(self.space, values)
            if math.isfinite(value):
                self.study.tell(trial, objective_values(trial, self.space.objective, value))
            else:
                self.study.tell(trial, state=TrialState.PRUNED)
        return trial

    def close_unfinished(self) -> list[int]:
        """Trials Ray never finished (Ctrl-C, time budget): failed with status `interrupted`, so
        `--resume` queues them again from their checkpoints. Asked trials have no heartbeat."""
        numbers = []
        for trial in self.trials.values():
            set_status(trial, TrialStatus.INTERRUPTED)
            self.study.tell(trial, state=TrialState.FAIL)
            numbers.append(trial.number)
        self.trials.clear()
        return numbers

    @staticmethod
    def space_metrics() -> tuple[str, ...]:
        from tianfeng.core.epoch_metrics import EpochMetrics

        return tuple(EpochMetrics.__dataclass_fields__)


def _scheduler(pruner: str, epochs: int):
    from ray.tune.schedulers import AsyncHyperBandScheduler, FIFOScheduler, MedianStoppingRule

    from tianfeng.hpo.sampling.registry import asha_first_rung

    first_rung = asha_first_rung(epochs) if pruner == "asha" else max(1, epochs // 3)
    if pruner in ("asha", "sh", "hyperband"):
        return AsyncHyperBandScheduler(time_attr="epoch", max_t=epochs, grace_period=first_rung,
                                       reduction_factor=3, brackets=3 if pruner == "hyperband" else 1)
    if pruner == "median":
        return MedianStoppingRule(time_attr="epoch", grace_period=first_rung, min_samples_required=3)
    return FIFOScheduler()


def default_gpus(options: RayOptions, resources: dict[str, float]) -> RayOptions:
    """Unset --gpus-per-trial: a GPU per trial where the cluster has GPUs (a trial given none
    would train on the CPU beside idle GPUs), none elsewhere."""
    if options.gpus_per_trial is not None:
        return options
    gpus = 1.0 if resources.get("GPU", 0.0) >= 1 else 0.0
    if gpus:
        log.info("the Ray cluster has %g GPUs: one per trial (--gpus-per-trial to change it)", resources["GPU"])
    return replace(options, gpus_per_trial=gpus)


def connect(options: RayOptions) -> tuple[dict[str, float], RayOptions]:
    """Start or join Ray and check that one trial's resources exist; returns the cluster's and
    the options with the GPUs per trial decided."""
    import ray  # the flags' values were checked with the others (SearchOptions.checked)

    # trials keep the driver's working directory (relative data paths) and decode cache
    start_or_join(options.address, env={"RAY_CHDIR_TO_TRIAL_DIR": "0"}, log_to_driver=False)
    resources = ray.cluster_resources()
    options = default_gpus(options, resources)
    for flag, key, wanted in (("--cpus-per-trial", "CPU", options.cpus_per_trial),
                              ("--gpus-per-trial", "GPU", options.gpus_per_trial)):
        have = resources.get(key, 0.0)
        if wanted > have:
            raise ConfigError(flag, "", f"a trial asks for {wanted:g} {key}s but the Ray cluster "
                                        f"({options.address or 'local'}) has {have:g}")
    return resources, options


def ray_folder(spec: SearchSpec) -> Path:
    """Ray Tune's experiment folder: inside the study's own run folder."""
    return Path(spec.runs_root).resolve() / spec.study / "ray"


def run_ray_search(spec: SearchSpec, options: RayOptions, *, resume: bool) -> optuna.Study:
    quiet_optuna()
    space = space_of(spec)
    resources, options = connect(options)
    from ray import tune

    if not spec.options.verbose:
        logging.getLogger("tianfeng.engine").setLevel(logging.WARNING)
    study = open_study(spec, space, resume=resume, heartbeat=False,
                       seed=sampler_seed(spec, 0, new_stream() if resume else 0))
    log_objective(space, spec.promotion_rule)
    epochs = rung_epochs(space, spec.rung)
    pruner = spec.options.pruner
    if isinstance(judging(space, spec.rung, pruner).pruner, PeerPruner):
        log.warning("Ray's schedulers stop trials on the metric alone; with objective %s no trial is "
                    "pruned under --backend ray (the optuna backend compares trials of similar "
                    "predicted time)", space.objective.mode)
        pruner = "none"
    done = len(counted(study))
    concurrent = int(resources.get("CPU", 1) // options.cpus_per_trial)
    if options.gpus_per_trial:
        concurrent = min(concurrent, int(resources.get("GPU", 0) // options.gpus_per_trial))
    log.info("study %s on Ray (%g CPUs, %g GPUs; up to %d trials at once): %d of %d trials done; "
             "sampler %s, scheduler %s, rung %s", spec.study, resources.get("CPU", 0),
             resources.get("GPU", 0), concurrent, done, spec.options.trials, spec.sampler,
             RAY_PRUNERS[pruner], spec.rung)
    with StudyProgress(spec.options.trials, space.objective.metric) as progress:
        searcher = StudySearcher(study, space, spec, options, progress)
        trainable = tune.with_resources(ray_trial, {"cpu": options.cpus_per_trial,
                                                    "gpu": options.gpus_per_trial})
        tuner = tune.Tuner(
            trainable,
            tune_config=tune.TuneConfig(
                search_alg=searcher, scheduler=_scheduler(pruner, epochs),
                metric=space.objective.metric, mode="max" if space.objective.direction == "maximize" else "min",
                num_samples=max(1, spec.options.trials - done), time_budget_s=spec.options.timeout_s, reuse_actors=True),
            run_config=tune.RunConfig(name=ray_folder(spec).name, storage_path=str(ray_folder(spec).parent), verbose=0,
                                      failure_config=tune.FailureConfig(max_failures=0)))
        try:
            with contextlib.redirect_stdout(sys.stderr):  # Tune's own tables are logs, not results
                tuner.fit()
        finally:
            cut = searcher.close_unfinished()
            requeue_interrupted(spec.options.storage, spec.study)
            if cut:
                log.warning("trial(s) %s did not finish under Ray; --resume runs them again",
                            ", ".join(map(str, cut)))
    raise_if_failing(spec, study)
    return study
