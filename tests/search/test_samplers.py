"""The samplers `--sampler` names, as a search's workers make them."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import numpy as np
import optuna
from scipy.stats import qmc

from tianfeng.hpo.sampling.registry import make_sampler

ACCURACY = SimpleNamespace(objective=SimpleNamespace(mode="accuracy", direction="maximize"))


def _qmc_points(study_seed: int, worker_seeds: tuple[int, ...], trials: int) -> list[tuple[float, float]]:
    """`trials` points of one study whose workers (one sampler each, as the runner makes them)
    ask in turn; the first trial fixes the space, as in a search."""
    storage = optuna.storages.InMemoryStorage()
    optuna.create_study(study_name="s", storage=storage)
    points = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        workers = [optuna.load_study(study_name="s", storage=storage,
                                     sampler=make_sampler("qmc", ACCURACY, seed, study_seed)) for seed in worker_seeds]
        for i in range(trials):
            study = workers[i % len(workers)]
            trial = study.ask()
            point = (trial.suggest_float("a", 0.0, 1.0), trial.suggest_float("b", 0.0, 1.0))
            study.tell(trial, 0.0)
            points.append(point)
    return points


def test_qmc_draws_one_scrambled_sobol_sequence_per_study_seed_shared_by_the_workers() -> None:
    two_workers = _qmc_points(7, (100, 101), trials=9)
    oracle = qmc.Sobol(2, scramble=True, seed=7).random(8)  # the points after the first trial
    np.testing.assert_allclose(np.array(two_workers[1:]), oracle, rtol=0, atol=1e-12)
    assert len(set(two_workers)) == 9  # the workers share the sequence: no point twice
    one_worker = _qmc_points(7, (100,), trials=9)
    assert one_worker[1:] == two_workers[1:]
    other_seed = _qmc_points(8, (100,), trials=9)
    assert not set(other_seed[1:]) & set(one_worker[1:])  # --seed changes the points
    assert (0.0, 0.0) not in one_worker  # unscrambled Sobol starts at the low corner
