"""One Optuna trial: sample the space, build the proxy run, train it, report every epoch."""

from __future__ import annotations

import logging
import math
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna

from tianfeng.search.materialize import build_config, sample_active
from tianfeng.search.space import Parameter, SearchSpace
from trainers.config import config_to_dict
from trainers.engine import EpochMetrics, RunResult, StopTraining, train

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


def objective_value(space: SearchSpace, epochs: list[EpochMetrics]) -> float:
    values = [getattr(m, space.objective.metric) for m in epochs]
    if space.objective.at == "final":
        return values[-1]
    return max(values) if space.objective.direction == "maximize" else min(values)


def trial_run_dir(runs_root: Path, study: str, trial: optuna.Trial) -> Path:
    """A retried trial inherits its original's user attributes, so it finds the original's run
    directory and resumes from its last checkpoint. A fresh trial owns a clean directory: what
    is there belonged to a deleted study of the same name."""
    inherited = trial.user_attrs.get("run_dir")
    if inherited:
        return Path(inherited)
    path = runs_root / study / f"trial-{trial.number}"
    if path.exists():
        shutil.rmtree(path)
    return path


class ProxyObjective:
    """`trainer` is the engine's `train`; the overhead benchmark swaps in one that does nothing."""

    def __init__(self, space: SearchSpace, study_name: str, runs_root: Path, rung: str,
                 trainer: Callable[..., RunResult] = train) -> None:
        self.space, self.study_name, self.runs_root, self.rung = space, study_name, runs_root, rung
        self.trainer = trainer

    def __call__(self, trial: optuna.Trial) -> float:
        values = suggest(trial, self.space)
        run_dir = trial_run_dir(self.runs_root, self.study_name, trial)
        cfg = build_config(self.space, values, self.rung, name=f"{self.study_name}-{run_dir.name}",
                           run_dir=str(run_dir))
        trial.set_user_attr("values", values)
        trial.set_user_attr("fidelity", self.rung)
        trial.set_user_attr("run_dir", str(run_dir))
        trial.set_user_attr("config", config_to_dict(cfg))
        metric = self.space.objective.metric

        def report(m: EpochMetrics) -> None:
            # called only for epochs this process trained: a resumed trial reports no epoch twice
            value = getattr(m, metric)
            trial.report(value, m.epoch)
            # after the last epoch the work is spent: the trial completes whatever a pruner says
            if m.epoch < cfg.total_epochs and trial.should_prune():
                raise StopTraining("pruned", f"pruned at epoch {m.epoch} ({metric} {value:.4g})")

        try:
            result = self.trainer(cfg, report)
        except KeyboardInterrupt:
            trial.set_user_attr("status", "interrupted")
            raise
        except Exception as exc:
            trial.set_user_attr("status", "failed")
            trial.set_user_attr("error", f"{type(exc).__name__}: {exc}")
            raise
        trial.set_user_attr("status", result.status)
        if result.status == "diverged":
            trial.set_user_attr("message", result.message)
            raise optuna.TrialPruned(f"diverged: {result.message}")
        if result.status == "pruned":
            raise optuna.TrialPruned(result.message)
        final = result.final
        trial.set_user_attr("final", {k: getattr(final, k) for k in final.__dataclass_fields__})
        for i, constraint in enumerate(self.space.objective.constraints):
            ok = bool(constraint.evaluate({k: getattr(final, k) for k in final.__dataclass_fields__}))
            trial.set_constraint(f"c{i}", 0.0 if ok else 1.0)
        value = objective_value(self.space, result.epochs)
        if not math.isfinite(value):
            raise optuna.TrialPruned(f"{metric} is {value}")
        return value
