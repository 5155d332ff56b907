"""The Pareto front of a study as a table: proxy metric against predicted wall time."""

from __future__ import annotations

import optuna
from rich.console import Console

from tianfeng.cost.walltime import format_seconds, schedule_text
from tianfeng.hpo.judge.scores import front_floor, pareto_front, predicted_s, score
from tianfeng.hpo.trial_attrs import TrialKey
from tianfeng.storage.study_attrs import StudyKey
from tianfeng.terminal.tables import add_plain_row, plain_table, table_console


def front_table(study: optuna.Study, trials: list | None = None):
    metric = study.user_attrs.get(StudyKey.METRIC, "value")
    cluster = study.user_attrs.get(StudyKey.CLUSTER, "")
    floor = front_floor(study)
    below = f" (trials below {floor:.4g} are off it)" if floor is not None else ""
    table = plain_table(title=f"Pareto front of {study.study_name}: {metric} at the search rung against the "
                              f"full run's predicted wall time on {cluster}{below}",
                        columns=("trial", metric, "predicted time", "GPU-hours", "batch", "resolution schedule"))
    for t in pareto_front(study) if trials is None else trials:
        predicted = t.user_attrs[TrialKey.PREDICTED]
        phases = predicted.get("phases") or []
        batches = sorted({b for _, _, b in phases})
        add_plain_row(table, str(t.number), f"{score(t):.4f}", format_seconds(predicted_s(t)),
                      f"{predicted['gpu_hours']:.3g}", "/".join(map(str, batches)), schedule_text(phases))
    return table


def print_front(study: optuna.Study, console: Console | None = None) -> None:
    (console or table_console()).print(front_table(study))


def chance_level(metric: str, classes: int) -> float | None:
    """The accuracy of guessing, in percent; None where the metric is not an accuracy or guessing
    is always right (top-5 of five classes)."""
    picks = {"val_top1": 1, "val_top5": 5}.get(metric)
    if picks is None or classes < 1:
        return None
    chance = min(100.0, 100.0 * picks / classes)
    return None if chance >= 100.0 else chance


def default_floor(metric: str, classes: int) -> float | None:
    """The accuracy a pareto search needs for a place on the front unless told otherwise: chance
    plus as much again (at least 10 points above chance), at most halfway from chance to 100.
    5 classes: 40% top-1; 10: 20%; 1000: 10.1%; 2: 75%. None where chance is 100% (top-5 of five
    classes) or the metric is not an accuracy. The front also asks for halfway from chance to the
    study's best (`tianfeng.hpo.judge.scores.front_floor`)."""
    chance = chance_level(metric, classes)
    if chance is None:
        return None
    return round(min(chance + max(chance, 10.0), chance + (100.0 - chance) / 2), 2)


def fastest_to(study: optuna.Study, level: float) -> optuna.trial.FrozenTrial | None:
    """The front trial with the least predicted time whose proxy metric reaches `level`."""
    from tianfeng.hpo.judge.scores import maximizing

    up = maximizing(study)
    reaching = [t for t in pareto_front(study) if (score(t) >= level if up else score(t) <= level)]
    return min(reaching, key=predicted_s) if reaching else None
