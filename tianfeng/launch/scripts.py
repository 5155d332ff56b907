"""Launch plans: the per-node `torchrun` commands (c10d rendezvous), a Slurm batch script and a
Ray job that start one run on N nodes x G devices, after checking the run fits that world."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from tianfeng.core.errors import ConfigError
from tianfeng.core.names import check_name
from tianfeng.core.run_config import RunConfig
from tianfeng.launch import gate
from tianfeng.launch.slurm import batch_script

_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,252}|\[?[0-9A-Fa-f:]+\]?")
RAY_DASHBOARD_PORT = 8265  # where `ray job submit` finds the head node


@dataclass(frozen=True)
class LaunchPlan:
    """`run_name` is a checked name (tianfeng.core.names); every other value is quoted where it
    reaches a shell."""
    config_path: str
    run_name: str
    nodes: int
    per_node: int
    device: str  # cuda | cpu
    master_addr: str
    port: int
    max_restarts: int = 0  # torchrun restarts every rank from the last checkpoint after a failure
    # elastic: the run goes on with as few as this many nodes (torchrun --nnodes MIN:MAX), the
    # survivors restarting from the last checkpoint at the smaller world; 0: exactly `nodes`
    min_nodes: int = 0
    # what every rank runs, as python arguments (`-m MODULE ...`); empty: `tianfeng train` of the config
    entry: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_name(self.run_name, "config", "name")  # becomes the Slurm job name and rendezvous id
        for flag, value in (("--nodes", self.nodes), ("--gpus-per-node", self.per_node)):
            if value < 1:
                raise ConfigError(flag, "", f"must be >= 1, got {value}")
        gate.port("--port", self.port)
        if self.max_restarts < 0:
            raise ConfigError("--max-restarts", "", f"must be >= 0, got {self.max_restarts}")
        if self.min_nodes and not 1 <= self.min_nodes <= self.nodes:
            raise ConfigError("--min-nodes", "", f"must be between 1 and --nodes ({self.nodes}), got {self.min_nodes}")
        if self.elastic and self.max_restarts < 1:
            raise ConfigError("--min-nodes", "", "needs --max-restarts >= 1: the nodes left restart their ranks "
                                                 "from the last checkpoint to go on")
        if not _HOST.fullmatch(self.master_addr):
            raise ConfigError("--master-addr", "", f"must be a host name or IP address; got {self.master_addr!r}")

    @property
    def world(self) -> int:
        return self.nodes * self.per_node

    @property
    def elastic(self) -> bool:
        return 0 < self.min_nodes < self.nodes

    @property
    def node_counts(self) -> str:
        """torchrun's --nnodes (N, or MIN:MAX) and, with `-` for `:`, Slurm's --nodes."""
        return f"{self.min_nodes}:{self.nodes}" if self.elastic else str(self.nodes)

    def train_args(self) -> list[str]:
        if self.entry:
            return list(self.entry)
        return ["-m", "tianfeng.cli", "train", "--config", self.config_path, "--set", f"device={self.device}",
                "--set", f"distributed.local_size={self.per_node}"]

    def torchrun_args(self) -> list[str]:
        # the same command on every node: c10d rendezvous assigns node ranks (ranks stay
        # contiguous per node, which the hierarchical hook's node groups rely on)
        restarts = [f"--max-restarts={self.max_restarts}"] if self.max_restarts else []
        return ["torchrun", f"--nnodes={self.node_counts}", f"--nproc-per-node={self.per_node}", *restarts,
                "--rdzv-backend=c10d", f"--rdzv-endpoint={self.master_addr}:{self.port}",
                f"--rdzv-id={self.run_name}", *self.train_args()]

    def node_command(self) -> str:
        return shlex.join(self.torchrun_args())

    def ray_entry_args(self) -> list[str]:
        """What a Ray job runs on the head node: this launch through Ray Train
        (tianfeng/launch/ray_train.py), its own copy of the plan kept apart in `ray-job/`."""
        restarts = ["--max-restarts", str(self.max_restarts)] if self.max_restarts else []
        return ["tianfeng", "launch", "--config", self.config_path, "--nodes", str(self.nodes),
                "--gpus-per-node", str(self.per_node), "--device", self.device, "--via", "ray",
                "--address", "auto", *restarts, "--out", str(Path(self.config_path).parent / "ray-job")]

    def ray_job_command(self) -> str:
        """`ray job submit` to the head node, whose entrypoint is `ray_entry_args`. tianfeng and
        the config's data must be on every node."""
        return shlex.join(["ray", "job", "submit", f"--address=http://{self.master_addr}:{RAY_DASHBOARD_PORT}",
                           f"--submission-id={self.run_name}-{self.nodes}x{self.per_node}", "--",
                           *self.ray_entry_args()])

    def sbatch(self, directives: tuple[str, ...] = ()) -> str:
        """One task per node, each running the same torchrun. Every argument is quoted once for
        the batch shell, which expands only `$MASTER_ADDR`: no `bash -c` with quotes nested inside.
        `directives` (from a launcher: limits, output, --requeue, --signal=B:USR1@N) go in as they
        are. srun runs in the background so that the batch shell's trap runs when the signal comes
        (bash runs a trap only between commands): the job is requeued and, started again, resumes
        from the run's last checkpoint."""
        endpoint = f"--rdzv-endpoint={self.master_addr}:{self.port}"
        command = " ".join(f'--rdzv-endpoint="$MASTER_ADDR":{self.port}' if a == endpoint else shlex.quote(a)
                           for a in self.torchrun_args())
        # elastic: Slurm may start it on fewer nodes, and a node that fails ends neither the job
        # nor the step; torchrun's survivors go on
        header = [f"#SBATCH --job-name={self.run_name}", f"#SBATCH --nodes={self.node_counts.replace(':', '-')}",
                  "#SBATCH --ntasks-per-node=1", *([f"#SBATCH --gpus-per-node={self.per_node}"]
                                                   if self.device == "cuda" else []),
                  "#SBATCH --exclusive", *(["#SBATCH --no-kill"] if self.elastic else []), *directives]
        srun = "srun --no-kill" if self.elastic else "srun"
        return batch_script(header, f"{srun} {command}", job='"$SLURM_JOB_ID"', who="job $SLURM_JOB_ID",
                            on_signal="requeued, it resumes from the last checkpoint",
                            setup=('export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',))


