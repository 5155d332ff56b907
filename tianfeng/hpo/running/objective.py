"""One Optuna trial: sample the space, build the proxy run, train it, report every epoch."""

from __future__ import annotations

import logging
import math
import shutil
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import optuna

from tianfeng.core.epoch_metrics import EpochMetrics
from tianfeng.core.errors import ConfigError
from tianfeng.core.names import STUDY_MAX_LENGTH, check_name
from tianfeng.core.run_config import RunConfig, config_to_dict, with_changes
from tianfeng.core.states import RunStatus
from tianfeng.cost.cluster import ClusterSpec
from tianfeng.cost.walltime import WallTime, check_memory, predict_wall_time
from tianfeng.defaults import ObjectiveMode
from tianfeng.hpo.judge.peers import record_rung, rung_passed
from tianfeng.hpo.optuna_private import frozen_trial
from tianfeng.hpo.running.locked_storage import worker_id
from tianfeng.hpo.space.materialize import build_config, sample_active
from tianfeng.hpo.space.read import Parameter, SearchSpace
from tianfeng.hpo.trial_attrs import TrialKey, TrialStatus, set_status
from tianfeng.trainers.data.sources import open_source
from tianfeng.trainers.engine import RunResult, StopTraining, train

log = logging.getLogger("tianfeng.search")


def suggest(trial: optuna.Trial, space: SearchSpace) -> dict[str, Any]:
    """Let Optuna sample every active parameter of the space."""

    def choose(p: Parameter) -> Any:
        if p.type == "categorical":
            return trial.suggest_categorical(p.name, list(p.choices))
        if p.type == "int":
            return trial.suggest_int(p.name, int(p.low), int(p.high), log=p.log, step=int(p.step or 1))
        return trial.suggest_float(p.name, p.low, p.high, log=p.log, step=p.step)

    return sample_active(space, choose)


def objective_value(space: SearchSpace, values: list[float]) -> float:
    """The trial's score from its per-epoch values of the objective's metric."""
    if space.objective.at == "final":
        return values[-1]
    return max(values) if space.objective.direction == "maximize" else min(values)


def trial_run_dir(runs_root: Path, study: str, trial: optuna.Trial) -> Path:
    """A retried trial inherits its original's user attributes, so it finds the original's run
    directory and resumes from its last checkpoint. A fresh trial owns a clean directory: what
    is there belonged to a deleted study of the same name."""
    inherited = trial.user_attrs.get(TrialKey.RUN_DIR)
    if inherited:
        return Path(inherited)
    check_name(study, "--study", "", max_length=STUDY_MAX_LENGTH)
    path = runs_root / study / f"trial-{trial.number}"
    if path.exists():  # only ever below runs_root/<study>: the name cannot climb out of it
        shutil.rmtree(path)
    return path


def device_memory_gib(cfg: RunConfig, given: float | None) -> float | None:
    """The memory of the device that trains `cfg` here: `given` (--trial-memory-gib), else the
    current CUDA device's when the run trains on one, else None (a CPU: host memory is not
    modelled)."""
    if given is not None:
        return given
    import torch

    if cfg.device == "cpu" or not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory / 2**30


def sized_for_device(cfg: RunConfig, space: SearchSpace, memory_gib: float | None, ranks: int = 1) -> RunConfig:
    """`cfg` with its micro-batches split to fit the devices that train the trial (a proxy
    trains every target GPU's share in one process, or in `ranks` DDP processes)."""
    if memory_gib is None:
        return cfg
    from tianfeng.cost.memory import memory_split_needed

    parts = memory_split_needed(cfg, memory_gib, in_channels=space.constants.get("channels", 3),
                                classes=space.constants.get("classes", 1000), world=ranks)
    return cfg if parts == cfg.memory_split else with_changes(cfg, memory_split=parts)


