"""The search methods `time_to_target.py` compares, each run in a process of its own until the
protocol stops it at the wall-clock budget (Ctrl-C), and read back afterwards from the database
it leaves: when each full-fidelity score appeared, and the compute every trial and run used.

    python benchmarks/search/search_methods.py METHOD --seed S --dir D --budget-s B [--data cifar5] [--space FILE]

Every method searches `--space` (default `large_batch.yaml`) for accuracy; full fidelity is the space's `target`
rung. Searching methods run two trials at a time on this 2-core machine, where they can.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # common.py, one folder up

import optuna
from common import data_source
from optuna.trial import TrialState
from ttt_settings import SHIPPED

from tianfeng.core.cores import usable_cores
from tianfeng.hpo.running.runner import run_search
from tianfeng.hpo.space.read import SearchSpace
from tianfeng.hpo.spec import UNLIMITED_TRIALS, SearchSpec, space_of
from tianfeng.hpo.trial_attrs import TrialKey
from tianfeng.storage.runs import RunRecordStatus, RunStore
from tianfeng.terminal.logs import quiet_optuna

SPACE = SHIPPED  # the near-best setting's space, as shipped
# `tianfeng search --promote leader` (or balanced) on proxies, and the rung each variant searches
PROMOTING = {"tianfeng-leader": {"promote": "leader", "fidelity": "proxy"},
             "tianfeng-balanced": {"promote": "balanced", "fidelity": "proxy"},
             "tianfeng-lowres-leader": {"promote": "leader", "fidelity": "lowres_half"},
             "tianfeng-lowres-balanced": {"promote": "balanced", "fidelity": "lowres_half"}}
METHODS = ("tianfeng", "tianfeng-lowres", "tianfeng-target", *PROMOTING, "optuna-tpe", "tpe-hyperband", "ray-asha",
           "one-epoch")
SEARCH_SHARE = 0.5  # tianfeng and one-epoch: this share of the budget searches, the rest finishes
# the methods whose full-fidelity scores are promoted runs, and those runs' threads (None: every
# core its process may use, as `tianfeng search --promote leader` gives them)
RUN_CORES = {"tianfeng": 2, "tianfeng-lowres": 2, **dict.fromkeys(PROMOTING, None)}


def _spec(directory: Path, name: str, seed: int, data: str | None, space: Path, **changes) -> SearchSpec:
    spec = SearchSpec.of(objective="accuracy", space_path=str(space), data=data, storage=f"sqlite:///{directory}/{name}.db",
                      study=name, sampler="tpe", pruner="asha", seed=seed, trials=UNLIMITED_TRIALS, timeout_s=None,
                      runs_dir=str(directory / "runs"), rung="proxy")
    return spec.changed(**changes)


class AfterFirstEpoch(optuna.pruners.BasePruner):
    """Egele et al. 2023's one-epoch baseline: every trial stops after its first epoch."""

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        return bool(trial.intermediate_values)


def _promote_best(storage: str, study: str, directory: Path) -> None:
    """tianfeng's second half: promote the best proxy trials to full fidelity, best first, until
    stopped."""
    trials = optuna.load_study(study_name=study, storage=storage).get_trials(deepcopy=False)
    for t in sorted((t for t in trials if t.state == TrialState.COMPLETE), key=lambda t: t.value, reverse=True):
        _promote(storage, study, t.number, directory)


def _promote(storage: str, study: str, number: int, directory: Path) -> None:
    """Trial `number` at full fidelity, as `tianfeng promote` runs it here."""
    import tianfeng

    tianfeng.promote(number, storage=storage, study=study, runs_dir=str(directory / "runs"))


def _random_target_study(directory: Path, method: str, seed: int, data: str | None,
                         space_path: Path) -> tuple[SearchSpec, SearchSpace, optuna.Study]:
    """A study of random recipes at the space's target rung, no priors."""
    from tianfeng.hpo.running.study import open_study

    spec = _spec(directory, method, seed, data, space_path, rung="target", priors=False, sampler="random")
    space = space_of(spec)
    study = open_study(spec, space, resume=False)
    study.sampler = optuna.samplers.RandomSampler(seed=seed)
    return spec, space, study


def _full_fidelity_random_study(directory: Path, method: str, seed: int, data: str | None, space_path: Path):
    """The one-epoch method's study (random recipes at the space's target rung, no priors), the
    objective that trains their first epoch (the engine told they stop there, so its compile
    choice weighs that epoch only; the pruner stops them) and the one that trains them whole."""
    from tianfeng.core.run_config import stopping_after
    from tianfeng.hpo.running.objective import ProxyObjective
    from tianfeng.trainers.engine import train

    def first_epoch(cfg, report):
        return train(stopping_after(cfg, 1), report)

    spec, space, study = _random_target_study(directory, method, seed, data, space_path)
    first = ProxyObjective(space, spec.study, Path(spec.runs_root), "target", trainer=first_epoch)
    return study, first, ProxyObjective(space, spec.study, Path(spec.runs_root), "target")


def _first_epoch(trial: optuna.trial.FrozenTrial) -> float:
    return trial.intermediate_values[min(trial.intermediate_values)]


def _finish_best_first_epochs(study: optuna.Study, objective) -> None:
    """One-epoch's second half: the recipes with the best first epoch trained whole (from the
    start, as new trials), best first, until stopped."""
    tried = [t for t in study.get_trials(deepcopy=False) if t.intermediate_values]
    study.pruner = optuna.pruners.NopPruner()
    for t in sorted(tried, key=_first_epoch, reverse=True):
        study.enqueue_trial(t.params)
        study.optimize(objective, n_trials=1, catch=(Exception,))