def check_fits(cfg: RunConfig, nodes: int, per_node: int, source: str, min_nodes: int = 0) -> None:
    """The checks a launch makes before anything starts: one line each, naming the key. An
    elastic launch (`min_nodes`) must fit every node count it may run at."""
    if nodes < 1:
        raise ConfigError("--nodes", "", f"must be >= 1, got {nodes}")
    if per_node < 1:
        raise ConfigError("--gpus-per-node", "", f"must be >= 1, got {per_node}")
    for n in range(min_nodes or nodes, nodes + 1):
        world = n * per_node
        for i, phase in enumerate(cfg.phases):
            if phase.batch_size % world:
                raise ConfigError(source, f"phases.{i}.batch_size", f"must be divisible by nodes x GPUs "
                                  f"({n} x {per_node} = {world}){_at(n, nodes)}, got {phase.batch_size}")
        emulated = cfg.distributed.emulate_gpus
        if emulated > world and emulated % world:
            raise ConfigError(source, "distributed.emulate_gpus", f"must be a multiple of the world size "
                              f"({n} x {per_node} = {world}){_at(n, nodes)}: each rank emulates whole GPUs, "
                              f"got {emulated}")
    if cfg.distributed.local_size and cfg.distributed.local_size != per_node:
        raise ConfigError(source, "distributed.local_size", f"says {cfg.distributed.local_size} ranks per "
                          f"node but the launch has --gpus-per-node {per_node}")
    if cfg.distributed.hook == "hierarchical" and min(min_nodes or nodes, nodes) < 2:
        raise ConfigError(source, "distributed.hook", "hierarchical needs --nodes >= 2"
                          + (" (and --min-nodes >= 2)" if min_nodes else ""))


def _at(n: int, nodes: int) -> str:
    return f" at {n} of the elastic launch's up to {nodes} nodes" if n != nodes else ""


def write_plan(plan: LaunchPlan, out_dir: Path, directives: tuple[str, ...] = ()) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for node in range(plan.nodes):
        path = out_dir / f"node-{node}.sh"
        path.write_text(f"#!/bin/bash\n# node {node} of {plan.nodes}: run on that node\n{plan.node_command()}\n")
        path.chmod(0o755)
        paths.append(path)
    for name, text in (("sbatch.sh", plan.sbatch(directives)),
                       ("ray-job.sh", f"#!/bin/bash\n# from any machine that reaches the Ray head node\n"
                                      f"{plan.ray_job_command()}\n"),
                       ("ray-entry.sh", f"#!/bin/bash\n# a Ray job's entrypoint, on the head node "
                                        f"(`tianfeng promote --launcher ray` submits it)\n"
                                        f"exec {shlex.join(plan.ray_entry_args())}\n")):
        path = out_dir / name
        path.write_text(text)
        path.chmod(0o755)
        paths.append(path)
    return paths
