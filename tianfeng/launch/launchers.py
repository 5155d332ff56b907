"""The launchers a promoted run can go to, by name: `local` runs it here (or writes the plan),
the others submit it to their scheduler."""

from __future__ import annotations

from tianfeng.core.errors import LaunchError
from tianfeng.launch.job_options import LAUNCHERS
from tianfeng.launch.ray_jobs import RayJobs
from tianfeng.launch.scheduler import Scheduler
from tianfeng.launch.slurm import Slurm


def scheduler(name: str, address: str | None = None) -> Scheduler:
    """The scheduler called `name`; `address` is where it answers, for one that needs it (Ray's
    Jobs API, recorded with each job)."""
    if name == "slurm":
        return Slurm()
    if name == "ray":
        return RayJobs(address)
    raise LaunchError(f"--launcher: must be one of {', '.join(LAUNCHERS)}; got {name!r}")
