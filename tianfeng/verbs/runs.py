"""`tianfeng runs`: the promoted runs of a study database, followed or cancelled, from the API
functions to what the command prints."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass

from tianfeng.core.errors import ConfigError
from tianfeng.core.states import JobStatus
from tianfeng.defaults import DEFAULT_STORAGE, STORAGE_HELP
from tianfeng.options import option
from tianfeng.verbs import Verb
from tianfeng.verbs._flags import emit


@dataclass(frozen=True)
class RunsOptions:
    study: str | None = option(None, "one study's runs (default: every study)")
    follow: int | None = option(None, "follow run RUN until it ends: its job's state, and each epoch as it is "
                                "recorded (with --json, one JSON object a line)", metavar="RUN")
    interval: float = option(2.0, "with --follow: seconds between looks at the run", metavar="S")
    cancel: int | None = option(None, "cancel submitted run RUN's scheduler job (promoting the trial again resumes "
                                "it)", metavar="RUN")
    storage: str = option(DEFAULT_STORAGE, STORAGE_HELP, show_default=False)


def runs(study: str | None = None, *, storage: str = DEFAULT_STORAGE) -> list[dict]:
    """The promoted runs recorded in `storage` (of one study, or all): status, epochs, proxy and
    full scores, run directory, and for a submitted run its scheduler job (`job`: launcher, job
    id, state, reason). As `tianfeng runs`: a run recorded as running whose process is gone (its
    run directory is here and nobody holds its training lock) is listed as interrupted, and a
    submitted run whose job ended is collected first. `time_check`: where the run's time went,
    measured from its epochs, beside its trial's predicted full run (scaled to the epochs so far)."""
    from tianfeng.promotion.measured import with_time_checks

    return with_time_checks(storage, _run_rows(study, storage))


def _run_rows(study: str | None, storage: str) -> list[dict]:
    """The promoted runs with their live state and jobs, without the time checks (which read
    every study): what following a run polls."""
    from tianfeng.promotion.jobs import with_jobs
    from tianfeng.promotion.run import refresh_submitted
    from tianfeng.promotion.run_lock import with_live_status
    from tianfeng.storage.runs import RunStore

    refresh_submitted(storage, study)  # runs a scheduler trains: their state now, collected when done
    store = RunStore(storage)
    return with_jobs(store, [with_live_status(r) for r in store.runs(study)])


def follow(run: int, *, storage: str = DEFAULT_STORAGE, interval_s: float = 2.0):
    """Follow run `run` until it ends: yields ("state", run) when its state changes, ("epoch",
    metrics) for each new epoch, then ("ended", run). As `tianfeng runs --follow RUN`."""
    from tianfeng.promotion.follow import follow as follow_run

    return follow_run(run, lambda: _run_rows(None, storage), interval_s)


def cancel(run: int, *, storage: str = DEFAULT_STORAGE) -> dict:
    """Cancel a submitted run's scheduler job and return the run as `runs` then lists it (its
    job cancelled; collected as interrupted, or completed if it finished first). As `tianfeng
    runs --cancel RUN`."""
    from tianfeng.promotion.jobs import cancel_job
    from tianfeng.storage.runs import RunStore

    cancel_job(RunStore(storage), run)
    return next(r for r in runs(storage=storage) if r["id"] == run)