def prepare_trial(trial: optuna.Trial, space: SearchSpace, study_name: str, runs_root: Path,
                  rung: str, *, cores: float | None = None, worker: str | None = None,
                  memory_gib: float | None = None, detect_memory: bool = True, ranks: int = 1) -> RunConfig:
    """Sample the trial's values and build its proxy run, its micro-batches sized to this
    device (`memory_gib`: --trial-memory-gib; else, with `detect_memory`, this process's CUDA
    device is the one that trains it); the trial records values, rung, run directory,
    resolved config, the cores it gets and the worker running it (this process unless said
    otherwise), whichever backend then runs it. `ranks`: the DDP processes that train it (its
    batch and emulated GPUs must divide among them)."""
    import torch

    trial.set_user_attr(TrialKey.CORES, cores if cores is not None else torch.get_num_threads())
    trial.set_user_attr(TrialKey.WORKER, worker or worker_id())
    values = suggest(trial, space)
    run_dir = trial_run_dir(runs_root, study_name, trial)
    cfg = build_config(space, values, rung, name=f"{study_name}-{run_dir.name}", run_dir=str(run_dir))
    if ranks > 1:
        from tianfeng.launch.scripts import check_fits

        check_fits(cfg, 1, ranks, f"trial {trial.number} on --gpus-per-trial {ranks}")
    cfg = sized_for_device(cfg, space, device_memory_gib(cfg, memory_gib) if detect_memory else memory_gib, ranks)
    try:
        predicted = predict_trial(space, values)
    except ConfigError as exc:
        if space.objective.mode != ObjectiveMode.ACCURACY:
            raise
        log.debug("trial %d: no wall-time prediction: %s", trial.number, exc)
        predicted = None
    if predicted is not None:
        trial.set_user_attr(TrialKey.PREDICTED, {"seconds": predicted.seconds, "gpu_hours": predicted.gpu_hours,
                                          "steps": predicted.steps, "efficiency": predicted.efficiency,
                                          "cluster": space.cluster.describe(),
                                          "phases": [list(p) for p in predicted.phases],
                                          "parts": predicted.parts, "notes": list(predicted.notes)})
    trial.set_user_attr(TrialKey.VALUES, values)
    trial.set_user_attr(TrialKey.FIDELITY, rung)
    trial.set_user_attr(TrialKey.RUN_DIR, str(run_dir))
    trial.set_user_attr(TrialKey.CONFIG, config_to_dict(cfg))
    return cfg


def record_final(trial: optuna.Trial, space: SearchSpace, final: dict[str, Any]) -> None:
    """The last epoch's metrics and the objective's constraints (0 = satisfied)."""
    trial.set_user_attr(TrialKey.FINAL, final)
    for i, constraint in enumerate(space.objective.constraints):
        trial.set_constraint(f"c{i}", 0.0 if bool(constraint.evaluate(final)) else 1.0)


def mark_failed(trial: optuna.Trial, exc: Exception) -> None:
    """The trial failed with an error (it counts towards the budget); the error's first line."""
    lines = str(exc).strip().splitlines()
    set_status(trial, TrialStatus.FAILED)
    trial.set_user_attr(TrialKey.ERROR, f"{type(exc).__name__}: {lines[0][:500] if lines else ''}")


def judge_epoch(trial: optuna.Trial, objective, epoch: int, total_epochs: int, value: float) -> str | None:
    """Record the metric a trial reached at `epoch` and judge it: None to train on, else why it
    stops (pruned). Accuracy studies report to Optuna and ask its pruner; pareto and
    time-to-target ones record the curve (Optuna takes no intermediate values there) and, at a
    rung of the peer rule, ask the study's pruner (the peer rule, or nobody) themselves."""
    metric = objective.metric
    if objective.mode == ObjectiveMode.ACCURACY:
        trial.report(value, epoch)
        # after the last epoch the work is spent: the trial completes whatever a pruner says
        if epoch < total_epochs and trial.should_prune():
            return f"pruned at epoch {epoch} ({metric} {value:.4g})"
        return None
    trial.set_user_attr(TrialKey.CURVE, {**trial.user_attrs.get(TrialKey.CURVE, {}), str(epoch): value})
    rung = rung_passed(epoch, total_epochs)
    if rung is None:
        return None
    record_rung(trial, rung, value)
    if trial.study.pruner.prune(trial.study, frozen_trial(trial)):
        return f"pruned at epoch {epoch} ({metric} {value:.4g}, below the median of trials as fast or faster)"
    return None


class TrialTag(logging.Filter):
    """Prefixes a record with the trial it belongs to."""

    def __init__(self, number: int) -> None:
        super().__init__()
        self.number = number

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = f"trial {self.number}: {record.msg}"
        return True


