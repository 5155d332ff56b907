"""The options of a job that goes to a scheduler, one type from the flag to the batch script:
the launcher, and the job's partition, account, time limit, QoS, name, memory, CPUs and extra
sbatch arguments (Slurm), or the Jobs API and working folder (Ray). Every verb that submits
(`search`, `scale`, `promote`, `calibrate`) inherits it, so their flags are the same, and one
method checks it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tianfeng.core.errors import LaunchError
from tianfeng.launch import gate
from tianfeng.options import option, with_changes

LAUNCHERS = ("local", "slurm", "ray")
SIGNAL_S = 120  # the pre-timeout signal comes this long before the time limit: a checkpoint's time


@dataclass(frozen=True)
class SchedulerOptions:
    """Where a job goes and what its scheduler is told: the flags of every verb that submits (each
    field is its flag; the verbs' options inherit them), read as they are by the checks, the batch
    script and the schedulers."""
    launcher: str = option("local", "local: run here; slurm: submit to Slurm with sbatch (requeueable, signalled "
                           "before its time limit) and return at once; ray: submit to a Ray cluster's Jobs API "
                           "(ranks as Ray Train workers, restarted from the last checkpoint) and return at once",
                           choices=LAUNCHERS)
    partition: str | None = option(None, "with --launcher slurm: the job's partition")
    account: str | None = option(None, "with --launcher slurm: the job's account")
    time: str | None = option(None, "with --launcher slurm: the job's time limit in Slurm's formats (MM, HH:MM:SS, "
                              f"D-HH:MM:SS), e.g. 4:00:00; more than the {SIGNAL_S} s before it when the job is "
                              "signalled to checkpoint, and within the partition's MaxTime")
    qos: str | None = option(None, "with --launcher slurm: the job's quality of service")
    job_name: str | None = option(None, "with --launcher slurm: the job's name (default: the run's or the study's)")
    mem: str | None = option(None, "with --launcher slurm: memory per node, e.g. 64G (sbatch --mem)")
    cpus_per_task: int | None = option(None, "with --launcher slurm: CPUs per task (sbatch --cpus-per-task; a "
                                       "search's default is --cpus-per-trial rounded up)", metavar="N")
    scheduler_args: tuple[str, ...] = option((), "with --launcher slurm: passed to sbatch as it is (repeatable)",
                                             name="--sbatch-arg", repeat=True, metavar="ARG")
    jobs_address: str | None = option(None, "with --launcher ray: the Ray head's Jobs API, http://HEAD:8265 "
                                      "(default: $RAY_ADDRESS)", metavar="URL")
    working_dir: str | None = option(None, "with --launcher ray: a folder of your code (a model module) that Ray "
                                     "uploads to every node, where the run's processes start and import from; for "
                                     "nodes that do not share this machine's files", metavar="DIR")

    signal_s: int = SIGNAL_S  # no flag: the pre-timeout signal's lead

    def changed(self, **changes: Any) -> SchedulerOptions:
        """A copy with `changes`; an unknown name is one line with the closest known one."""
        return with_changes(self, "launcher", changes)

    def check(self) -> None:
        """The one check of a job's options, before anything is written or submitted: the launcher
        known, each scheduler flag only with its scheduler, and every value in its grammar (`gate`)."""
        if self.launcher not in LAUNCHERS:
            raise LaunchError(f"--launcher: must be one of {', '.join(LAUNCHERS)}; got {self.launcher!r}")
        scheduler_only = [f for f, v in (("--partition", self.partition), ("--account", self.account),
                                         ("--time", self.time), ("--sbatch-arg", self.scheduler_args),
                                         ("--qos", self.qos), ("--job-name", self.job_name), ("--mem", self.mem),
                                         ("--cpus-per-task", self.cpus_per_task)) if v]
        if scheduler_only and self.launcher != "slurm":
            raise LaunchError(f"{scheduler_only[0]}: goes with --launcher slurm")
        for flag, value in (("--jobs-address", self.jobs_address), ("--working-dir", self.working_dir)):
            if value is not None and self.launcher != "ray":
                raise LaunchError(f"{flag}: goes with --launcher ray")
        if self.working_dir is not None and not Path(self.working_dir).is_dir():
            raise LaunchError(f"--working-dir: {self.working_dir}: no such folder")
        for flag, value in (("--partition", self.partition), ("--account", self.account), ("--qos", self.qos)):
            if value is not None:
                gate.slurm_name(flag, value)
        if self.time is not None:
            limit = gate.slurm_time_s(self.time)
            if limit <= SIGNAL_S:
                raise LaunchError(f"--time: {self.time} ({limit} s) leaves no time to train: the job is signalled "
                                  f"{SIGNAL_S} s before its limit to checkpoint and requeue; give more than {SIGNAL_S} s")
        if self.job_name is not None:
            gate.job_name("--job-name", self.job_name)
        if self.mem is not None:
            gate.memory("--mem", self.mem)
        if self.cpus_per_task is not None and self.cpus_per_task < 1:
            raise LaunchError(f"--cpus-per-task: must be >= 1; got {self.cpus_per_task}")
        for arg in self.scheduler_args:
            gate.sbatch_arg(arg)
        if self.jobs_address is not None:
            gate.no_control("--jobs-address", self.jobs_address)
