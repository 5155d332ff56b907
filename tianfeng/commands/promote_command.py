"""`tianfeng promote` and `tianfeng runs`: the command-line side of promotion."""

from __future__ import annotations

import json
import logging
import sys

import yaml
from rich.console import Console

from tianfeng.commands.flags import emit
from tianfeng.hpo.scores import score
from tianfeng.promotion.run import Launch, load_study, promote
from tianfeng.store import RunRecordStatus, RunStore
from tianfeng.tables import add_plain_row, plain_table
from tianfeng.trainers.config import ConfigError

log = logging.getLogger("tianfeng.promote")


def chosen_trial(args) -> int | None:
    """The trial to promote: given by number, or `--fastest-to X` (the front trial with the
    least predicted time whose proxy metric reaches X); None after `--front` lists the front."""
    picks = sum(x is not None and x is not False for x in (args.trial, args.fastest_to, args.front or None))
    if picks != 1:
        raise ConfigError("trial", "", "give a trial number, --fastest-to LEVEL or --front (one of them)")
    if args.trial is not None:
        return args.trial
    from tianfeng.hpo.front import print_front

    study = load_study(args.storage, args.study)
    if args.front:
        print_front(study)
        return None
    from tianfeng.api import fastest_trial

    pick = fastest_trial(study, args.fastest_to)
    log.info("trial %d: the fastest front trial with %s >= %g (%.4g, full run predicted %.0f s)",
             pick.number, study.user_attrs.get("metric", "value"), args.fastest_to, score(pick),
             pick.user_attrs["predicted"]["seconds"])
    return pick.number


def run_promote_command(args) -> int:
    if (args.nodes is None) != (args.gpus_per_node is None):
        raise ConfigError("--nodes", "", "give --nodes and --gpus-per-node together")
    number = chosen_trial(args)
    if number is None:
        return 0
    launch = Launch(args.nodes, args.gpus_per_node, args.device, args.master_addr) if args.nodes else None
    out = promote(args.storage, args.study, number, batch_size=args.batch_size,
                  overrides=args.overrides, runs_dir=args.runs_dir, dry_run=args.dry_run, launch=launch)
    if args.dry_run:
        print(yaml.safe_dump(out["config"], sort_keys=False), end="")
        where = f"; launch plan in {out['launch']}" if out["launch"] else ""
        print(f"# dry run: would train in {out['run_dir']}{where}", file=sys.stderr)
        return 0
    if out["status"] == RunRecordStatus.PLANNED:
        emit(args, out, [f"launch plan written to {out['launch']} (run it on the cluster)"])
        return 0
    from tianfeng.api import report as write_report

    out["report"] = str(write_report(out["study"], storage=args.storage))
    if args.mlflow:
        from tianfeng.tracking import export_study

        export_study(args.mlflow, load_study(args.storage, out["study"]), args.storage)
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
    rows = RunStore(args.storage).runs(args.study)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    table = plain_table(f"promoted runs in {args.storage}",
                        ("run", "study", "trial", "kind", "status", "epochs", "proxy", "full", "run dir"))
    for r in rows:
        add_plain_row(table, str(r["id"]), r["study"], str(r["trial_number"]), r["kind"], r["status"],
                      str(len(r["epochs"])), _fmt(r["proxy_score"]), _fmt(r["final_score"]), r["run_dir"])
    Console().print(table)
    return 0


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"
