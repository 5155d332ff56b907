"""Per-trial platform overhead: tianfeng's trial path (sample the space, build and record the
run config, report every epoch, storage, heartbeat, callbacks) with a trainer that does no work,
against plain Optuna suggesting the same parameters into the same kind of storage.
Target: <= 0.5 s per trial locally."""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

import optuna
from common import ROOT, print_table

from tianfeng.search.objective import ProxyObjective
from tianfeng.search.runner import SearchPlan, open_storage, open_study
from tianfeng.search.space import load_space
from trainers.engine import EpochMetrics, RunResult


def empty_trainer(cfg, callback) -> RunResult:
    """Hands the callback one epoch of zeros per configured epoch; trains nothing."""
    epochs = []
    for e in range(1, cfg.total_epochs + 1):
        m = EpochMetrics(epoch=e, phase=0, resolution=cfg.phases[0].resolution,
                         batch_size=cfg.phases[0].batch_size, lr=0.0, train_loss=0.0, val_loss=0.0,
                         val_top1=float(e), val_top5=0.0, samples_per_s=0.0, data_wait_fraction=0.0,
                         skipped_steps=0, elapsed_s=0.0)
        callback(m)
        epochs.append(m)
    return RunResult("completed", epochs, Path(cfg.resolved_run_dir), "fp32")


def tianfeng_per_trial(tmp: Path, trials: int) -> float:
    space_path = ROOT / "search_spaces" / "large_batch.yaml"
    plan = SearchPlan(space_path=str(space_path), data=None, storage=f"sqlite:///{tmp}/tf.db",
                      study="overhead", sampler="random", pruner="asha", seed=0, trials=trials,
                      timeout_s=None, runs_root=str(tmp / "runs"), rung="proxy")
    space = load_space(space_path)
    study = open_study(plan, space, resume=False)
    objective = ProxyObjective(space, plan.study, Path(plan.runs_root), plan.rung, trainer=empty_trainer)
    start = time.perf_counter()
    study.optimize(objective, n_trials=trials)
    return (time.perf_counter() - start) / trials


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
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    logging.getLogger("tianfeng").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        base = optuna_per_trial(Path(tmp), args.trials)
        ours = tianfeng_per_trial(Path(tmp), args.trials)
    print_table(f"per-trial platform overhead, empty objective, SQLite storage, {args.trials} trials",
                [("plain Optuna (same storage, same suggestions)", f"{1000 * base:.0f} ms", "1.00"),
                 ("tianfeng trial path (no training)", f"{1000 * ours:.0f} ms", f"{ours / base:.2f}")],
                headers=("path", "per trial", "ratio"))
    print(f"\n  tianfeng overhead per trial: {ours:.3f} s (target <= 0.5 s)")


if __name__ == "__main__":
    main()
