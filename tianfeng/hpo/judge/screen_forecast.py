"""A screened recipe's full-run score, forecast from its screen and its epoch budget.

A screen scores every recipe after the same first N epochs, but recipes train for different
budgets: after N epochs a 20-epoch recipe has more of its training ahead of it than a 10-epoch
one, and ends further above its screen score. Ranking by the screen alone therefore favours short
recipes, whose full runs end lower. The study's own full runs measure by how much: each gained
(end - score after N epochs) over log(E / N), E its epochs. The forecast is

    screen score + slope x log(E / N)

with the slope fitted through the origin to those gains (a recipe of N epochs ends where its
screen does). Until a full run longer than the screen is whole the slope is 0, and the forecast
is the screen score. The forecast does not reach past what the runs measured: a recipe longer than
the longest full run is credited with that run's length, so one run of 12 epochs does not promise
a 29-epoch recipe more than 12 epochs' gain. A metric that is minimised gains negatively; the
fitted slope carries the sign."""

from __future__ import annotations

import math
from collections.abc import Sequence

from optuna.trial import FrozenTrial

from tianfeng.hpo.judge.scores import score
from tianfeng.hpo.trial_attrs import TrialKey


def gain_slope(curves: Sequence[list[float]], length: int) -> float:
    """Least-squares slope through the origin of each full run's gain over its screen (end minus
    the metric after `length` epochs) against log(its epochs / `length`); 0 without a run longer
    than `length`."""
    pairs = [(math.log(len(c) / length), c[-1] - c[length - 1]) for c in curves if len(c) > length]
    spread = sum(x * x for x, _ in pairs)
    return sum(x * gain for x, gain in pairs) / spread if spread else 0.0


def forecast_end(screened: float, epochs: int, length: int, slope: float, longest: int | None = None) -> float:
    """The end of an `epochs`-epoch run that scored `screened` after `length` of them (a run no
    longer than the screen ended there), crediting no more than `longest` epochs."""
    credited = min(epochs, longest) if longest is not None else epochs
    return screened + slope * math.log(credited / length) if credited > length else screened


def full_epochs(trial: FrozenTrial) -> int | None:
    """The epochs of the trial's full run: its configuration's phases (a screen trains the full
    run's schedule and stops early)."""
    phases = (trial.user_attrs.get(TrialKey.CONFIG) or {}).get("phases") or []
    return sum(int(p["epochs"]) for p in phases) or None


def forecast(trial: FrozenTrial, length: int, slope: float, longest: int | None = None) -> float | None:
    """The trial's forecast full-run score from its `length`-epoch screen, crediting no more than
    `longest` epochs; its screen score when its epochs are unknown."""
    screened, epochs = score(trial), full_epochs(trial)
    if screened is None or epochs is None:
        return screened
    return forecast_end(screened, epochs, length, slope, longest)
