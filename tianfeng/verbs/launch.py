"""`tianfeng launch`: the launch plan of a multi-node run, or the run itself here on CPU."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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


VERB = Verb(
    "launch", "write the launch plan of a multi-node run (or run it here on CPU)",
    "Check that a run fits N nodes x G devices, then write per-node torchrun commands (c10d rendezvous), a Slurm "
    "sbatch script and a Ray job (Ray Train). With --device cpu on this machine it runs the plan: N emulated nodes "
    "of G gloo processes, through torchrun or (--via ray) Ray Train.",
    "tianfeng.commands.launch_command:run_launch_command",
    (("tianfeng launch --config run.yaml --nodes 2 --gpus-per-node 2 --device cpu", "4 gloo ranks here"),
     ("tianfeng launch --config run.yaml --nodes 16 --gpus-per-node 8 --master-addr node-a --dry-run",
      "print the plan for 16 GPU nodes")),
    options=LaunchOptions, json=True, source="config")
