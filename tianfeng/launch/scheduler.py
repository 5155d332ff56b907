"""The launcher interface: a scheduler submits a run's batch script, reports the job's state and
cancels it. `local` (run here, the default) needs none of it; tianfeng.launch.launchers names
the schedulers."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tianfeng.core.errors import ConfigError
from tianfeng.core.states import JOB_LIVE, JobStatus

SIGNAL_S = 120  # the pre-timeout signal comes this long before the time limit: a checkpoint's time


class LaunchError(ConfigError):
    """A scheduler's refusal or a bad launcher option: one line, exit 2, nothing recorded."""

    def __init__(self, message: str) -> None:
        super().__init__("", "", message)


@dataclass(frozen=True)
class SchedulerOptions:
    partition: str | None = None
    account: str | None = None
    time: str | None = None  # a Slurm time limit, e.g. 4:00:00
    extra: tuple[str, ...] = ()  # passed to the submitting command as they are
    signal_s: int = SIGNAL_S
    address: str | None = None  # where the scheduler answers, for one that is not found by itself (Ray)
    qos: str | None = None
    job_name: str | None = None  # replaces the run's or search's own job name
    mem: str | None = None  # memory per node, e.g. 64G
    cpus_per_task: int | None = None
    working_dir: str | None = None  # Ray: a folder uploaded to every node (runtime_env working_dir)


@dataclass(frozen=True)
class JobState:
    """Where a job stands: pending (with the scheduler's reason), running, or how it ended
    (completed, failed, cancelled, preempted), and how often the scheduler restarted it."""
    state: JobStatus
    reason: str
    exit_code: int | None
    restarts: int = 0

    @property
    def ended(self) -> bool:
        return self.state not in JOB_LIVE


class Scheduler(Protocol):
    name: str
    script: str  # the launch plan's file it submits

    def submit(self, script: Path, options: SchedulerOptions) -> str: ...

    def state(self, job: str) -> JobState: ...

    def cancel(self, job: str) -> None: ...

    def check(self, options: SchedulerOptions) -> None: ...

    def nodes(self, options: SchedulerOptions) -> list[str]: ...
