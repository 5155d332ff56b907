"""`tianfeng status`: the studies of a database, or one study's trials, from the API functions to
what the command prints."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass

from tianfeng.core.errors import ConfigError
from tianfeng.defaults import DEFAULT_STORAGE, STORAGE_HELP, ObjectiveMode
from tianfeng.options import option
from tianfeng.verbs import Verb
from tianfeng.verbs._study import load


@dataclass(frozen=True)
class StatusOptions:
    study: str | None = option(None, "one study's trials (default: list the studies)")
    follow: bool = option(False, "follow the study until it is over: a line each time its trial counts or best "
                          "trial change (with --json, one JSON object a line); re-attaches to a submitted search")
    interval: float = option(5.0, "with --follow: seconds between looks", metavar="S")
    storage: str = option(DEFAULT_STORAGE, STORAGE_HELP, show_default=False)


def studies(storage: str = DEFAULT_STORAGE) -> list[dict]:
    """A row per study of `storage`: name, objective, trials, best value and trial, creation time.
    As `tianfeng status` without a study."""
    import optuna

    from tianfeng.hpo.results.rows import study_row

    return [study_row(s) for s in optuna.get_all_study_summaries(storage, include_best_trial=True)]


def trials(study: str | None = None, *, storage: str = DEFAULT_STORAGE) -> list[dict]:
    """A row per trial of a study: state, value, predicted full run, epochs reported, prior and
    parameters. As `tianfeng status STUDY`."""
    from tianfeng.hpo.results.rows import trial_row

    return [trial_row(t) for t in load(study, storage=storage).get_trials(deepcopy=False)]


def command(args: argparse.Namespace) -> int:
    from collections import Counter

    import optuna

    from tianfeng.cost.walltime import format_seconds
    from tianfeng.hpo.judge.front import front_table
    from tianfeng.hpo.judge.outcomes import outcomes_text
    from tianfeng.storage.study_attrs import StudyKey
    from tianfeng.terminal.logs import quiet_optuna
    from tianfeng.terminal.tables import add_plain_row, plain_table, table_console

    quiet_optuna()
    console = table_console()
    if args.study is None and len(optuna.get_all_study_names(args.storage)) != 1:
        rows = studies(args.storage)
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
    study = load(args.study, storage=args.storage)
    if args.follow:
        return _follow(args, study.study_name)
    rows = trials(study.study_name, storage=args.storage)
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
        return 0
    metric = study.user_attrs.get(StudyKey.METRIC, "value")
    counts = Counter(r["state"] for r in rows)
    table = plain_table(f"study {study.study_name}: {len(rows)} trials ({outcomes_text(counts)})",
                        ("trial", "state", metric, "epochs", "predicted full run", "GPU-h", "prior", "params"))
    for r in rows:
        params = " ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in r["params"].items())
        add_plain_row(table, str(r["trial"]), r["state"], _fmt(r["value"]), str(r["epochs_reported"]),
                      "-" if r["predicted_s"] is None else format_seconds(r["predicted_s"]), _fmt(r["gpu_hours"]),
                      r["prior"], params)
    console.print(table)
    if study.user_attrs.get(StudyKey.OBJECTIVE_MODE) == ObjectiveMode.PARETO:
        console.print(front_table(study))
    return 0


def _follow(args: argparse.Namespace, name: str) -> int:
    """A line each time the study changes, until it is over; Ctrl-C stops the following only."""
    from collections import Counter

    from tianfeng.hpo.judge.outcomes import Outcome, outcomes_text
    from tianfeng.hpo.results.follow import follow

    if not args.interval > 0:
        raise ConfigError("--interval", "", f"must be > 0 seconds, got {args.interval:g}")
    try:
        for now in follow(lambda: load(name, storage=args.storage), args.interval):
            if args.json:
                print(json.dumps(now), flush=True)
                continue
            counts = Counter({Outcome(k): v for k, v in now["outcomes"].items()})
            best = (f"; best {_fmt(now['best_value'])} (trial {now['best_trial']})"
                    if now["best_trial"] is not None else "")
            job = f"; workers {now['workers_job']}" if now["workers_job"] else ""
            print(f"study {name}: {now['trials']} trials ({outcomes_text(counts)}){best}{job}", flush=True)
    except KeyboardInterrupt:
        print(f"tianfeng: stopped following study {name} (its workers go on)", file=sys.stderr)
        return 130
    return 0


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


VERB = Verb(
    "status", "show studies or one study's trials",
    "Without --study (and with several studies), list the studies in the database; otherwise list one study's "
    "trials.",
    command,
    (("tianfeng status", "the studies in tianfeng.db"),
     ("tianfeng status --study large_batch --json", "one study's trials, as JSON"),
     ("tianfeng status --study large_batch --follow", "follow a search until it is over")),
    options=(StatusOptions,), json=True)
