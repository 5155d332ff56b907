"""`tianfeng launch`: write (or print) the launch plan of a run; with --device cpu on one
machine, run it for real as N emulated nodes of G gloo processes each (torchrun or Ray Train);
with --via ray --address, run it on that Ray cluster."""

from __future__ import annotations

import json
import sys

from tianfeng import api
from tianfeng.trainers.engine import RunStatus
from tianfeng.trainers.metrics import summary_lines


def run_launch_command(args) -> int:
    if args.dry_run:
        plan = api.launch_plan(args.config, nodes=args.nodes, gpus_per_node=args.gpus_per_node, device=args.device,
                               master_addr=args.master_addr, port=args.port, via=args.via, address=args.address,
                               max_restarts=args.max_restarts, min_nodes=args.min_nodes)
        print(f"# on each of the {plan.nodes} nodes\n{plan.node_command()}")
        print(f"# Slurm\n{plan.sbatch()}", end="")
        print(f"# Ray (Ray Train workers, submitted to the head node)\n{plan.ray_job_command()}")
        return 0
    done = api.launch(args.config, nodes=args.nodes, gpus_per_node=args.gpus_per_node, device=args.device,
                      master_addr=args.master_addr, port=args.port, via=args.via, address=args.address,
                      max_restarts=args.max_restarts, out=args.out, min_nodes=args.min_nodes)
    for path in done["files"]:
        print(path)
    metrics = done["metrics"]
    if metrics is not None:
        if args.json:
            print(json.dumps(metrics, indent=2))
        else:
            print("\n".join(summary_lines(metrics.get("status", ""), metrics.get("final"),
                                          metrics.get("precision", ""), done["run_dir"])))
        if metrics.get("status") == RunStatus.DIVERGED:
            print("tianfeng: run diverged", file=sys.stderr)
            return 1
        return 0
    if done["exit_code"] is None:
        out_dir = done["plan_dir"]
        print(f"tianfeng: plan written; run node-<i>.sh on each node, `sbatch {out_dir}/sbatch.sh`, "
              f"or {out_dir}/ray-job.sh", file=sys.stderr)
        return 0
    return done["exit_code"]
