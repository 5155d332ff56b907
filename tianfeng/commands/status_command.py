"""`tianfeng status`: the studies in a database, or one study's trials."""

from __future__ import annotations

import json
import os
import sys

import optuna
from rich.console import Console

from tianfeng.defaults import ObjectiveMode
from tianfeng.hpo.front import front_table
from tianfeng.hpo.outcomes import count_outcomes, outcome, outcomes_text
from tianfeng.hpo.scores import epochs_reported, score
from tianfeng.hpo.walltime import format_seconds
from tianfeng.logs import quiet_optuna
from tianfeng.promotion.run import load_study
from tianfeng.tables import add_plain_row, plain_table


def _study_row(summary: optuna.study.StudySummary) -> dict:
    best = summary.best_trial  # None for pareto studies: their best is a front
    return {"study": summary.study_name, "trials": summary.n_trials,
            "objective": summary.user_attrs.get("objective_mode", ObjectiveMode.ACCURACY.value),
            "best_value": score(best) if best else None,
            "best_trial": best.number if best else None,
            "created": str(summary.datetime_start or "")}


def _trial_row(t: optuna.trial.FrozenTrial) -> dict:
    predicted = t.user_attrs.get("predicted") or {}
    return {"trial": t.number, "state": str(outcome(t)), "value": score(t),
            "predicted_s": predicted.get("seconds"), "gpu_hours": predicted.get("gpu_hours"),
            "epochs_reported": epochs_reported(t),
            "prior": t.user_attrs.get("prior", ""), "params": t.params,
            "seconds": (t.datetime_complete - t.datetime_start).total_seconds()
            if t.datetime_complete and t.datetime_start else None}


def run_status_command(args) -> int:
    quiet_optuna()
    console = Console(width=output_width())
    if args.study is None and len(optuna.get_all_study_names(args.storage)) != 1:
        rows = [_study_row(s) for s in optuna.get_all_study_summaries(args.storage, include_best_trial=True)]
        if args.json:
            print(json.dumps(rows, indent=2))
            return 0
        table = plain_table(f"studies in {args.storage}",
                            ("study", "objective", "trials", "best value", "best trial", "created"))
        for r in rows:
            add_plain_row(table, r["study"], r["objective"], str(r["trials"]), _fmt(r["best_value"]),
                          "-" if r["best_trial"] is None else str(r["best_trial"]), r["created"])
        console.print(table)
        return 0
    study = load_study(args.storage, args.study)
    trials = study.get_trials(deepcopy=False)
    rows = [_trial_row(t) for t in trials]
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
        return 0
    metric = study.user_attrs.get("metric", "value")
    table = plain_table(f"study {study.study_name}: {len(trials)} trials ({outcomes_text(count_outcomes(trials))})",
                        ("trial", "state", metric, "epochs", "predicted full run", "GPU-h", "prior", "params"))
    for r in rows:
        params = " ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in r["params"].items())
        add_plain_row(table, str(r["trial"]), r["state"], _fmt(r["value"]), str(r["epochs_reported"]),
                      "-" if r["predicted_s"] is None else format_seconds(r["predicted_s"]), _fmt(r["gpu_hours"]),
                      r["prior"], params)
    console.print(table)
    if study.user_attrs.get("objective_mode") == ObjectiveMode.PARETO:
        console.print(front_table(study))
    return 0


def output_width() -> int | None:
    """The terminal's width (None: rich asks it); COLUMNS when set; 200 for a pipe or file, so
    rows stay whole for the programs reading them."""
    if os.environ.get("COLUMNS", "").isdigit():
        return int(os.environ["COLUMNS"])
    return None if sys.stdout.isatty() else 200


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"