class ProxyObjective:
    """`trainer` is the engine's `train`; the overhead benchmark swaps in one that does nothing."""

    def __init__(self, space: SearchSpace, study_name: str, runs_root: Path, rung: str,
                 trainer: Callable[..., RunResult] = train, memory_gib: float | None = None, ranks: int = 1) -> None:
        self.space, self.study_name, self.runs_root, self.rung = space, study_name, runs_root, rung
        self.trainer = trainer
        self.memory_gib = memory_gib  # --trial-memory-gib; None: the device's own
        self.ranks = ranks  # DDP processes per trial (--gpus-per-trial); `trainer` starts them

    def __call__(self, trial: optuna.Trial) -> float | tuple[float, float]:
        try:
            return self._run(trial)
        except KeyboardInterrupt:
            # cut before, during or after training (while its results are written): queued again
            # with its run directory, so a resume continues it from its last checkpoint
            set_status(trial, TrialStatus.INTERRUPTED)
            raise

    def _run(self, trial: optuna.Trial) -> float | tuple[float, float]:
        try:
            cfg = prepare_trial(trial, self.space, self.study_name, self.runs_root, self.rung,
                                memory_gib=self.memory_gib, ranks=self.ranks)
        except Exception as exc:
            mark_failed(trial, exc)
            raise
        objective = self.space.objective
        metric = objective.metric

        def report(m: EpochMetrics) -> None:
            # called only for epochs this process trained: a resumed trial reports no epoch twice
            if m.noise_scale is not None:
                trial.set_user_attr(TrialKey.NOISE_CURVE, {**trial.user_attrs.get(TrialKey.NOISE_CURVE, {}),
                                                    str(m.epoch): m.noise_scale})
            why = judge_epoch(trial, objective, m.epoch, cfg.total_epochs, getattr(m, metric))
            if why:
                raise StopTraining(RunStatus.PRUNED, why)

        tag = TrialTag(trial.number)
        engine_log = logging.getLogger("tianfeng.engine")
        engine_log.addFilter(tag)  # with --verbose, the engine's epoch lines say whose they are
        try:
            result = self.trainer(cfg, report)
        except Exception as exc:
            mark_failed(trial, exc)
            raise
        finally:
            engine_log.removeFilter(tag)
        set_status(trial, TrialStatus.of_run(result.status))
        if result.status == RunStatus.DIVERGED:
            trial.set_user_attr(TrialKey.MESSAGE, result.message)
            raise optuna.TrialPruned(f"diverged: {result.message}")
        if result.status == RunStatus.PRUNED:
            raise optuna.TrialPruned(result.message)
        record_final(trial, self.space, asdict(result.final))
        value = objective_value(self.space, [getattr(m, metric) for m in result.epochs])
        if not math.isfinite(value):
            raise optuna.TrialPruned(f"{metric} is {value}")
        return objective_values(trial, objective, value)


def objective_values(trial: optuna.Trial, objective, value: float) -> float | tuple[float, float]:
    """What Optuna is told, by mode: the metric; (metric, predicted s); or the predicted s with
    the metric's shortfall from the target as a constraint (<= 0 when reached)."""
    trial.set_user_attr(TrialKey.SCORE, value)
    seconds = trial.user_attrs[TrialKey.PREDICTED]["seconds"]
    if objective.mode == ObjectiveMode.PARETO:
        if objective.min_accuracy is not None:
            trial.set_constraint("min_accuracy", objective.min_accuracy - value)
        return value, seconds
    if objective.mode == ObjectiveMode.TIME_TO_TARGET:
        shortfall = objective.target - value if objective.direction == "maximize" else value - objective.target
        trial.set_constraint("target", shortfall)
        return seconds
    return value


def predict_trial(space, values: dict) -> WallTime:
    """The full-fidelity run of a trial's values on the space's cluster."""
    return predict_config(build_config(space, values, "target"), space.cluster, space)


def predict_config(cfg: RunConfig, cluster: ClusterSpec, space, *, memory: bool = True) -> WallTime:
    """A full run's config on `cluster` (the space's, or another world of its devices); `memory`:
    refuse a per-GPU batch the device cannot hold."""
    d = cfg.data
    source = open_source(d.source, synthetic_images=d.synthetic_images, synthetic_classes=d.synthetic_classes)
    train = int(len(source.train) * d.fraction)
    val = len(source.val)
    if cluster.train_images is not None:  # predicting a larger data set than the one searched
        val = round(val * cluster.train_images / max(1, train))
        train = cluster.train_images
    if memory:
        check_memory(cfg, cluster, in_channels=source.channels, classes=source.num_classes, source=space.path)
    return predict_wall_time(cfg, cluster, train_images=train, val_images=val,
                             classes=source.num_classes, in_channels=source.channels)
