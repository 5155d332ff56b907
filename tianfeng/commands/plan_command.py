"""`tianfeng plan`: the predicted wall time of a run at several GPU counts for flat,
hierarchical and compressed gradient exchange, part by part (tianfeng.cost.walltime: the
same model the search scores recipes with), and whether its per-GPU batch fits the memory."""

from __future__ import annotations

import json
import math
import sys

from tianfeng import api
from tianfeng.commands.flags import options_from_flags
from tianfeng.cost.exchange import PRESETS
from tianfeng.cost.grid_options import PlanOptions
from tianfeng.cost.step_time import DEVICES
from tianfeng.cost.walltime import format_seconds
from tianfeng.terminal.tables import add_plain_row, plain_table, table_console


def run_plan_command(args) -> int:
    grid = api.plan(args.config, options_from_flags(args, PlanOptions))
    cfg, spec, rows = grid.config, grid.cluster, grid.rows
    if args.profile:
        print("figures: " + ", ".join(f"{k} {v}" for k, v in spec.figure_sources().items())
              + f" (profile {args.profile})", file=sys.stderr)
    else:
        print(f"figures: {DEVICES[args.preset].source}; {DEVICES[args.preset].node_source}; "
              f"{PRESETS[args.preset].source}", file=sys.stderr)
    for row in rows:
        if row["gpus"] == args.gpus and row["variant"] == "flat":
            for note in row["notes"]:
                print(f"tianfeng: {note}", file=sys.stderr)
            if row["memory"] != "fits":
                print(f"tianfeng: does not fit: {row['memory']}", file=sys.stderr)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    last = cfg.phases[-1]
    links = spec.links()
    table = plain_table(title=f"{cfg.model.name}, {len(cfg.phases)} phase(s), {args.train_images:,} training images; "
                        f"last phase {math.ceil(last.batch_size / args.gpus)} images/GPU at {last.resolution} px on "
                        f"{'measured' if args.profile else args.preset.upper()}; links intra {links.intra.gbit_s:g} Gbit/s per GPU, "
                        f"{links.adapters_per_node} x {links.inter.gbit_s:g} Gbit/s adapters per node; "
                        f"{spec.loader} data on {spec.loader_cores:g} cores per GPU",
                        columns=("GPUs", "variant", "run", "start-up", "compute", "exchange", "data wait",
                                 "other", "samples/s", "scaling eff.", "memory"))
    for r in rows:
        p = r["parts"]
        other = sum(p.values()) - p["startup"] - p["compute"] - p["exchange"] - p["data_wait"]
        add_plain_row(table, str(r["gpus"]), r["variant"], format_seconds(r["seconds"]),
                      format_seconds(p["startup"]), format_seconds(p["compute"]), format_seconds(p["exchange"]),
                      format_seconds(p["data_wait"]), format_seconds(other), f"{r['samples_per_s']:,.0f}",
                      f"{100 * r['efficiency']:.1f}%", "fits" if r["memory"] == "fits" else "too big")
    table_console().print(table)
    print("other: optimizer passes, noise-scale steps, SyncBN, evaluation and checkpoints; --json has each part",
          file=sys.stderr)
    return 0
