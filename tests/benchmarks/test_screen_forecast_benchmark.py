"""benchmarks/search/screen_forecast.py reads every whole full-fidelity curve a benchmark run kept (promoted
runs and full-fidelity trials, not pruned or cut ones) and ranks them by first epoch and by the
forecast."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import optuna

from tianfeng.storage.runs import RunRecordStatus, RunStore

REPO = Path(__file__).resolve().parents[2]
# (epochs, first epoch, end): the short recipes start fastest, the long ones end best, each
# gaining 12 points per ln(epochs) over its first epoch
RECIPES = [(epochs, first, first + 12.0 * math.log(epochs))
           for epochs, first in ((6, 60.0), (8, 59.0), (10, 58.0), (12, 57.0), (14, 56.0), (16, 55.0), (18, 54.0),
                                 (20, 53.0))]


def _curve(epochs: int, first: float, end: float) -> list[float]:
    return [first + (end - first) * i / (epochs - 1) for i in range(epochs)]


def _trial(number: int, epochs: int, values: list[float], state=optuna.trial.TrialState.COMPLETE):
    return optuna.create_trial(state=state, value=values[-1] if state.is_finished() and values else None,
                               params={"n": number}, distributions={"n": optuna.distributions.IntDistribution(0, 99)},
                               intermediate_values=dict(enumerate(values, start=1)),
                               user_attrs={"config": {"phases": [{"epochs": epochs}]}})


def _kept_run(directory: Path) -> None:
    """A screened search that promoted the first four recipes, and a full-fidelity search that
    trained the other four whole, one it pruned and one it was stopped in."""
    url = f"sqlite:///{directory / 'kept.db'}"
    screened = optuna.create_study(study_name="screened", storage=url, direction="maximize")
    screened.set_user_attr("rung", "screen")
    store = RunStore(url)
    for number, (epochs, first, end) in enumerate(RECIPES[:4]):
        screened.add_trial(_trial(number, epochs, [first]))
        run_id, _ = store.open_run(study="screened", trial_number=number, config_hash=f"h{number}", kind="promote",
                                   run_dir="r", config_yaml="", proxy_score=first)
        store.update(run_id, status=RunRecordStatus.COMPLETED, epochs=[{"val_top1": v} for v in _curve(epochs, first, end)])
    full = optuna.create_study(study_name="full", storage=url, direction="maximize")
    full.set_user_attr("rung", "target")
    for number, (epochs, first, end) in enumerate(RECIPES[4:], start=4):
        full.add_trial(_trial(number, epochs, _curve(epochs, first, end)))
    full.add_trial(_trial(40, 20, [99.0, 1.0], optuna.trial.TrialState.PRUNED))  # not whole: left out
    full.add_trial(_trial(41, 20, [99.0, 1.0]))  # complete but cut at 2 of 20 epochs: left out


def test_the_benchmark_ranks_every_whole_curve_by_first_epoch_and_by_forecast(tmp_path: Path) -> None:
    _kept_run(tmp_path)
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "search" / "screen_forecast.py"), str(tmp_path),
                          "--splits", "20"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "8 recipes trained whole, 6-20 epochs; slope 12.00" in out.stdout
    plain, weighed = (float(x) for x in re.search(r"rho\(first epoch, end\) (\S+)\s+rho\(forecast, end\) (\S+)",
                                                 out.stdout).groups())
    assert plain == -1.0 and weighed == 1.0  # the first epoch ranks them backwards, the forecast as they end
    plain_held, weighed_held, ahead = (float(x) for x in re.search(
        r"median rho (\S+) by the first epoch, (\S+) by the forecast; forecast ahead in (\S+)% of splits",
        out.stdout).groups())
    # held out, a recipe longer than every fitted run is credited with the longest's epochs only
    assert plain_held == -1.0 and weighed_held > 0.5 and ahead >= 90.0


def test_too_few_recipes_is_a_one_line_error(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "search" / "screen_forecast.py"), str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode != 0 and "0 recipes trained whole" in out.stderr and len(out.stderr.splitlines()) == 1
