"""The launchers a promoted run can go to, by name: `local` runs it here (or writes the plan),
the others submit it to their scheduler."""

from __future__ import annotations

from tianfeng.launch.scheduler import LaunchError, Scheduler
from tianfeng.launch.slurm import Slurm
from tianfeng.launch.submit_options import LAUNCHERS

_SCHEDULERS: dict[str, type] = {"slurm": Slurm}


def scheduler(name: str) -> Scheduler:
    if name not in _SCHEDULERS:
        raise LaunchError(f"--launcher: must be one of {', '.join(LAUNCHERS)}; got {name!r}")
    return _SCHEDULERS[name]()
