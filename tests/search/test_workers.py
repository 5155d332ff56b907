"""--workers auto: one worker per GPU, or per CPU core with the cores shared out, never more
than the trials left; a count as given; anything else one line."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tianfeng.core.errors import ConfigError
from tianfeng.hpo.workers import MAX_CPU_WORKERS, parse_workers, resolve_workers


def test_auto_runs_one_worker_per_gpu() -> None:
    n, why = resolve_workers("auto", 30, gpus=8, cores=64)
    assert n == 8 and "one per GPU" in why


def test_auto_without_gpus_runs_one_worker_per_core_up_to_a_cap() -> None:
    n, why = resolve_workers("auto", 30, gpus=0, cores=2)
    assert n == 2 and "1 thread(s) per trial" in why and "--workers 1" in why
    n, why = resolve_workers("auto", 30, gpus=0, cores=64)
    assert n == MAX_CPU_WORKERS and f"{64 // MAX_CPU_WORKERS} thread(s) per trial" in why


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs an affinity mask of two cores or more to narrow")
def test_auto_counts_the_cores_this_process_may_use_not_the_machines() -> None:
    """A Slurm job given 1 of a node's cores (its cpuset) runs one worker of one thread, not
    one per core of the node."""
    one = min(os.sched_getaffinity(0))
    code = ("from tianfeng.hpo.workers import resolve_workers; "
            "print(*resolve_workers('auto', 30, gpus=0), sep='|')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         preexec_fn=lambda: os.sched_setaffinity(0, {one})).stdout.strip()
    assert out.startswith("1|auto: 1 CPU core(s), 1 thread(s) per trial"), out


def test_auto_never_starts_more_workers_than_trials_left() -> None:
    assert resolve_workers("auto", 1, gpus=0, cores=2)[0] == 1
    assert resolve_workers("auto", 0, gpus=4, cores=2)[0] == 1
    assert resolve_workers("auto", 3, gpus=8, cores=2)[0] == 3


def test_a_count_is_taken_as_given() -> None:
    assert resolve_workers(3, 30, gpus=0, cores=2) == (3, "as asked")
    assert resolve_workers("2", 30, gpus=0, cores=2) == (2, "as asked")


@pytest.mark.parametrize("bad", ["0", "-1", "two", 0])
def test_anything_else_is_one_line(bad) -> None:
    with pytest.raises(ConfigError, match="--workers: must be auto or a number >= 1"):
        parse_workers(bad)
