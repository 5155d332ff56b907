"""The launcher interface: a scheduler submits a run's batch script, reports the job's state and
cancels it. `local` (run here, the default) needs none of it; tianfeng.launch.launchers names
the schedulers."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from tianfeng.core.states import JOB_LIVE, JobStatus

if TYPE_CHECKING:
    from tianfeng.launch.job_options import SchedulerOptions



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
