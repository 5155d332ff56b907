"""`tianfeng launch`: the launch plan of a multi-node run, or the run itself here on CPU."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tianfeng.core.errors import ConfigError
from tianfeng.options import option
from tianfeng.verbs import Verb


@dataclass(frozen=True)
class LaunchOptions:
    config: Path | None = option(None, "the run config YAML to launch", required=True)
    nodes: int | None = option(None, "nodes (machines) of the run", required=True)
    gpus_per_node: int | None = option(None, "processes per node (GPUs, or CPU ranks)", required=True)
    device: str = option("cuda", "cuda: write the plan for GPU nodes; cpu: run it here as emulated nodes of gloo "
                         "processes", choices=("cuda", "cpu"))
    master_addr: str = option("127.0.0.1", "rendezvous host (the first node)")
    port: int = option(0, "rendezvous port (default 29500, or a free one locally)", show_default=False)
    max_restarts: int = option(0, "restarts of every rank from the last checkpoint after a failure (torchrun's "
                               "--max-restarts, Ray Train's max_failures)", show_default=False)
    min_nodes: int = option(0, "elastic: go on with as few as this many nodes when nodes fail or are not there "
                            "(torchrun --nnodes MIN:MAX; needs --max-restarts >= 1; every node count must fit the "
                            "batch); default: exactly --nodes", show_default=False)
    out: Path | None = option(None, "where the plan goes (default <run_dir>/launch)")
    dry_run: bool = option(False, "print the plan only")
    via: str = option("torchrun", "what starts the ranks when the plan runs: torchrun per node, or Ray Train "
                      "workers", choices=("torchrun", "ray"))
    address: str | None = option(None, "with --via ray: the Ray cluster to run on (auto, HOST:PORT); default a Ray "
                                 "started here")


def launch_plan(config: str | Path, *, nodes: int, gpus_per_node: int, device: str = "cuda",
                master_addr: str = "127.0.0.1", port: int | None = None, via: str = "torchrun",
                address: str | None = None, max_restarts: int = 0, min_nodes: int = 0):
    """The checked launch plan of a run config on `nodes` x `gpus_per_node` processes: per-node
    torchrun commands, a Slurm script and a Ray job (a `tianfeng.launch.scripts.LaunchPlan`). A CPU
    plan on this machine gets a free rendezvous port; others 29500 unless `port` is given.
    `max_restarts`: how often every rank restarts from the last checkpoint after a failure;
    `min_nodes`: an elastic launch that goes on with as few nodes (torchrun's --nnodes MIN:MAX)."""
    return _launch_plan(config, nodes, gpus_per_node, device, master_addr, port, via, address, max_restarts,
                        min_nodes)[0]


def _launch_plan(config, nodes, gpus_per_node, device, master_addr, port, via, address, max_restarts=0,
                 min_nodes=0):
    """(the plan, its run config, whether it runs on this machine)."""
    from tianfeng.core.ports import free_port
    from tianfeng.core.run_config import load_config
    from tianfeng.launch.scripts import LaunchPlan, check_fits

    cfg = load_config(config)
    check_fits(cfg, nodes, gpus_per_node, str(config), min_nodes)
    if address and via != "ray":
        raise ConfigError("--address", "", "is for --via ray (torchrun meets at --master-addr)")
    if min_nodes and via == "ray":
        raise ConfigError("--min-nodes", "", "is torchrun's elastic launch: not with --via ray (Ray Train "
                                             "restarts its workers at the same size: --max-restarts)")
    local = device == "cpu" and master_addr == "127.0.0.1"
    plan = LaunchPlan(config_path=str(config), run_name=cfg.name, nodes=nodes, per_node=gpus_per_node, device=device,
                      master_addr=master_addr, port=port or (free_port() if local else 29500),
                      max_restarts=max_restarts, min_nodes=min_nodes)
    return plan, cfg, local


def launch(config: str | Path, *, nodes: int, gpus_per_node: int, device: str = "cuda",
           master_addr: str = "127.0.0.1", port: int | None = None, via: str = "torchrun",
           address: str | None = None, max_restarts: int = 0, out: str | Path | None = None,
           min_nodes: int = 0) -> dict:
    """Write a run's launch plan (default into <run_dir>/launch) and, where it can run from here,
    run it: a CPU plan on this machine as emulated nodes of gloo processes (torchrun, or Ray Train
    with `via="ray"`), or any plan on the Ray cluster at `address`. Returns the files written and,
    when it ran, the exit code (torchrun) or the run's final metrics (Ray). As `tianfeng launch`."""
    from tianfeng.launch.local import run_here
    from tianfeng.launch.scripts import write_plan

    plan, cfg, local = _launch_plan(config, nodes, gpus_per_node, device, master_addr, port, via, address,
                                    max_restarts, min_nodes)
    run_dir = cfg.resolved_run_dir
    out_dir = Path(out) if out else run_dir / "launch"
    done: dict[str, Any] = {"files": [str(p) for p in write_plan(plan, out_dir)], "plan_dir": str(out_dir),
                            "run_dir": str(run_dir), "exit_code": None, "metrics": None}
    if via == "ray" and (address or local):
        from tianfeng.launch.ray_train import run_with_ray_train

        done["metrics"] = run_with_ray_train(plan, run_dir, address)
    elif local:
        done["exit_code"] = run_here(plan)
    return done


def command(args: argparse.Namespace) -> int:
    from tianfeng.core.epoch_metrics import summary_lines
    from tianfeng.core.states import RunStatus

    if args.dry_run:
        plan = launch_plan(args.config, nodes=args.nodes, gpus_per_node=args.gpus_per_node, device=args.device,
                               master_addr=args.master_addr, port=args.port, via=args.via, address=args.address,
                               max_restarts=args.max_restarts, min_nodes=args.min_nodes)
        print(f"# on each of the {plan.nodes} nodes\n{plan.node_command()}")
        print(f"# Slurm\n{plan.sbatch()}", end="")
        print(f"# Ray (Ray Train workers, submitted to the head node)\n{plan.ray_job_command()}")
        return 0
    done = launch(args.config, nodes=args.nodes, gpus_per_node=args.gpus_per_node, device=args.device,
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


VERB = Verb(
    "launch", "write the launch plan of a multi-node run (or run it here on CPU)",
    "Check that a run fits N nodes x G devices, then write per-node torchrun commands (c10d rendezvous), a Slurm "
    "sbatch script and a Ray job (Ray Train). With --device cpu on this machine it runs the plan: N emulated nodes "
    "of G gloo processes, through torchrun or (--via ray) Ray Train.",
    command,
    (("tianfeng launch --config run.yaml --nodes 2 --gpus-per-node 2 --device cpu", "4 gloo ranks here"),
     ("tianfeng launch --config run.yaml --nodes 16 --gpus-per-node 8 --master-addr node-a --dry-run",
      "print the plan for 16 GPU nodes")),
    options=(LaunchOptions,), json=True, source="config", loads=("torch",))