def command(args: argparse.Namespace) -> int:
    from tianfeng.terminal.tables import add_plain_row, plain_table, table_console

    if args.cancel is not None:
        run = cancel(args.cancel, storage=args.storage)
        emit(args, run, [f"run {run['id']}: {run['job']['launcher']} job {run['job']['job_id']} cancelled; it is "
                         f"{run['status']} (promote trial {run['trial_number']} again to resume it)"])
        return 0
    if args.follow is not None:
        return _follow(args)
    rows = runs(args.study, storage=args.storage)
    for r in rows:  # a record no engine wrote: said, and listed with what is readable
        if r.get("record_error"):
            print(f"tianfeng: warning: {r['record_error']}", file=sys.stderr)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    table = plain_table(f"promoted runs in {args.storage}",
                        ("run", "study", "trial", "kind", "status", "epochs", "proxy", "full",
                         "training time / predicted", "run dir"))
    for r in rows:
        add_plain_row(table, str(r["id"]), r["study"], str(r["trial_number"]), r["kind"], _status(r),
                      str(len(r["epochs"])), _fmt(r["proxy_score"]), _fmt(r["final_score"]), _time_text(r),
                      r["run_dir"])
    table_console().print(table)
    for r in rows:
        if r.get("job"):
            print(f"run {r['id']}: {r['job']['launcher']} job {r['job']['job_id']}, log {r['job']['log']}")
    return 0


def _time_text(run: dict) -> str:
    """`41.2 s / 12.0 s (3.4x)`: the training steps measured, and predicted for the same epochs
    on the study's target cluster ('-' without both)."""
    check = run.get("time_check")
    training = check["parts"]["training"] if check else None
    if not training or training["ratio"] is None:
        return "-"
    return f"{training['measured_s']:.4g} s / {training['predicted_s']:.4g} s ({training['ratio']:.2g}x)"


def _follow(args: argparse.Namespace) -> int:
    """Each epoch to stdout as it is recorded, state changes to stderr; exit 0 when the run
    completed, 1 when it ended otherwise, 130 when Ctrl-C stops the following (not the run)."""
    from tianfeng.promotion.follow import state_of
    from tianfeng.storage.runs import RunRecordStatus

    if not args.interval > 0:
        raise ConfigError("--interval", "", f"must be > 0 seconds, got {args.interval:g}")
    try:
        for kind, item in follow(args.follow, storage=args.storage, interval_s=args.interval):
            if args.json:
                print(json.dumps({"event": kind, **item}), flush=True)
            elif kind == "epoch":
                print(_epoch_line(item), flush=True)
            if kind == "state":
                print(f"tianfeng: run {item['id']} {state_of(item)}", file=sys.stderr)
            elif kind == "ended":
                score = f", full {_fmt(item['final_score'])}" if item["final_score"] is not None else ""
                print(f"tianfeng: run {item['id']} {item['status']}{score}", file=sys.stderr)
                return 0 if item["status"] == RunRecordStatus.COMPLETED else 1
    except KeyboardInterrupt:
        print(f"tianfeng: stopped following run {args.follow} (the run itself goes on)", file=sys.stderr)
        return 130
    return 1


def _epoch_line(m: dict) -> str:
    top1 = f"  val_top1 {m['val_top1']:.2f}" if m.get("val_top1") is not None else ""
    return f"epoch {m['epoch']}{top1}  train_loss {m['train_loss']:.4f}  {m['elapsed_s']:.1f} s"


def _status(run: dict) -> str:
    """`completed`, or for a submitted run its job: `slurm 12 pending (Resources)`, `slurm 12
    running, epoch 3 of 8`."""
    import yaml

    from tianfeng.promotion.follow import waiting_reason
    from tianfeng.storage.runs import RunRecordStatus

    job = run.get("job")
    if job is None or run["status"] != RunRecordStatus.SUBMITTED:
        return run["status"]
    total = sum(p["epochs"] for p in (yaml.safe_load(run["config_yaml"]) or {}).get("phases", []))
    progress = f", epoch {len(run['epochs'])} of {total}" if job["state"] == JobStatus.RUNNING else ""
    return f"{job['launcher']} {job['job_id']} {job['state']}{waiting_reason(job)}{progress}"


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


VERB = Verb(
    "runs", "list promoted runs", "List the promoted runs recorded in a study database.",
    command,
    (("tianfeng runs", "every promoted run"),
     ("tianfeng runs --follow 3", "watch run 3 until it ends"),
     ("tianfeng runs --cancel 3", "cancel run 3's scheduler job")),
    options=(RunsOptions,), json=True)
