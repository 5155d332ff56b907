"""The CPU cores this process may run on."""

from __future__ import annotations

import os


def usable_cores() -> int:
    """The cores this process may run on: its affinity mask, which a Slurm allocation's cpuset,
    `taskset` and a container's CPU set narrow, where `os.cpu_count()` counts the whole machine."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1
