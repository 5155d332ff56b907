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
from datetime import UTC, datetime
from pathlib import Path

import optuna
from common import ROOT, data_source, print_table
from optuna.trial import TrialState

from tianfeng.hpo.plan import SearchPlan
from tianfeng.hpo.runner import run_search
from tianfeng.promotion.run import promote
from tianfeng.store import RunStore

SPACE = ROOT / "search_spaces" / "large_batch.yaml"


DATA: str | None = None  # None: the space's own (digits); set from --data


def _plan(tmp: Path, name: str, trials: int, **changes) -> SearchPlan:
    plan = SearchPlan(objective="accuracy", space_path=str(SPACE), data=DATA, storage=f"sqlite:///{tmp}/{name}.db",
                      study=name, sampler="tpe", pruner="asha", seed=0, trials=trials, timeout_s=None,
                      runs_root=str(tmp / "runs"), rung="proxy")
    return dataclasses.replace(plan, **changes)


def _study_timeline(storage: str, name: str) -> tuple[datetime, list[tuple[float, float]]]:
    """The study's first trial start, and (seconds since then, score) of each complete trial."""
    trials = optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)
    t0 = min(t.datetime_start for t in trials if t.datetime_start)
    done = sorted((t for t in trials if t.state == TrialState.COMPLETE), key=lambda t: t.datetime_complete)
    return t0, [((t.datetime_complete - t0).total_seconds(), t.value) for t in done]


def timelines(tmp: Path) -> dict[str, list[tuple[float, float]]]:
    """Each method's (seconds since its first trial started, full-fidelity score) read back from
    its database; for tianfeng, the full score is its promoted run's, at the time it finished."""
    out = {}
    for name in ("optuna_full", "ray_asha"):
        if (tmp / f"{name}.db").exists():
            out[name] = _study_timeline(f"sqlite:///{tmp}/{name}.db", name)[1]
    url = f"sqlite:///{tmp}/tianfeng.db"
    t0, _ = _study_timeline(url, "tianfeng")
    run = next(r for r in RunStore(url).runs("tianfeng") if r["kind"] == "promote" and r["final_score"] is not None)
    finished = datetime.strptime(run["updated"], "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).astimezone().replace(tzinfo=None)
    out["tianfeng"] = [((finished - t0).total_seconds(), run["final_score"])]
    return out


def run_tianfeng(tmp: Path, trials: int) -> None:
    plan = _plan(tmp, "tianfeng", trials)
    run_search(plan, 1, resume=False)
    best = optuna.load_study(study_name=plan.study, storage=plan.storage).best_trial
    promote(plan.storage, plan.study, best.number, batch_size=None, overrides=[], runs_dir=tmp / "runs",
            dry_run=False)


def run_full(tmp: Path, trials: int, *, ray: bool) -> None:
    name = "ray_asha" if ray else "optuna_full"
    plan = _plan(tmp, name, trials, rung="target", priors=False,
                 sampler="random" if ray else "tpe", pruner="asha" if ray else "none")
    if ray:
        from tianfeng.hpo.ray_backend import RayOptions, run_ray_search

        run_ray_search(plan, RayOptions(cpus_per_trial=1), resume=False)
    else:
        run_search(plan, 1, resume=False)


def time_to(timeline: list[tuple[float, float]], target: float) -> float | None:
    return next((t for t, v in timeline if v >= target), None)


def best_by(timeline: list[tuple[float, float]], seconds: float) -> float | None:
    values = [v for t, v in timeline if t <= seconds]
    return max(values) if values else None


def _ratio(ours: float | None, theirs: list[tuple[float, float]], target: float) -> str:
    """Our time to target over theirs; when they never reach it, their whole budget bounds it."""
    if ours is None or not theirs:
        return "-"
    t = time_to(theirs, target)
    return f"{ours / t:.2f}" if t else f"< {ours / theirs[-1][0]:.2f} (not reached)"


def print_results(lines: dict[str, list[tuple[float, float]]], target: float, title: str) -> None:
    ours = lines["tianfeng"]
    ours_s, ours_t = ours[-1][0], time_to(ours, target)
    names = {"optuna_full": "plain Optuna TPE, full fidelity", "ray_asha": "Ray Tune random + ASHA, full fidelity",
             "tianfeng": "tianfeng proxies + ASHA + priors, best promoted"}
    rows = []
    for key, line in lines.items():
        t = time_to(line, target)
        best = best_by(line, ours_s)
        rows.append((names[key], f"{t:.0f} s" if t else "not reached", f"{max(v for _, v in line):.2f}",
                     f"{best:.2f}" if best is not None else "none yet", f"{line[-1][0]:.0f} s"))
    print_table(title, rows, headers=("method", f"time to >= {target:g}", "best", f"best at {ours_s:.0f} s",
                                      "total"))
    print(f"\n  tianfeng's time to target vs plain Optuna: {_ratio(ours_t, lines.get('optuna_full', []), target)} "
          f"(aim <= 0.33); vs Ray Tune ASHA: {_ratio(ours_t, lines.get('ray_asha', []), target)} (aim <= 0.67)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=8, help="trial budget of every method")
    parser.add_argument("--target", type=float, default=75.0, help="full-fidelity val top-1 to reach")
    parser.add_argument("--skip-ray", action="store_true")
    parser.add_argument("--data", default="cifar5", help="cifar5 (default), digits (a quick smoke run) or a source")
    parser.add_argument("--keep", type=Path, help="keep the three studies' databases and runs here "
                        "(benchmarks/proxy_fidelity.py can reuse the full-fidelity trials)")
    parser.add_argument("--replot", type=Path, metavar="DIR",
                        help="run nothing: print the results kept in DIR (by --keep) for this --target")
    args = parser.parse_args()
    if args.replot:
        print_results(timelines(args.replot), args.target, f"time to val top-1 >= {args.target:g} ({args.replot})")
        return
    global DATA
    DATA = data_source(args.data)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("tianfeng.engine").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.keep or Path(scratch)
        tmp.mkdir(parents=True, exist_ok=True)
        run_tianfeng(tmp, args.trials)
        run_full(tmp, args.trials, ray=False)
        if not args.skip_ray:
            run_full(tmp, args.trials, ray=True)
        lines = timelines(tmp)
    print_results(lines, args.target, f"time to val top-1 >= {args.target:g} on {args.data}, "
                                      f"{args.trials} trials each")


if __name__ == "__main__":
    main()
