"""Running a launch plan on this one machine: every node's torchrun started here, meeting at a
c10d rendezvous on localhost, as N emulated nodes of G gloo processes (CPU)."""

from __future__ import annotations

import os
import subprocess
import sys

from tianfeng.launch.scripts import LaunchPlan


def run_here(plan: LaunchPlan) -> int:
    """Exit code 0 when every node agent succeeded. What the ranks print goes to stderr, as every
    log does: stdout holds the command's result alone (`promote --json`)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    torchrun = [sys.executable, "-m", "torch.distributed.run"]
    procs = [subprocess.Popen(torchrun + plan.torchrun_args()[1:], env=env, stdout=2) for _ in range(plan.nodes)]  # fd 2: stderr
    codes = [p.wait() for p in procs]
    return 0 if all(c == 0 for c in codes) else 1
