"""Per-trial platform overhead: tianfeng's trial path (sample the space, build and record the
run config, report every epoch, storage, heartbeat, callbacks) with a trainer that does no work,
against plain Optuna suggesting the same parameters into the same kind of storage; with --ray,
also the Ray Tune backend on a local Ray cluster (trials placed by Ray, results told to the study).
Targets: <= 0.5 s per trial locally, <= 2 s on Ray."""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # common.py, one folder up

import optuna
from common import ROOT, print_table
from null_trainer import empty_trainer

from tianfeng.hpo.running.objective import ProxyObjective
from tianfeng.hpo.running.study import open_storage, open_study
from tianfeng.hpo.space.read import load_space
from tianfeng.hpo.spec import SearchSpec


def tianfeng_per_trial(tmp: Path, trials: int) -> float:
    space_path = ROOT / "search_spaces" / "large_batch.yaml"
    spec = SearchSpec.of(objective="accuracy", space_path=str(space_path), data=None, storage=f"sqlite:///{tmp}/tf.db",
                      study="overhead", sampler="random", pruner="asha", seed=0, trials=trials,
                      timeout_s=None, runs_dir=str(tmp / "runs"), rung="proxy")
    space = load_space(space_path)
    study = open_study(spec, space, resume=False)
    objective = ProxyObjective(space, spec.study, Path(spec.runs_root), spec.rung, trainer=empty_trainer)
    start = time.perf_counter()
    study.optimize(objective, n_trials=trials)
    return (time.perf_counter() - start) / trials


def ray_per_trial(tmp: Path, trials: int) -> tuple[float, float]:
    """(wall seconds per trial, Ray start-up seconds), the trials placed one CPU each."""
    import ray

    from tianfeng.hpo.running.ray_backend import RayOptions, run_ray_search

    start = time.perf_counter()
    ray.init(include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING,
             object_store_memory=256 * 2**20,
             runtime_env={"env_vars": {"PYTHONPATH": str(Path(__file__).resolve().parent), "RAY_CHDIR_TO_TRIAL_DIR": "0"}})
    startup = time.perf_counter() - start
    spec = SearchSpec.of(objective="accuracy", space_path=str(ROOT / "search_spaces" / "large_batch.yaml"), data=None,
                      storage=f"sqlite:///{tmp}/ray.db", study="overhead-ray", sampler="random", pruner="asha",
                      seed=0, trials=trials, timeout_s=None, runs_dir=str(tmp / "runs"), rung="proxy")
    options = RayOptions(cpus_per_trial=1, trainer="null_trainer:empty_trainer")
    start = time.perf_counter()
    run_ray_search(spec, options, resume=False)
    per_trial = (time.perf_counter() - start) / trials
    ray.shutdown()
    return per_trial, startup


def optuna_per_trial(tmp: Path, trials: int) -> float:
    study = optuna.create_study(storage=open_storage(f"sqlite:///{tmp}/plain.db"), direction="maximize",
                                sampler=optuna.samplers.RandomSampler(seed=0))

    def objective(trial: optuna.Trial) -> float:
        trial.suggest_categorical("optimizer", ["sgd", "lars", "lamb"])
        trial.suggest_float("base_lr", 0.01, 10.0, log=True)
        trial.suggest_float("weight_decay", 1e-5, 1e-3, log=True)
        trial.suggest_float("warmup_epochs", 0.0, 4.0, step=0.5)
        trial.suggest_categorical("batch_size", [64, 128, 256, 512])
        for epoch in range(1, 7):
            trial.report(float(epoch), epoch)
        return 0.0

    start = time.perf_counter()
    study.optimize(objective, n_trials=trials)
    return (time.perf_counter() - start) / trials


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--ray", action="store_true", help="also measure the Ray Tune backend")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    logging.getLogger("tianfeng").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        base = optuna_per_trial(Path(tmp), args.trials)
        ours = tianfeng_per_trial(Path(tmp), args.trials)
        on_ray = ray_per_trial(Path(tmp), args.trials) if args.ray else None
    rows = [("plain Optuna (same storage, same suggestions)", f"{1000 * base:.0f} ms", "1.00"),
            ("tianfeng trial path (no training)", f"{1000 * ours:.0f} ms", f"{ours / base:.2f}")]
    if on_ray:
        rows.append(("tianfeng --backend ray (local Ray, 1 CPU per trial)", f"{1000 * on_ray[0]:.0f} ms",
                     f"{on_ray[0] / base:.2f}"))
    print_table(f"per-trial platform overhead, empty objective, SQLite storage, {args.trials} trials",
                rows, headers=("path", "per trial", "ratio"))
    print(f"\n  tianfeng overhead per trial: {ours:.3f} s (target <= 0.5 s)")
    if on_ray:
        print(f"  Ray backend overhead per trial: {on_ray[0]:.3f} s wall (target <= 2 s); "
              f"Ray start-up once: {on_ray[1]:.1f} s")


if __name__ == "__main__":
    main()
