"""Proxy fidelity: do the cheap proxy runs rank recipes the way full-fidelity runs do?

Recipes are sampled at random from the space (seeded) and each is trained at the proxy rung and
at the target; or, with --full-study, the recipes and full scores are the complete trials of a
full-fidelity study (the time-to-target benchmark's `optuna_full`, kept with --keep) and only the
proxies run here. Prints Spearman's rho of proxy and full scores and the proxy's cost as a share
of the full run's, both timed on this machine, in wall time and in core-seconds (wall time x the
threads a run used: `--threads 1` runs the proxies the way `tianfeng search --workers 2` does on
two cores). Aim: rho >= 0.8 at <= 10% of the cost.
"""

from __future__ import annotations

import argparse
import logging
import math
import tempfile
import time
from pathlib import Path

import optuna
import torch
from common import ROOT, cifar5_dir, print_table
from optuna.trial import TrialState
from scipy.stats import spearmanr

from tianfeng.search.materialize import build_config
from tianfeng.search.objective import objective_value, suggest
from tianfeng.search.space import SearchSpace, load_space
from trainers.engine import train


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
        if t.user_attrs.get("fidelity") != "target":
            raise SystemExit(f"{url}: trial {t.number} ran at {t.user_attrs.get('fidelity')!r}, not 'target'")
        out.append((t.user_attrs["values"], t.value, (t.datetime_complete - t.datetime_start).total_seconds(),
                    int(t.user_attrs.get("cores", torch.get_num_threads()))))
    return out


def random_recipes(space: SearchSpace, n: int, seed: int) -> list[dict]:
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    return [suggest(study.ask(), space) for _ in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--space", default=str(ROOT / "search_spaces" / "large_batch.yaml"))
    parser.add_argument("--data", default="cifar5", help="cifar5 (default), digits, or a data source")
    parser.add_argument("--rung", default="proxy", help="the proxy rung to check against the target")
    parser.add_argument("--recipes", type=int, default=8, help="random recipes when there is no --full-study")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch threads of each proxy run (default: all)")
    parser.add_argument("--full-study", nargs=2, metavar=("URL", "NAME"), action="append",
                        help="reuse this full-fidelity study's complete trials (repeatable; a recipe "
                             "already seen in an earlier study is skipped)")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("tianfeng.engine").setLevel(logging.WARNING)
    data = {"cifar5": f"imagefolder:{cifar5_dir()}", "digits": None}.get(args.data, args.data)
    space = load_space(args.space, data=data)
    log = logging.getLogger("proxy_fidelity")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.full_study:
            known, seen = [], set()
            for url, name in args.full_study:
                for values, full, full_s, cores in recipes_from_study(url, name):
                    key = tuple(sorted(values.items()))
                    if key not in seen:
                        seen.add(key)
                        known.append((values, full, full_s, cores))
        else:
            known = []
            for i, values in enumerate(random_recipes(space, args.recipes, args.seed)):
                full, full_s = score_of(space, values, "target", Path(tmp) / f"full-{i}")
                log.info("recipe %d: full %.2f in %.0f s", i, full, full_s)
                known.append((values, full, full_s, torch.get_num_threads()))
        if args.threads:
            torch.set_num_threads(args.threads)
        for i, (values, full, full_s, full_cores) in enumerate(known):
            proxy, proxy_s = score_of(space, values, args.rung, Path(tmp) / f"proxy-{i}")
            log.info("recipe %d: proxy %.2f in %.0f s (full %.2f in %.0f s)", i, proxy, proxy_s, full, full_s)
            rows.append((values, full, full_s, proxy, proxy_s, full_cores, torch.get_num_threads()))
    rho = float(spearmanr([r[3] for r in rows], [r[1] for r in rows]).statistic)
    cost = sum(r[4] for r in rows) / sum(r[2] for r in rows)
    core_cost = sum(r[4] * r[6] for r in rows) / sum(r[2] * r[5] for r in rows)
    table = [(", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in r[0].items()),
              f"{r[3]:.2f} ({r[4]:.0f} s)", f"{r[1]:.2f} ({r[2]:.0f} s)") for r in rows]
    print_table(f"proxy rung '{args.rung}' vs target on {args.data}, {len(rows)} recipes",
                table, headers=("recipe", "proxy (time)", "full (time)"))
    print(f"\n  Spearman rho {rho:.3f} (aim >= 0.8); proxy cost {cost:.1%} of the full runs' wall time, "
          f"{core_cost:.1%} of their core-seconds (proxies on {rows[0][6]} thread(s), full runs on "
          f"{rows[0][5]}) (aim <= 10%)")


if __name__ == "__main__":
    main()
