"""`tianfeng promote` and `tianfeng runs`: the command-line side of promotion."""

from __future__ import annotations

import json
import sys

import yaml

from tianfeng import api
from tianfeng.commands.flags import emit, options_from_flags
from tianfeng.hpo.judge.front import print_front
from tianfeng.promotion.follow import state_of
from tianfeng.promotion.options import PromoteOptions
from tianfeng.storage.runs import RunRecordStatus
from tianfeng.terminal.tables import add_plain_row, plain_table, table_console
from tianfeng.trainers.config import ConfigError


def run_promote_command(args) -> int:
    if sum(x is not None for x in (args.trial, args.fastest_to, args.front or None)) != 1:
        raise ConfigError("trial", "", "give a trial number, --fastest-to LEVEL or --front (one of them)")
    if args.front:
        study = api.load(args.study, storage=args.storage)
        if args.json:
            from tianfeng.hpo.run.rows import trial_row

            print(json.dumps([trial_row(t) for t in api.front(study.study_name, storage=args.storage)], indent=2,
                             default=str))
        else:
            print_front(study)
        return 0
    out = api.promote(args.trial, options_from_flags(args, PromoteOptions))
    if args.dry_run:
        print(yaml.safe_dump(out["config"], sort_keys=False), end="")
        where = f"; launch plan in {out['launch']}" if out["launch"] else ""
        print(f"# dry run: would train in {out['run_dir']}{where}", file=sys.stderr)
        return 0
    if out["status"] == RunRecordStatus.SUBMITTED:
        emit(args, out, [f"run {out['run']} is {out['launcher']} job {out['job']} ({out['job_state']}); "
                         "tianfeng runs shows its state, and collects it when it ends"])
        return 0
    if out["status"] == RunRecordStatus.PLANNED:
        emit(args, out, [f"launch plan written to {out['launch']} (run it on the cluster)"])
        return 0
    out["report"] = str(api.report(out["study"], storage=args.storage))
    emit(args, out, _promoted_lines(out))
    return 0 if out["status"] == RunRecordStatus.COMPLETED else 1


def _promoted_lines(out: dict) -> list[str]:
    full = next(((k, v) for k, v in out.items() if k.startswith("full_")), None)
    scored = f": {full[0].removeprefix('full_')} {full[1]:.2f} at full scale" if full and full[1] is not None else ""
    proxy = f" (proxy {out['proxy_score']:.2f})" if out.get("proxy_score") is not None else ""
    reused = ", reused from an earlier promotion" if out.get("reused") else ""
    lines = [f"trial {out['trial']} of {out['study']} {out['status']}{scored}{proxy}{reused}"]
    if out.get("run_dir"):
        lines.append(f"run dir: {out['run_dir']}")
    lines.append(f"report: {out['report']}")
    return lines


def run_runs_command(args) -> int:
    if args.cancel is not None:
        run = api.cancel(args.cancel, storage=args.storage)
        emit(args, run, [f"run {run['id']}: {run['job']['launcher']} job {run['job']['job_id']} cancelled; it is "
                         f"{run['status']} (promote trial {run['trial_number']} again to resume it)"])
        return 0
    if args.follow is not None:
        return _follow(args)
    rows = api.runs(args.study, storage=args.storage)
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


def _follow(args) -> int:
    """Each epoch to stdout as it is recorded, state changes to stderr; exit 0 when the run
    completed, 1 when it ended otherwise, 130 when Ctrl-C stops the following (not the run)."""
    if not args.interval > 0:
        raise ConfigError("--interval", "", f"must be > 0 seconds, got {args.interval:g}")
    try:
        for kind, item in api.follow(args.follow, storage=args.storage, interval_s=args.interval):
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
    job = run.get("job")
    if job is None or run["status"] != RunRecordStatus.SUBMITTED:
        return run["status"]
    reason = f" ({job['reason']})" if job["state"] == "pending" and job["reason"] else ""
    total = sum(p["epochs"] for p in (yaml.safe_load(run["config_yaml"]) or {}).get("phases", []))
    progress = f", epoch {len(run['epochs'])} of {total}" if job["state"] == "running" else ""
    return f"{job['launcher']} {job['job_id']} {job['state']}{reason}{progress}"


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"
