"""One line per finished trial, and the lines that say what a search optimises and spends."""

from __future__ import annotations

import logging

import optuna
from optuna.trial import TrialState

from tianfeng.core.lr_schedule import peak_lr
from tianfeng.core.run_config import config_from_dict
from tianfeng.cost.walltime import format_seconds
from tianfeng.defaults import ObjectiveMode
from tianfeng.hpo.judge.scores import best_trial, epochs_reported, score
from tianfeng.hpo.space.read import SearchSpace
from tianfeng.hpo.spec import UNLIMITED_TRIALS, SearchSpec
from tianfeng.hpo.trial_attrs import TrialKey, TrialStatus

log = logging.getLogger("tianfeng.search")


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
        predicted = trial.user_attrs.get(TrialKey.PREDICTED)
        full = f"full run {format_seconds(predicted['seconds'])} ({predicted['gpu_hours']:.3g} GPU-h)  " \
            if predicted else ""
        full += effective_lr_text(trial.user_attrs.get(TrialKey.CONFIG))
        if trial.state == TrialState.COMPLETE:
            best = best_trial(study)
            best_text = f"best {score(best):.4g} (#{best.number})" if best else ""
            log.info("trial %d completed  %s %.4g  %s  %.1fs  %s%s", trial.number, self.metric,
                     score(trial), best_text, took, full, params)
        elif trial.state == TrialState.PRUNED:
            why = "diverged" if trial.user_attrs.get(TrialKey.STATUS) == TrialStatus.DIVERGED else f"at epoch {epochs_reported(trial)}"
            log.info("trial %d pruned %s  %.1fs  %s%s", trial.number, why, took, full, params)
        else:
            log.warning("trial %d %s  %.1fs  %s  %s", trial.number, trial.state.name.lower(), took,
                        params, trial.user_attrs.get(TrialKey.ERROR, ""))


def _short(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def budget_text(spec: SearchSpec) -> str:
    """The spec's budget as a person would say it: "12 trials", "45 min", "72 epochs or 10 min"."""
    parts = [f"{spec.options.trials} trials"] if spec.options.trials < UNLIMITED_TRIALS else []
    if spec.epoch_budget is not None:
        parts.append(f"{spec.epoch_budget} epochs")
    if spec.options.timeout_s is not None:
        parts.append(f"{spec.options.timeout_s / 60:g} min")
    return " or ".join(parts) or "unlimited"


def log_objective(space: SearchSpace, promotion_rule: str = "") -> None:
    """Say once what the search optimises, for which cluster, and (`promotion_rule`) whether its
    leaders train whole during it."""
    o = space.objective
    said = {ObjectiveMode.ACCURACY: f"{'maximise' if o.direction == 'maximize' else 'minimise'} {o.metric} "
                        "(--objective pareto or time-to-target weigh the predicted time too)",
            ObjectiveMode.PARETO: f"{o.metric} against the predicted wall time (a Pareto front)",
            ObjectiveMode.TIME_TO_TARGET: f"least predicted wall time with {o.metric} reaching {o.target}"}[o.mode]
    log.info("objective %s: %s; full runs predicted on %s%s", o.mode, said, space.cluster.describe(),
             f"; {promotion_rule}" if promotion_rule else "")
