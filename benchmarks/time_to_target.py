"""Time to target on cifar5-dev, same trial budget for each method:
  - tianfeng: TPE + ASHA + priors on cheap proxy runs, then its best trial promoted to full fidelity;
  - plain Optuna: TPE at full fidelity, no pruning, no priors;
  - Ray Tune: random search + ASHA at full fidelity (tianfeng's Ray backend, one CPU per trial).
For each: wall time until a full-fidelity score reaches --target, and each method's best full
score at tianfeng's total wall time. Aims: <= 1/3 of plain Optuna's time, <= 2/3 of Ray ASHA's."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import tempfile
import time
from pathlib import Path

import optuna
from common import ROOT, cifar5_dir, print_table
from optuna.trial import TrialState

from tianfeng.promote_command import promote
from tianfeng.search.runner import SearchPlan, run_search

SPACE = ROOT / "search_spaces" / "large_batch.yaml"


DATA: str | None = None  # None: the space's own (digits); set from --data


def _plan(tmp: Path, name: str, trials: int, **changes) -> SearchPlan:
    plan = SearchPlan(space_path=str(SPACE), data=DATA, storage=f"sqlite:///{tmp}/{name}.db",
                      study=name, sampler="tpe", pruner="asha", seed=0, trials=trials, timeout_s=None,
                      runs_root=str(tmp / "runs"), rung="proxy")
    return dataclasses.replace(plan, **changes)


def _timeline(plan: SearchPlan, study_start) -> list[tuple[float, float]]:
    """(seconds since the method started, full score) of each complete trial, in finishing order."""
    study = optuna.load_study(study_name=plan.study, storage=plan.storage)
    done = sorted((t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE),
                  key=lambda t: t.datetime_complete)
    return [((t.datetime_complete - study_start).total_seconds(), t.value) for t in done]


def run_tianfeng(tmp: Path, trials: int) -> tuple[list[tuple[float, float]], dict]:
    plan = _plan(tmp, "tianfeng", trials)
    start = time.perf_counter()
    run_search(plan, 1, resume=False)
    search_s = time.perf_counter() - start
    best = optuna.load_study(study_name=plan.study, storage=plan.storage).best_trial
    out = promote(plan.storage, plan.study, best.number, batch_size=None, overrides=[],
                  runs_dir=tmp / "runs", dry_run=False)
    total = time.perf_counter() - start
    score = next(v for k, v in out.items() if k.startswith("full_"))
    return [(total, score)], {"search_s": search_s, "proxy_best": best.value, "trial": best.number}


def run_full(tmp: Path, trials: int, *, ray: bool) -> list[tuple[float, float]]:
    from datetime import datetime

    name = "ray_asha" if ray else "optuna_full"
    plan = _plan(tmp, name, trials, rung="target", priors=False,
                 sampler="random" if ray else "tpe", pruner="asha" if ray else "none")
    wall0 = datetime.now()
    if ray:
        from tianfeng.search.ray_backend import RayOptions, run_ray_search

        run_ray_search(plan, RayOptions(cpus_per_trial=1), resume=False)
    else:
        run_search(plan, 1, resume=False)
    return _timeline(plan, wall0)


def time_to(timeline: list[tuple[float, float]], target: float) -> float | None:
    return next((t for t, v in timeline if v >= target), None)


def best_by(timeline: list[tuple[float, float]], seconds: float) -> float | None:
    values = [v for t, v in timeline if t <= seconds]
    return max(values) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=12, help="trial budget of every method")
    parser.add_argument("--target", type=float, default=70.0, help="full-fidelity val top-1 to reach")
    parser.add_argument("--skip-ray", action="store_true")
    parser.add_argument("--data", default="cifar5", help="cifar5 (default), digits (a quick smoke run) or a source")
    parser.add_argument("--keep", type=Path, help="keep the three studies' databases and runs here "
                        "(benchmarks/proxy_fidelity.py can reuse the full-fidelity trials)")
    args = parser.parse_args()
    global DATA
    DATA = {"cifar5": f"imagefolder:{cifar5_dir()}", "digits": None}.get(args.data, args.data)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("tianfeng.engine").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.keep or Path(scratch)
        tmp.mkdir(parents=True, exist_ok=True)
        ours, detail = run_tianfeng(tmp, args.trials)
        plain = run_full(tmp, args.trials, ray=False)
        ray = [] if args.skip_ray else run_full(tmp, args.trials, ray=True)
    ours_s = ours[-1][0]
    rows = []
    plain_t = time_to(plain, args.target)
    for name, line in (("plain Optuna TPE, full fidelity", plain), ("Ray Tune random + ASHA, full fidelity", ray),
                       ("tianfeng proxies + ASHA + priors, best promoted", ours)):
        if not line:
            continue
        t = time_to(line, args.target)
        rows.append((name, f"{t:.0f} s" if t else f"not reached ({max(v for _, v in line):.2f})",
                     f"{t / plain_t:.2f}" if t and plain_t else "-",
                     f"{best_by(line, ours_s):.2f}" if best_by(line, ours_s) is not None else "-",
                     f"{line[-1][0]:.0f} s"))
    print_table(f"time to val top-1 >= {args.target} on {args.data}, {args.trials} trials each",
                rows, headers=("method", "time to target", "vs plain Optuna", f"best at {ours_s:.0f} s", "total"))
    print(f"\n  tianfeng: proxy search {detail['search_s']:.0f} s (best proxy {detail['proxy_best']:.2f}, "
          f"trial #{detail['trial']}), promoted to full fidelity: {ours[-1][1]:.2f} at {ours_s:.0f} s")


if __name__ == "__main__":
    main()
