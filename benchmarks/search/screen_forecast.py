"""How well a one-epoch screen ranks full runs, alone and with each recipe's epoch budget weighed
in (tianfeng.hpo.judge.screen_forecast), on every whole full-fidelity curve kept by earlier benchmark
runs (`time_to_target.py --keep DIR`): the promoted runs of the screened searches and the trials
of the full-fidelity methods (plain TPE, TPE + Hyperband, trials that trained every epoch).

    python benchmarks/search/screen_forecast.py DIR [DIR ...] [--splits 200]

Prints Spearman's rho between the first epoch and the end, and between the forecast and the end
with the slope fitted on all recipes and, held out, fitted on a random half and ranked on the
other half, crediting no more epochs than the longest fitted run as a search does (median over
`--splits` splits, and the share of splits in which the forecast ranks better). A recipe trained whole more than once counts once, with its mean curve ends.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
from pathlib import Path

import optuna
from optuna.trial import TrialState
from scipy.stats import spearmanr

from tianfeng.hpo.judge.scores import curve
from tianfeng.hpo.judge.screen_forecast import forecast_end, full_epochs, gain_slope
from tianfeng.promotion.leaders import full_run_curves
from tianfeng.storage.runs import RunStore
from tianfeng.storage.study_attrs import StudyKey
from tianfeng.terminal.logs import quiet_optuna

Curve = list[float]


def whole_curves(db: Path, metric: str = "val_top1") -> dict[str, list[Curve]]:
    """Every whole full-fidelity curve in one benchmark database, by the recipe's parameters."""
    url = f"sqlite:///{db}"
    store = RunStore(url)
    out: dict[str, list[Curve]] = {}
    for summary in optuna.get_all_study_summaries(url):
        study = optuna.load_study(study_name=summary.study_name, storage=url)
        trials = {t.number: t for t in study.get_trials(deepcopy=False)}
        for number, ran in full_run_curves(store, summary.study_name, metric):
            out.setdefault(json.dumps(trials[number].params, sort_keys=True), []).append(ran)
        if study.user_attrs.get(StudyKey.RUNG) != "target":
            continue
        for t in trials.values():
            whole = [value for _, value in sorted(curve(t).items())]
            if t.state == TrialState.COMPLETE and whole and len(whole) == full_epochs(t):
                out.setdefault(json.dumps(t.params, sort_keys=True), []).append(whole)
    return out


def _rho(curves: list[Curve], slope: float, longest: int | None = None) -> float:
    forecasts = [forecast_end(c[0], len(c), 1, slope, longest) for c in curves]
    return float(spearmanr(forecasts, [c[-1] for c in curves])[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dirs", nargs="+", type=Path, help="directories kept by time_to_target.py --keep")
    parser.add_argument("--splits", type=int, default=200, help="random half/half splits for the held-out figure")
    args = parser.parse_args()
    quiet_optuna()
    recipes: dict[str, list[Curve]] = {}
    for directory in args.dirs:
        for db in sorted(directory.rglob("*.db")):
            for key, found in whole_curves(db).items():
                recipes.setdefault(key, []).extend(found)
    # one curve per recipe: its first epoch and end averaged over its runs, its length kept
    curves = [[statistics.mean(c[0] for c in runs)] * (len(runs[0]) - 1) + [statistics.mean(c[-1] for c in runs)]
              for runs in recipes.values() if all(len(c) == len(runs[0]) for c in runs) and len(runs[0]) > 1]
    if len(curves) < 6:
        raise SystemExit(f"screen_forecast: {len(curves)} recipes trained whole in {args.dirs}; at least 6 are needed")
    slope = gain_slope(curves, 1)
    epochs = sorted(len(c) for c in curves)
    print(f"{len(curves)} recipes trained whole, {epochs[0]}-{epochs[-1]} epochs; slope {slope:.2f} per ln(epochs)")
    print(f"rho(first epoch, end) {_rho(curves, 0.0):.2f}   rho(forecast, end) {_rho(curves, slope):.2f}")
    plain, weighed = [], []
    for seed in range(args.splits):
        order = random.Random(seed).sample(curves, len(curves))
        fit, held = order[:len(order) // 2], order[len(order) // 2:]
        plain.append(_rho(held, 0.0))
        weighed.append(_rho(held, gain_slope(fit, 1), max(len(c) for c in fit)))  # as a search credits epochs
    ahead = sum(w > p for w, p in zip(weighed, plain, strict=True)) / len(plain)
    print(f"held out ({args.splits} half/half splits): median rho {statistics.median(plain):.2f} by the first epoch, "
          f"{statistics.median(weighed):.2f} by the forecast; forecast ahead in {ahead:.1%} of splits")


if __name__ == "__main__":
    main()
