"""The options of a promotion, in one typed object: built once (by `tianfeng promote` from its
flags, by `tianfeng.promote` from keyword arguments), checked once, passed down unchanged."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tianfeng.defaults import DEFAULT_STORAGE
from tianfeng.launch.launchers import LAUNCHERS
from tianfeng.launch.slurm import time_limit_s
from tianfeng.options import with_changes
from tianfeng.trainers.config import ConfigError


@dataclass(frozen=True)
class PromoteOptions:
    """What `tianfeng promote` takes besides the trial; each field is the flag of the same name
    (`overrides` is `--set`)."""
    study: str | None = None  # default: the storage's only study
    storage: str = DEFAULT_STORAGE
    fastest_to: float | None = None  # instead of a trial: the fastest front trial reaching this
    batch_size: int | None = None  # the full run's last phase's global batch
    overrides: tuple[str, ...] = ()  # KEY=VALUE changes of the full run config
    runs_dir: str | Path = "runs"
    dry_run: bool = False  # print the full config and the transfer; train nothing
    nodes: int | None = None  # through a launch plan on this many nodes ...
    gpus_per_node: int | None = None  # ... of this many processes
    device: str = "cuda"  # with nodes: cuda writes a cluster's plan; cpu runs it here
    master_addr: str = "127.0.0.1"
    mlflow: str | None = None  # a tracking URI: the study exported once the run trained
    launcher: str = "local"  # with nodes: local runs (or plans) it here; slurm submits it
    partition: str | None = None  # with --launcher slurm: the job's partition ...
    account: str | None = None  # ... account ...
    time: str | None = None  # ... and time limit (a Slurm time: 4:00:00)
    scheduler_args: tuple[str, ...] = ()  # passed to sbatch as they are

    def changed(self, **changes: Any) -> PromoteOptions:
        """A copy with `changes`; an unknown name is one line with the closest known one."""
        return with_changes(self, "promote", changes)

    def checked(self, trial: int | None) -> PromoteOptions:
        """These options for `trial`, or the first mistake as one line naming the flag."""
        if (trial is None) == (self.fastest_to is None):
            raise ConfigError("trial", "", "give a trial number or --fastest-to LEVEL (one of them)")
        if self.batch_size is not None and self.batch_size < 1:
            raise ConfigError("--batch-size", "", f"must be >= 1, got {self.batch_size}")
        if (self.nodes is None) != (self.gpus_per_node is None):
            raise ConfigError("--nodes", "", "give --nodes and --gpus-per-node together")
        if self.device not in ("cuda", "cpu"):
            raise ConfigError("--device", self.device, "allowed: cuda, cpu")
        if self.launcher not in LAUNCHERS:
            raise ConfigError("--launcher", "", f"must be one of {', '.join(LAUNCHERS)}; got {self.launcher!r}")
        if self.launcher != "local" and self.nodes is None:
            raise ConfigError("--launcher", "", f"{self.launcher} needs --nodes and --gpus-per-node")
        scheduler_only = [f for f, v in (("--partition", self.partition), ("--account", self.account),
                                         ("--time", self.time), ("--sbatch-arg", self.scheduler_args)) if v]
        if scheduler_only and self.launcher == "local":
            raise ConfigError(scheduler_only[0], "", "goes with --launcher slurm")
        if self.time is not None:
            time_limit_s(self.time)
        return self
