"""Running the measuring processes of `tianfeng calibrate --throughput` through the launcher:
here (N emulated nodes, each a torchrun agent on this machine, meeting at a c10d rendezvous) or as
one Slurm job on N real nodes, so that the links between nodes are measured over the network the
runs will use. The plan, the request and the job's log stay in a folder beside the output."""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from tianfeng.core.errors import LaunchError
from tianfeng.core.ports import free_port
from tianfeng.core.states import JobStatus
from tianfeng.cost.measure import Grid, write_throughput
from tianfeng.cost.measure_ranks import write_request
from tianfeng.launch.job_options import SchedulerOptions
from tianfeng.launch.local import run_here
from tianfeng.launch.scripts import LaunchPlan
from tianfeng.launch.slurm import Slurm, sbatch_directives

log = logging.getLogger("tianfeng.calibrate")
POLL_S = 2.0
RUN_NAME = "tianfeng-throughput"  # the Slurm job's name and the rendezvous id
LAUNCHERS = ("local", "slurm")


def work_dir(output: Path) -> Path:
    return output.parent / f"{output.stem}-launch"


def measure_launched(grid: Grid, output: Path, *, processes: int, nodes: int, launcher: str, device: str,
                     threads: int, options: SchedulerOptions | None = None) -> dict[str, Any]:
    """Measure with `nodes` x `processes` ranks and write the throughput file to `output` (only
    when every rank finished: a failed or cancelled job leaves the old file as it was)."""
    if launcher not in LAUNCHERS:
        raise LaunchError(f"--launcher: calibrate --throughput runs here (local) or as a Slurm job (slurm); "
                          f"got {launcher!r}")
    if launcher == "local" and nodes > 1 and device == "cuda":
        raise LaunchError("--nodes: emulated nodes on this machine are CPU processes (--device cpu); measure "
                          "GPU nodes with --launcher slurm")
    work = work_dir(output.resolve())
    result_file = work / "throughput.json"
    result_file.unlink(missing_ok=True)
    request = write_request(work / "request.json", grid, device=device, threads=threads, output=result_file)
    plan = LaunchPlan(config_path=str(request), run_name=RUN_NAME, nodes=nodes, per_node=processes, device=device,
                      master_addr="127.0.0.1", port=free_port() if launcher == "local" else 29500,
                      entry=("-m", "tianfeng.cost.measure_ranks", str(request)))
    if launcher == "local":
        log.info("measuring with %d emulated node(s) x %d process(es) on this machine", nodes, processes)
        if run_here(plan) != 0:
            raise LaunchError(f"--throughput: a measuring process failed (its output is above; plan in {work})")
    else:
        _run_on_slurm(plan, work, options or SchedulerOptions())
    if not result_file.exists():
        raise LaunchError(f"--throughput: the measuring job ended without writing {result_file}")
    result = json.loads(result_file.read_text())
    write_throughput(result, output)
    return result


def _run_on_slurm(plan: LaunchPlan, work: Path, options: SchedulerOptions) -> None:
    """Submit the measurement as one job and wait for it; Ctrl-C leaves the job running."""
    slurm = Slurm()
    slurm.check(options)
    script = work / "sbatch.sh"
    script.write_text(plan.sbatch(tuple(sbatch_directives(options, work))))
    job = slurm.submit(script, options)
    print(f"tianfeng: measuring as slurm job {job} ({plan.nodes} node(s) x {plan.per_node}); its log: "
          f"{work}/slurm-{job}.out", file=sys.stderr)
    said = None
    while True:
        state = slurm.state(job)
        text = f"{state.state}{f' ({state.reason})' if state.reason and not state.ended else ''}"
        if text != said:
            print(f"tianfeng: slurm job {job}: {text}", file=sys.stderr)
            said = text
        if state.ended or state.state == JobStatus.UNKNOWN:
            break
        time.sleep(POLL_S)
    if state.state != JobStatus.COMPLETED and not (work / "throughput.json").exists():
        raise LaunchError(f"--throughput: slurm job {job} {state.state}: {state.reason}; its log: "
                          f"{work}/slurm-{job}.out")
