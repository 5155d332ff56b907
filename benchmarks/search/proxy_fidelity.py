"""Proxy fidelity: do the cheap proxy runs rank recipes the way full-fidelity runs do?

Recipes are sampled at random from the space (seeded) and each is trained at the target and at
every proxy rung given (`--rung quick,proxy` compares rungs on the same recipes). With
--full-study, the complete trials of a full-fidelity study (the time-to-target benchmark's
`optuna_full`, or this benchmark's own with --keep) join them, and only their proxies run here.
Prints, per rung, Spearman's rho of proxy and full scores and the proxies' cost as a share of the
full runs', in wall time and in core-seconds (wall time x the threads a run used: `--threads 1`
runs the proxies the way `tianfeng search --workers 2` does on two cores). A full run reused from
another run was timed there; the share over the runs timed in this one is printed beside it.
Aim: rho >= 0.8 at <= 10% of the cost.
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # common.py, one folder up

import optuna
import torch
from common import ROOT, data_source, print_table
from optuna.trial import TrialState
from scipy.stats import spearmanr

from tianfeng.hpo.running.objective import objective_value, suggest
from tianfeng.hpo.space.materialize import build_config
from tianfeng.hpo.space.read import SearchSpace, load_space
from tianfeng.hpo.trial_attrs import TrialKey
from tianfeng.trainers.engine import train

KEPT_STUDY = "proxy_fidelity_full"


def score_of(space: SearchSpace, values: dict, rung: str, run_dir: Path) -> tuple[float, float]:
    """(objective, seconds) of one run; a diverged run scores 0, below every trained one."""
    cfg = build_config(space, values, rung, name=run_dir.name, run_dir=str(run_dir))
    start = time.perf_counter()
    result = train(cfg)
    seconds = time.perf_counter() - start
    if result.status != "completed":
        return 0.0, seconds
    value = objective_value(space, [getattr(m, space.objective.metric) for m in result.epochs])
    return (value if math.isfinite(value) else 0.0), seconds


def recipes_from_study(url: str, name: str) -> list[tuple[dict, float, float, int]]:
    """(values, full score, full seconds, cores) of every complete trial of a full-fidelity study."""
    study = optuna.load_study(study_name=name, storage=url)
    out = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if t.user_attrs.get(TrialKey.FIDELITY) != "target":
            raise SystemExit(f"{url}: trial {t.number} ran at {t.user_attrs.get(TrialKey.FIDELITY)!r}, not 'target'")
        seconds = t.user_attrs.get("seconds") or (t.datetime_complete - t.datetime_start).total_seconds()
        out.append((t.user_attrs[TrialKey.VALUES], t.value, seconds,
                    int(t.user_attrs.get(TrialKey.CORES, torch.get_num_threads()))))
    return out


def random_recipes(space: SearchSpace, n: int, seed: int) -> list[dict]:
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    return [suggest(study.ask(), space) for _ in range(n)]


def keep_full_run(url: str, values: dict, score: float, seconds: float, cores: int) -> None:
    """Store a full-fidelity run as a complete trial that --full-study reads back."""
    study = optuna.create_study(study_name=KEPT_STUDY, storage=url, direction="maximize", load_if_exists=True)
    study.add_trial(optuna.trial.create_trial(
        value=score, params={}, distributions={},
        user_attrs={"fidelity": "target", "values": values, "cores": cores, "seconds": seconds}))


def full_runs(args, space: SearchSpace, tmp: Path, log) -> list[tuple[dict, float, float, int, bool]]:
    """(values, full score, full seconds, cores, timed in this run) of every recipe."""
    known, seen = [], set()
    for url, name in args.full_study or []:
        for values, full, full_s, cores in recipes_from_study(url, name):
            key = tuple(sorted(values.items()))
            if key not in seen:
                seen.add(key)
                known.append((values, full, full_s, cores, False))
    count = args.recipes if args.recipes is not None else (0 if args.full_study else 8)
    for i, values in enumerate(random_recipes(space, count, args.seed)):
        full, full_s = score_of(space, values, "target", tmp / f"full-{i}")
        log.info("recipe %d: full %.2f in %.0f s", len(known), full, full_s)
        if args.keep:
            keep_full_run(args.keep, values, full, full_s, torch.get_num_threads())
        known.append((values, full, full_s, torch.get_num_threads(), True))
    return known


def describe(values: dict) -> str:
    return ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--space", default=str(ROOT / "search_spaces" / "large_batch.yaml"))
    parser.add_argument("--data", default="cifar5", help="cifar5 (default), digits, or a data source")
    parser.add_argument("--rung", default="proxy",
                        help="the proxy rung(s) to check against the target, comma-separated (default proxy)")
    parser.add_argument("--recipes", type=int, default=None,
                        help="random recipes trained here at full fidelity (default 8, or 0 with --full-study)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch threads of each proxy run (default: all)")
    parser.add_argument("--full-study", nargs=2, metavar=("URL", "NAME"), action="append",
                        help="reuse this full-fidelity study's complete trials (repeatable; a recipe "
                             "already seen in an earlier study is skipped)")
    parser.add_argument("--keep", metavar="URL", default=None,
                        help=f"store the full runs trained here as study {KEPT_STUDY!r} in this storage, "
                             "for a later --full-study")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("tianfeng.engine").setLevel(logging.WARNING)
    data = data_source(args.data)
    space = load_space(args.space, data=data)
    rungs = [r.strip() for r in args.rung.split(",")]
    unknown = [r for r in rungs if r not in space.fidelities or r == "target"]
    if unknown:
        parser.error(f"--rung: {unknown[0]!r} is not a proxy rung of {args.space}; "
                     f"allowed: {', '.join(r for r in space.fidelities if r != 'target')}")
    log = logging.getLogger("proxy_fidelity")
    with tempfile.TemporaryDirectory() as tmp:
        known = full_runs(args, space, Path(tmp), log)
        if args.threads:
            torch.set_num_threads(args.threads)
        proxies: dict[str, list[tuple[float, float]]] = {r: [] for r in rungs}
        for i, (values, full, full_s, _, _) in enumerate(known):
            for rung in rungs:
                proxy, proxy_s = score_of(space, values, rung, Path(tmp) / f"{rung}-{i}")
                log.info("recipe %d: %s %.2f in %.0f s (full %.2f in %.0f s)", i, rung, proxy, proxy_s, full, full_s)
                proxies[rung].append((proxy, proxy_s))
    threads = torch.get_num_threads()
    table = [(describe(values), *(f"{proxies[r][i][0]:.2f} ({proxies[r][i][1]:.0f} s)" for r in rungs),
              f"{full:.2f} ({full_s:.0f} s){'' if here else ' *'}")
             for i, (values, full, full_s, _, here) in enumerate(known)]
    print_table(f"proxy rungs vs target on {args.data}, {len(known)} recipes", table,
                headers=("recipe", *rungs, "full (time)"))
    if not all(k[4] for k in known):
        print("  * full run timed in an earlier run (--full-study): its cost share is across runs")
    fulls = [k[1] for k in known]
    for rung in rungs:
        rho = float(spearmanr([p[0] for p in proxies[rung]], fulls).statistic)
        cost = sum(p[1] for p in proxies[rung]) / sum(k[2] for k in known)
        core_cost = sum(p[1] * threads for p in proxies[rung]) / sum(k[2] * k[3] for k in known)
        here = [i for i, k in enumerate(known) if k[4]]
        same_run = (f"; {sum(proxies[rung][i][1] for i in here) / sum(known[i][2] for i in here):.1%} on the "
                    f"{len(here)} timed in this run" if here and len(here) < len(known) else "")
        print(f"  {rung}: Spearman rho {rho:.3f} (aim >= 0.8); cost {cost:.1%} of the full runs' wall time"
              f"{same_run}, {core_cost:.1%} of their core-seconds (proxies on {threads} thread(s)) (aim <= 10%)")


if __name__ == "__main__":
    main()
