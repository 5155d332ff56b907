"""The options of a promotion, in one typed object: built once (by `tianfeng promote` from its
flags, by `tianfeng.promote` from keyword arguments), checked once, passed down unchanged."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from tianfeng.core.errors import ConfigError
from tianfeng.defaults import DEFAULT_STORAGE, STORAGE_HELP
from tianfeng.launch.job_options import SchedulerOptions
from tianfeng.options import SCHEDULER_FLAGS, option, with_changes


@dataclass(frozen=True)
class PromoteOptions(SchedulerOptions):
    """What `tianfeng promote` takes besides the trial; each field is the flag of the same name,
    generated from it (`overrides` is `--set`); the launcher's come from `SchedulerOptions`."""
    FLAG_GROUPS: ClassVar[dict[str, tuple[str, ...]]] = {
        "what to promote": ("study", "fastest_to", "batch_size", "overrides", "runs_dir", "dry_run"),
        "where it trains": ("nodes", "gpus_per_node", "min_nodes", "device", "master_addr"),
        "storage and tracking": ("storage", "mlflow", "wandb"),
        "scheduler (with --launcher slurm or ray)": (*SCHEDULER_FLAGS, "requeue_at_limit"),
    }
    study: str | None = option(None, "study name (default: the only study in the storage)")
    storage: str = option(DEFAULT_STORAGE, STORAGE_HELP, show_default=False)
    fastest_to: float | None = option(None, "promote the front trial with the least predicted wall time whose proxy "
                                      "metric reaches LEVEL", metavar="LEVEL")
    batch_size: int | None = option(None, "global batch of the full run's last phase; LR follows the space's "
                                    "scaling rule")
    overrides: tuple[str, ...] = option((), "override a value of the full run config (repeatable)", name="--set",
                                        repeat=True, metavar="KEY=VALUE")
    runs_dir: str | Path = option("runs", "where the promoted run's directory goes")
    dry_run: bool = option(False, "print the full config and the transfer; do not train")
    nodes: int | None = option(None, "run through a launch plan on N nodes (torchrun per node, Slurm script); "
                               "needs --gpus-per-node")
    gpus_per_node: int | None = option(None, "processes per node (GPUs, or CPU ranks)")
    min_nodes: int | None = option(None, "with --nodes: elastic, go on with as few as this many nodes when nodes "
                                   "fail (torchrun --nnodes MIN:MAX, restarting from the last checkpoint; every "
                                   "node count must fit the batch; not with --launcher ray)", metavar="N")
    device: str = option("cuda", "with --nodes: cuda writes the plan for a cluster; cpu runs it here as emulated "
                         "nodes", choices=("cuda", "cpu"))
    master_addr: str = option("127.0.0.1", "with --nodes: rendezvous host (the first node)")
    mlflow: str | None = option(None, "also log the study's trials and promoted runs as MLflow runs, e.g. "
                                "sqlite:///mlflow.db", metavar="URI")
    wandb: str | None = option(None, "also log the study's trials and promoted runs as W&B runs in this project",
                               metavar="PROJECT")
    requeue_at_limit: bool = option(False, "with --launcher slurm: accept a --time shorter than the run's predicted "
                                    "time on its cluster; the job trains in pieces, requeued at each limit from its "
                                    "last checkpoint")

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
        for flag, value in (("--nodes", self.nodes), ("--gpus-per-node", self.gpus_per_node),
                            ("--min-nodes", self.min_nodes)):
            if value is not None and value < 1:
                raise ConfigError(flag, "", f"must be >= 1, got {value}")
        self.check()
        if self.min_nodes is not None and self.nodes is None:
            raise ConfigError("--min-nodes", "", "needs --nodes and --gpus-per-node")
        if self.min_nodes is not None and self.launcher == "ray":
            raise ConfigError("--min-nodes", "", "is torchrun's elastic launch: not with --launcher ray (Ray Train "
                                                 "restarts its workers at the same size)")
        if self.requeue_at_limit and self.launcher != "slurm":
            raise ConfigError("--requeue-at-limit", "", "goes with --launcher slurm")
        if self.launcher != "local" and self.nodes is None:
            raise ConfigError("--launcher", "", f"{self.launcher} needs --nodes and --gpus-per-node")
        return self
