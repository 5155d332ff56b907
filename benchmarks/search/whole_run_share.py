"""How rare a near-best recipe is: random recipes of `large_batch.yaml` (no priors) each trained
whole at the space's target rung on cifar5-dev (`--setting costly`: the time-to-target
benchmark's costly setting, ttt_settings.py, whose results file is its own), and the share of them whose full-fidelity score
reaches each target, with a 95% Wilson interval. This is what a time-to-target benchmark's
targets mean: a target most random recipes reach is found by luck as fast as by any search.

    python benchmarks/search/whole_run_share.py --keep /tmp/share --trials 24 --results
    python benchmarks/search/whole_run_share.py --keep /tmp/share --trials 48   # 24 more, pooled

The study in `--keep` is resumed, so runs of several sessions pool; each trial's whole-run
core-seconds are reported too (they depend on the machine and on what else ran on it). The
scores do not: a recipe's whole run is the same on any CPU. The results file keeps every run
(seed, trial, score, parameters), so that a later run on another machine, without the kept
study, pools with it: `--seed 1 --pool docs/results/whole_run_share.json` adds 24 recipes drawn
independently of seed 0's (a seed already in the file is the same draws, and is not added twice).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # common.py, one folder up

import optuna
from common import ROOT, add_results_argument, data_source, write_results
from optuna.trial import TrialState
from ttt_settings import SETTINGS, space_for

from tianfeng.hpo.running.runner import run_search
from tianfeng.hpo.spec import SearchSpec
from tianfeng.hpo.trial_attrs import TrialKey
from tianfeng.terminal.logs import quiet_optuna

STUDY = "whole-random"
RESULTS = ROOT / "docs" / "results" / "whole_run_share.json"
RESULTS_OF = {"near-best": RESULTS, "costly": ROOT / "docs" / "results" / "whole_run_share_costly.json"}


def wilson(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of a share `hits / n`."""
    if n == 0:
        return 0.0, 1.0
    p = hits / n
    centre, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, (centre - half) / (1 + z * z / n)), min(1.0, (centre + half) / (1 + z * z / n))


def _score(t: optuna.trial.FrozenTrial) -> float:
    """A whole run's full-fidelity score; a run the engine stopped because it diverged or
    collapsed to a uniform guess (pruned: the benchmark prunes nothing else) scores its last
    reported value, at chance, and counts as a recipe that reached no target."""
    if t.value is not None:
        return t.value
    return t.intermediate_values[max(t.intermediate_values)] if t.intermediate_values else 0.0


def run_rows(trials: list[optuna.trial.FrozenTrial], seed: int) -> list[dict]:
    """One row per whole run, as the results file keeps it."""
    return [{"seed": seed, "trial": t.number, "score": _score(t), "stopped": t.state == TrialState.PRUNED,
             "core_s": (t.datetime_complete - t.datetime_start).total_seconds() * float(t.user_attrs.get(TrialKey.CORES, 1)),
             "params": t.params} for t in trials]


def pooled(rows: list[dict], earlier: list[dict]) -> list[dict]:
    """`rows` and the earlier runs of other seeds (one seed's draws are the same recipes)."""
    seeds = {r["seed"] for r in rows}
    return rows + [r for r in earlier if r["seed"] not in seeds]


def summary(rows: list[dict], targets: list[float]) -> dict:
    scores = [r["score"] for r in rows]
    out = {"recipes": len(scores), "seeds": sorted({r["seed"] for r in rows}), "stopped": sum(r["stopped"] for r in rows),
           "best": max(scores, default=None), "median": statistics.median(scores) if scores else None,
           "targets": {}}
    for target in targets:
        hits = sum(s >= target for s in scores)
        low, high = wilson(hits, len(scores))
        out["targets"][f"{target:g}"] = {"reached": hits, "share": hits / len(scores) if scores else None,
                                         "interval": [round(low, 3), round(high, 3)]}
    core_s = [r["core_s"] for r in rows]
    out["core_s_median"] = statistics.median(core_s) if core_s else None
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", type=Path, required=True, help="the study's folder (resumed when it exists)")
    parser.add_argument("--trials", type=int, default=24, help="complete whole runs wanted in all (default 24)")
    parser.add_argument("--targets", default="70,75,80,82", help="full-fidelity val top-1 levels (default 70,75,80,82)")
    parser.add_argument("--data", default="cifar5", help="cifar5 (default) or digits (a quick smoke run)")
    parser.add_argument("--seed", type=int, default=0, help="the random sampler's seed")
    parser.add_argument("--setting", choices=SETTINGS, default="near-best",
                        help="the space: near-best (default, large_batch.yaml) or costly (its dearer whole runs); "
                        f"--results without a file writes {RESULTS_OF['costly'].name} for costly")
    parser.add_argument("--workers", default="1", help="worker processes (default 1)")
    parser.add_argument("--pool", type=Path, action="append", default=[],
                        help="an earlier results file whose runs of other seeds count too (repeatable)")
    add_results_argument(parser, RESULTS, "the summary")
    args = parser.parse_args()
    if args.results == RESULTS:
        args.results = RESULTS_OF[args.setting]
    quiet_optuna()
    args.keep.mkdir(parents=True, exist_ok=True)
    storage = f"sqlite:///{args.keep / 'share.db'}"
    resume = (args.keep / "share.db").exists()
    spec = SearchSpec.of(space_for(args.setting, args.keep), study=STUDY, rung="target", sampler="random", objective="accuracy",
                         data=data_source(args.data), storage=storage, pruner="none", priors=False,
                         seed=args.seed, trials=args.trials, runs_dir=str(args.keep / "runs"))
    try:
        run_search(spec, int(args.workers) if args.workers.isdigit() else args.workers, resume=resume,
                   progress=False)
    except KeyboardInterrupt:  # the cut trial is queued again: the next run of the same --keep goes on
        print(f"interrupted: the whole runs done so far are kept in {args.keep}; run again to go on",
              file=sys.stderr)
    study = optuna.load_study(study_name=STUDY, storage=storage)
    done = [t for t in study.get_trials(deepcopy=False) if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    earlier = [r for path in args.pool for r in json.loads(path.read_text()).get("runs", [])]
    rows = pooled(run_rows(done, args.seed), earlier)
    figures = summary(rows, [float(t) for t in args.targets.split(",")])
    for target, row in figures["targets"].items():
        share = f"{row['share']:.0%}" if row["share"] is not None else "-"
        print(f"reach {target}: {row['reached']} of {figures['recipes']} random recipes trained whole ({share}, "
              f"95% interval {row['interval'][0]:.0%}-{row['interval'][1]:.0%})")
    print(f"{figures['stopped']} of them diverged or collapsed and were stopped; best {figures['best']}, "
          f"median {figures['median']}; a whole run's median core-seconds "
          f"{figures['core_s_median']}")
    if args.results:
        write_results(args.results, {"data": args.data, "setting": args.setting, **figures, "runs": rows})


if __name__ == "__main__":
    main()
