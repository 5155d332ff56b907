"""The options of a verb that can go to a scheduler (`tianfeng search`, `tianfeng promote`): which
launcher, and the job's partition, account, time limit and extra sbatch arguments. One typed
definition both verbs inherit, so their flags are the same."""

from __future__ import annotations

from dataclasses import dataclass

from tianfeng.launch.scheduler import LaunchError, SchedulerOptions
from tianfeng.launch.slurm import time_limit_s
from tianfeng.options import option

LAUNCHERS = ("local", "slurm", "ray")


@dataclass(frozen=True)
class SubmitOptions:
    launcher: str = option("local", "local: run here; slurm: submit to Slurm with sbatch (requeueable, signalled "
                           "before its time limit) and return at once; ray: submit to a Ray cluster's Jobs API "
                           "(ranks as Ray Train workers, restarted from the last checkpoint) and return at once",
                           choices=LAUNCHERS)
    partition: str | None = option(None, "with --launcher slurm: the job's partition")
    account: str | None = option(None, "with --launcher slurm: the job's account")
    time: str | None = option(None, "with --launcher slurm: the job's time limit, e.g. 4:00:00")
    scheduler_args: tuple[str, ...] = option((), "with --launcher slurm: passed to sbatch as it is (repeatable)",
                                             name="--sbatch-arg", repeat=True, metavar="ARG")
    jobs_address: str | None = option(None, "with --launcher ray: the Ray head's Jobs API, http://HEAD:8265 "
                                      "(default: $RAY_ADDRESS)", metavar="URL")

    def scheduler_options(self) -> SchedulerOptions:
        return SchedulerOptions(self.partition, self.account, self.time, tuple(self.scheduler_args),
                                address=self.jobs_address)

    def check_submit(self) -> None:
        """The launcher known, and the scheduler's flags only with a scheduler."""
        if self.launcher not in LAUNCHERS:
            raise LaunchError(f"--launcher: must be one of {', '.join(LAUNCHERS)}; got {self.launcher!r}")
        scheduler_only = [f for f, v in (("--partition", self.partition), ("--account", self.account),
                                         ("--time", self.time), ("--sbatch-arg", self.scheduler_args)) if v]
        if scheduler_only and self.launcher != "slurm":
            raise LaunchError(f"{scheduler_only[0]}: goes with --launcher slurm")
        if self.jobs_address is not None and self.launcher != "ray":
            raise LaunchError("--jobs-address: goes with --launcher ray")
        if self.time is not None:
            time_limit_s(self.time)
