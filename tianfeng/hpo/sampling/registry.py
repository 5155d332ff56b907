"""Samplers and pruners by name. Adding one is a line here (and Optuna does the work)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import optuna

from tianfeng.defaults import ObjectiveMode
from tianfeng.hpo.sampling.metric_share import N_STARTUP_TRIALS, MetricShareSampler
from tianfeng.hpo.space.read import Parameter, SearchSpace


def _grid(space: SearchSpace, points: int = 3) -> dict[str, list]:
    """Categorical choices as they are; numeric ranges at `points` evenly (or log-evenly) spaced values."""
    grid: dict[str, list] = {}
    for p in space.parameters:
        if p.type == "categorical":
            grid[p.name] = list(p.choices)
        elif p.type in ("float", "int"):
            grid[p.name] = _numeric_points(p, points)
    return grid


def _numeric_points(p: Parameter, points: int) -> list:
    if p.log:
        values = [math.exp(math.log(p.low) + (math.log(p.high) - math.log(p.low)) * i / (points - 1))
                  for i in range(points)]
    else:
        values = [p.low + (p.high - p.low) * i / (points - 1) for i in range(points)]
    if p.step:
        values = [p.low + round((v - p.low) / p.step) * p.step for v in values]
    if p.type == "int":
        values = [int(round(v)) for v in values]
    return sorted(set(values))


SAMPLERS: dict[str, Callable[[SearchSpace, int, int], optuna.samplers.BaseSampler]] = {
    # Optuna 5's TPE default: multivariate, with the constant liar for parallel workers
    "tpe": lambda space, seed, study_seed: optuna.samplers.TPESampler(seed=seed, n_startup_trials=N_STARTUP_TRIALS),
    "cmaes": lambda space, seed, study_seed: optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False),
    "random": lambda space, seed, study_seed: optuna.samplers.RandomSampler(seed=seed),
    "grid": lambda space, seed, study_seed: optuna.samplers.GridSampler(_grid(space), seed=seed),
    "qmc": lambda space, seed, study_seed: _qmc(study_seed, seed),
}


def _qmc(study_seed: int, seed: int) -> optuna.samplers.QMCSampler:
    """A scrambled Sobol sequence: without scrambling every seed draws the same points, the first
    at the low end of every range. One scramble per study (its seed), so the workers share one
    sequence (Optuna keeps its position in the study); each worker's own seed draws what the
    sequence does not (the first trial, before the space is known)."""
    with warnings.catch_warnings():  # experimental since Optuna 3.0: a user who chose it needs no warning
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.QMCSampler(seed=study_seed, scramble=True, warn_independent_sampling=False,
                                          warn_asynchronous_seeding=False,
                                          independent_sampler=optuna.samplers.RandomSampler(seed=seed))


def make_sampler(name: str, space: SearchSpace, seed: int, study_seed: int | None = None) -> optuna.samplers.BaseSampler:
    """The sampler `name` for this space, drawing with `seed` (a worker's own); `study_seed` (the
    study's, shared by its workers; default `seed`) scrambles qmc's sequence. A pareto search's
    TPE gives every other trial to the metric alone (see metric_share)."""
    if name == "tpe" and space.objective.mode == ObjectiveMode.PARETO:
        return MetricShareSampler(seed, space.objective.direction)
    return SAMPLERS[name](space, seed, seed if study_seed is None else study_seed)


LONG_RUN_EPOCHS = 27  # enough epochs for ASHA's three rungs (a ninth, a third, the end) at factor 3


def asha_first_rung(epochs: int) -> int:
    """ASHA's first rung for trials of `epochs`. Short runs (the shipped space's proxy rung trains
    at most 17) are judged once, a third of the way in, the rule its cifar5-dev searches were
    measured with: a ninth would be their first epoch or two. Runs of 27 epochs or
    more are first judged a ninth of the way in and again at a third, as Hyperband-style ladders
    do; on LCBench's 52-epoch curves this lowered the regret at half the budget and at its end (see
    the results page). Trials still warming up are not judged at either (see past_warmup)."""
    if epochs >= LONG_RUN_EPOCHS:
        return max(1, round(epochs / 9))
    return max(1, epochs // 3)


PRUNERS: dict[str, Callable[[int], optuna.pruners.BasePruner]] = {
    "asha": lambda epochs: optuna.pruners.SuccessiveHalvingPruner(min_resource=asha_first_rung(epochs),
                                                                  reduction_factor=3),
    "sh": lambda epochs: optuna.pruners.SuccessiveHalvingPruner(min_resource=max(1, epochs // 4),
                                                                reduction_factor=2),
    "hyperband": lambda epochs: optuna.pruners.HyperbandPruner(min_resource=max(1, epochs // 3),
                                                              max_resource=max(epochs, 2), reduction_factor=3),
    "median": lambda epochs: optuna.pruners.MedianPruner(n_startup_trials=4, n_warmup_steps=max(1, epochs // 3)),
    "none": lambda epochs: optuna.pruners.NopPruner(),
}

