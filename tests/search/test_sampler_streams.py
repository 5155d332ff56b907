"""Every worker of every --seed draws from a stream of its own: two seeds of a multi-worker search
share no trials, and a one-worker search keeps its stream."""

from __future__ import annotations

import optuna

from tianfeng.hpo.running.runner import sampler_seed
from tianfeng.hpo.spec import SearchSpec


def _spec(seed: int) -> SearchSpec:
    return SearchSpec.of(objective="accuracy", space_path="s.yaml", data=None, storage="sqlite:///s.db", study="s",
                      sampler="tpe", pruner="asha", seed=seed, trials=10, timeout_s=None, runs_dir="runs",
                      rung="proxy")


def test_no_two_seeds_or_workers_share_a_stream() -> None:
    seeds = [sampler_seed(_spec(seed), worker, stream)
             for seed in range(20) for worker in range(0, 9) for stream in (0, 1, 7)]
    assert len(set(seeds)) == len(seeds)
    assert sampler_seed(_spec(1), 2, 0) != sampler_seed(_spec(2), 1, 0)  # seed + worker made these equal
    # --promote leader's search process is worker 0, its spawned worker 1: seed + 1 for worker 1
    # gave --seed 3's second worker --seed 4's first worker's trials
    assert sampler_seed(_spec(3), 1, 0) != sampler_seed(_spec(4), 0, 0)


def test_a_one_worker_search_keeps_its_stream_and_every_stream_repeats() -> None:
    assert [sampler_seed(_spec(seed), 0, 0) for seed in (0, 5)] == [0, 5]
    # the same in another process (a worker is one): no per-process salt such as str's hash()
    import subprocess
    import sys

    code = ("from tests.search.test_sampler_streams import _spec; from tianfeng.hpo.running.runner import sampler_seed; "
            "print(sampler_seed(_spec(3), 2, 7))")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                           env={**__import__("os").environ, "PYTHONHASHSEED": "random"})
    assert other.returncode == 0, other.stderr
    assert int(other.stdout) == sampler_seed(_spec(3), 2, 7)


def test_two_seeds_of_a_two_worker_search_draw_different_trials() -> None:
    space = {"x": optuna.distributions.FloatDistribution(0.0, 1.0)}

    def draws(seed: int) -> set[float]:
        out = set()
        for worker in (0, 1, 2):  # --promote leader numbers its workers from 0, plain searches from 1
            sampler = optuna.samplers.RandomSampler(seed=sampler_seed(_spec(seed), worker, 0))
            study = optuna.create_study(sampler=sampler)
            out |= {study.ask(space).params["x"] for _ in range(4)}
        return out

    assert not draws(1) & draws(2)