def run(method: str, seed: int, directory: Path, budget_s: float, data: str | None, space: Path = SPACE) -> None:
    started = time.monotonic()
    if method in ("tianfeng", "tianfeng-lowres"):  # its defaults: TPE, ASHA and priors on proxies, then promote the best
        import tianfeng

        spec = _spec(directory, method, seed, data, space)
        tianfeng.search(space, storage=spec.options.storage, study=method, data=data, objective="accuracy", seed=seed,
                        trials=UNLIMITED_TRIALS, timeout_s=budget_s * SEARCH_SHARE, runs_dir=directory / "runs",
                        progress=False, fidelity="lowres_half" if method == "tianfeng-lowres" else "proxy", promote="none")
        _promote_best(spec.options.storage, spec.study, directory)
    elif method == "tianfeng-target":  # tianfeng search --fidelity target: its ASHA rungs over the whole run's epochs
        import tianfeng

        spec = _spec(directory, method, seed, data, space)
        tianfeng.search(space, storage=spec.options.storage, study=method, data=data, objective="accuracy", seed=seed,
                        trials=UNLIMITED_TRIALS, runs_dir=directory / "runs", fidelity="target", progress=False)
    elif method in PROMOTING:  # the product's own: tianfeng search --promote leader (or balanced)
        import tianfeng

        spec = _spec(directory, method, seed, data, space)
        tianfeng.search(space, storage=spec.options.storage, study=method, data=data, objective="accuracy", seed=seed,
                        trials=UNLIMITED_TRIALS, runs_dir=directory / "runs", progress=False, **PROMOTING[method])
    elif method in ("optuna-tpe", "tpe-hyperband"):
        pruner = "none" if method == "optuna-tpe" else "hyperband"
        run_search(_spec(directory, method, seed, data, space, rung="target", priors=False, pruner=pruner), 2, resume=False,
                   progress=False)
    elif method == "ray-asha":
        from tianfeng.hpo.running.ray_backend import RayOptions, run_ray_search

        run_ray_search(_spec(directory, method, seed, data, space, rung="target", priors=False, sampler="random"),
                       RayOptions(cpus_per_trial=1), resume=False)
    elif method == "one-epoch":  # random recipes for one epoch each, then the best finished
        study, first_objective, objective = _full_fidelity_random_study(directory, method, seed, data, space)
        study.pruner = AfterFirstEpoch()
        left = budget_s * SEARCH_SHARE - (time.monotonic() - started)
        study.optimize(first_objective, timeout=max(1.0, left), catch=(Exception,))
        _finish_best_first_epochs(study, objective)
    else:
        raise SystemExit(f"unknown method {method!r}; one of {', '.join(METHODS)}")


def utc_seconds(text: str) -> float:
    """A run record's UTC time (`YYYY-MM-DD HH:MM:SS`, with milliseconds or without) as epoch seconds."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def read_back(method: str, directory: Path, t0: float) -> dict:
    """The run's full-fidelity scores as (seconds since `t0`, score), in time order, and its
    compute in core-seconds (trials' wall time x the cores each had, promoted runs' x their threads)."""
    storage = f"sqlite:///{directory}/{method}.db"
    process = _process(directory)
    if method not in optuna.get_all_study_names(storage):
        return {"events": [], "core_s": 0.0, "trials": 0, "process": process}
    trials = optuna.load_study(study_name=method, storage=storage).get_trials(deepcopy=False)
    ended = [t for t in trials if t.datetime_start and t.datetime_complete]
    core_s = sum((t.datetime_complete - t.datetime_start).total_seconds() * float(t.user_attrs.get(TrialKey.CORES, 1))
                 for t in ended)
    if method in RUN_CORES:
        ended_runs = [r for r in RunStore(storage).runs(method) if r["status"] != RunRecordStatus.RUNNING]
        events = [(utc_seconds(r["updated"]) - t0, r["final_score"]) for r in ended_runs
                  if r["status"] == RunRecordStatus.COMPLETED]
        # a run that diverged, collapsed or failed spent its compute all the same
        cores = RUN_CORES[method] or (process or {}).get("cores") or usable_cores()
        core_s += sum((utc_seconds(r["updated"]) - utc_seconds(r["created"])) * cores for r in ended_runs)
    else:
        events = [(t.datetime_complete.timestamp() - t0, t.value) for t in ended
                  if t.state == TrialState.COMPLETE and t.value is not None]
    return {"events": sorted(events), "core_s": core_s, "trials": len(trials), "process": process}


def _process(directory: Path) -> dict | None:
    """The cores and threads the method's process had, as it wrote them at its start."""
    path = directory / "process.json"
    return json.loads(path.read_text()) if path.exists() else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("method", choices=METHODS)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--budget-s", type=float, required=True)
    parser.add_argument("--data", default="cifar5")
    parser.add_argument("--space", type=Path, default=SPACE, help="the space searched (default large_batch.yaml)")
    args = parser.parse_args()
    quiet_optuna()  # a trial cut by the budget's Ctrl-C is not a traceback
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {args.method} s{args.seed} %(message)s",
                        datefmt="%H:%M:%S")
    logging.getLogger("tianfeng.engine").setLevel(logging.WARNING)
    args.dir.mkdir(parents=True, exist_ok=True)
    import torch

    # what this process was given to train with, read back with its scores
    (args.dir / "process.json").write_text(json.dumps({"cores": usable_cores(), "threads": torch.get_num_threads()}))
    with contextlib.suppress(KeyboardInterrupt):  # the protocol's budget is up
        run(args.method, args.seed, args.dir, args.budget_s, data_source(args.data), args.space)


if __name__ == "__main__":
    main()
