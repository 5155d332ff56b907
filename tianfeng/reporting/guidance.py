"""What the top of a study report tells its reader: the next step (promote which trial, or what
the promoted runs scored), the Pareto front as a table, and the caveats of figures drawn from
too few trials."""

from __future__ import annotations

from dataclasses import dataclass

import optuna

from tianfeng.cost.walltime import format_seconds
from tianfeng.defaults import ObjectiveMode
from tianfeng.hpo.judge.scores import completed, mode_of, pareto_front, predicted_s, score
from tianfeng.hpo.trial_attrs import TrialKey
from tianfeng.storage.study_attrs import StudyKey

# below these, a figure is drawn but read as a hint (importances) or not measured at all (rho)
FEW_FOR_IMPORTANCES = 10
FEW_FOR_RHO = 3


@dataclass(frozen=True)
class NextStep:
    text: str
    command: str = ""


def _value(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def next_step(study: optuna.Study, runs: list[dict], best: optuna.trial.FrozenTrial | None,
              flags: str) -> NextStep:
    """`flags`: what the commands need to find this study (`--study S --storage URL`)."""
    metric = study.user_attrs.get(StudyKey.METRIC, "value")
    if best is None:
        return NextStep("No trial has completed yet: let the search run on, or resume it with "
                        "tianfeng search --resume.")
    finished = [r for r in runs if r["final_score"] is not None]
    if finished:
        last = finished[-1]
        text = (f"Trial #{last['trial_number']} was promoted (run {last['id']}, {last['kind']}): {metric} "
                f"{_value(last['final_score'])} at full fidelity, {_value(last['proxy_score'])} at the search rung.")
        pairs = (study.user_attrs.get(StudyKey.CALIBRATION) or {}).get("pairs_used", 0)
        if pairs < FEW_FOR_RHO:
            return NextStep(text + " Measure how well the proxies rank recipes before trusting the next "
                                   "search:", f"tianfeng calibrate {flags}")
        return NextStep(text)
    seconds = predicted_s(best)
    on = f", full run predicted at {format_seconds(seconds)}" if seconds is not None else ""
    if mode_of(study) == ObjectiveMode.PARETO:
        lead = (f"Choose a recipe from the front below (trade {metric} against predicted time); the most "
                f"accurate is trial #{best.number} ({metric} {_value(score(best))}{on}):")
    elif mode_of(study) == ObjectiveMode.TIME_TO_TARGET:
        lead = f"The fastest recipe: trial #{best.number} ({metric} {_value(score(best))}{on}). Promote it:"
    else:
        lead = f"Promote the best trial, #{best.number} ({metric} {_value(score(best))}{on}):"
    return NextStep(lead, f"tianfeng promote {best.number} {flags}")


def front_rows(study: optuna.Study) -> list[dict]:
    """The Pareto front, fastest first; empty unless the study weighs predicted time."""
    if mode_of(study) == ObjectiveMode.ACCURACY:
        return []
    front = [t for t in pareto_front(study) if predicted_s(t) is not None]
    rows = []
    for t in sorted(front, key=predicted_s):
        predicted = t.user_attrs[TrialKey.PREDICTED]
        rows.append({"number": t.number, "score": _value(score(t)),
                     "seconds": format_seconds(predicted["seconds"]),
                     "gpu_hours": f"{predicted['gpu_hours']:.3g}",
                     "params": ", ".join(f"{k}={_value(v) if isinstance(v, float) else v}"
                                         for k, v in t.params.items())})
    return rows


def importance_caveat(study: optuna.Study) -> str:
    n = len(completed(study))
    if 0 < n < FEW_FOR_IMPORTANCES:
        return (f"Estimated from {n} complete trials (fewer than {FEW_FOR_IMPORTANCES}): read the order as a "
                f"hint, not a ranking.")
    return ""


def fidelity_caveat(calibration: dict, flags: str) -> str:
    used = calibration.get("pairs_used", len(calibration.get("pairs", [])))
    if used < FEW_FOR_RHO:
        return (f"How well the proxy ranks recipes is not measured ({used} proxy/full pairs, at least "
                f"{FEW_FOR_RHO} needed): run tianfeng calibrate {flags}")
    return ""
