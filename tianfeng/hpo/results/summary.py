"""After a search: the printed summary, and the same for programs."""

from __future__ import annotations

import sys

from tianfeng.defaults import ObjectiveMode
from tianfeng.hpo.trial_attrs import TrialKey
from tianfeng.storage.study_attrs import StudyKey
from tianfeng.storage.url import storage_flag


def summary_row(study, storage: str) -> dict:
    """What the summary says, for programs (`search --json`): the counts by outcome, the share of
    trial time in pruned trials, the best trial and, for a pareto study, the front."""
    from tianfeng.hpo.judge.outcomes import count_outcomes
    from tianfeng.hpo.judge.scores import best_trial, mode_of, pareto_front, pruned_share
    from tianfeng.hpo.results.rows import trial_row

    trials = study.get_trials(deepcopy=False)
    mode = mode_of(study)
    best = best_trial(study)
    out = {"study": study.study_name, "storage": storage, "objective": str(mode),
           "metric": study.user_attrs.get(StudyKey.METRIC, "value"), "trials": len(trials),
           "outcomes": {str(k): v for k, v in count_outcomes(trials).items()},
           "pruned_time_share": round(pruned_share(trials), 4), "best": trial_row(best) if best else None}
    if mode == ObjectiveMode.PARETO:
        out["front"] = [trial_row(t) for t in pareto_front(study)]
    return out


def print_summary(study, storage: str) -> int:
    from tianfeng.cost.walltime import format_seconds
    from tianfeng.hpo.judge.front import print_front
    from tianfeng.hpo.judge.outcomes import count_outcomes, outcomes_text
    from tianfeng.hpo.judge.scores import best_trial, mode_of, pruned_share, score

    trials = study.get_trials(deepcopy=False)
    mode = mode_of(study)
    print(f"study {study.study_name}: {len(trials)} trials ({outcomes_text(count_outcomes(trials))}; "
          f"{pruned_share(trials):.0%} of trial time in pruned trials); objective {mode}")
    best = best_trial(study)
    if best is None:
        print("no trial completed: nothing to promote", file=sys.stderr)
        return 1
    metric = study.user_attrs.get(StudyKey.METRIC, "value")
    storage_url, storage = storage, storage_flag(storage)
    if mode == ObjectiveMode.PARETO:
        from tianfeng.hpo.judge.scores import front_floor, pareto_front

        floor = front_floor(study)
        if not pareto_front(study):
            print(f"no complete trial reaches the accuracy floor of {floor:.4g} {metric}: the front is empty; "
                  "search on with a lower --min-accuracy (or more epochs at the search rung)", file=sys.stderr)
            return 0
        print_front(study)
        print(f"promote one with:\n  tianfeng promote --fastest-to LEVEL --study {study.study_name}{storage}\n"
              f"  (or tianfeng promote TRIAL; list the front again with tianfeng promote --front)")
        return 0
    predicted = best.user_attrs.get(TrialKey.PREDICTED)
    label = "fastest trial reaching the target" if mode == ObjectiveMode.TIME_TO_TARGET and all(
        c <= 0 for c in best.constraints.values()) else "best trial"
    print(f"{label}: #{best.number}  {metric} {score(best):.4f}"
          + (f"  full run predicted {format_seconds(predicted['seconds'])} on {predicted['cluster']}" if predicted else "")
          + (f"  (prior: {best.user_attrs['prior']})" if "prior" in best.user_attrs else ""))
    for key, value in best.params.items():
        print(f"  {key}: {value:.6g}" if isinstance(value, float) else f"  {key}: {value}")
    runs = promoted_runs(study, storage_url)
    for run in runs:
        full = run["final_score"]
        print(f"full-fidelity run of #{run['trial_number']}: {metric} "
              f"{'-' if full is None else f'{full:.4f}'} ({run['status']}; proxy {run['proxy_score']:.4f}) "
              f"in {run['run_dir']}")
    fastest = fastest_full_run_to_target(study, runs)
    if fastest is not None:
        print(f"fastest full run reaching the target: #{fastest.number}  full run predicted "
              f"{format_seconds(fastest.user_attrs['predicted']['seconds'])}")
    elif best.number not in {run["trial_number"] for run in runs}:
        print(f"promote it with:\n  tianfeng promote {best.number} --study {study.study_name}{storage}")
    return 0


def fastest_full_run_to_target(study, runs: list[dict]):
    """time-to-target: the trial with the least predicted time whose full run (`runs`) reached the
    target, else None."""
    from tianfeng.hpo.judge.scores import mode_of, predicted_s, reaches_target

    if mode_of(study) != ObjectiveMode.TIME_TO_TARGET:
        return None
    numbers = {r["trial_number"] for r in runs if reaches_target(study, r["final_score"])}
    reached = [t for t in study.get_trials(deepcopy=False) if t.number in numbers and predicted_s(t) is not None]
    return min(reached, key=lambda t: (predicted_s(t), t.number), default=None)


def promoted_runs(study, storage: str) -> list[dict]:
    """The study's promoted runs (`tianfeng promote`, `search --promote leader`), oldest first."""
    from tianfeng.storage.runs import RunStore

    return [r for r in RunStore(storage).runs(study.study_name) if r["kind"] == "promote"]
