"""`tianfeng launch`: write (or print) the launch plan of a run; with --device cpu on one
machine, run it for real as N emulated nodes of G gloo processes each (torchrun or Ray Train);
with --via ray --address, run it on that Ray cluster."""

from __future__ import annotations

import sys

from tianfeng.launch.local import free_port, run_here
from tianfeng.launch.plan import LaunchPlan, check_fits, write_plan
from tianfeng.launch.ray_train import main_ray
from tianfeng.trainers.config import ConfigError, load_config


def run_launch_command(args) -> int:
    cfg = load_config(args.config)
    check_fits(cfg, args.nodes, args.gpus_per_node, str(args.config))
    local = args.device == "cpu" and args.master_addr == "127.0.0.1"
    plan = LaunchPlan(config_path=str(args.config), run_name=cfg.name, nodes=args.nodes,
                      per_node=args.gpus_per_node, device=args.device, master_addr=args.master_addr,
                      port=args.port or (free_port() if local else 29500))
    if args.address and args.via != "ray":
        raise ConfigError("--address", "", "is for --via ray (torchrun meets at --master-addr)")
    if args.dry_run:
        print(f"# on each of the {plan.nodes} nodes\n{plan.node_command()}")
        print(f"# Slurm\n{plan.sbatch()}", end="")
        print(f"# Ray (Ray Train workers, submitted to the head node)\n{plan.ray_job_command()}")
        return 0
    out_dir = args.out or cfg.resolved_run_dir / "launch"
    for path in write_plan(plan, out_dir):
        print(path)
    if args.via == "ray" and (args.address or local):
        return main_ray(plan, cfg.resolved_run_dir, args.address, json_output=args.json)
    if not local:
        print(f"tianfeng: plan written; run node-<i>.sh on each node, `sbatch {out_dir}/sbatch.sh`, "
              f"or {out_dir}/ray-job.sh", file=sys.stderr)
        return 0
    return run_here(plan)
