"""Slurm behind the launcher interface: submit a batch script, read a job's state, cancel it.

Job state is read with `scontrol show job -o`, not `sacct`: sacct needs Slurm's accounting
daemon (slurmdbd), which many clusters and every single-machine Slurm lack, and which submitit
and TorchX rely on. scontrol sees pending, running and recently finished jobs (until the
controller's MinJobAge passes); a job it no longer knows is judged by what its run directory
holds. Every command's own error line is passed on, and nothing is recorded as submitted unless
sbatch printed a job id."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tianfeng.launch.scheduler import JobState, LaunchError, SchedulerOptions

# Slurm's job states, by what they mean for the run (JOB_STATE_STRING in Slurm's slurm.h)
_PENDING = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SUSPENDED"}
_RUNNING = {"RUNNING", "COMPLETING", "RESIZING", "SIGNALING", "STAGE_OUT"}
_ENDED = {"COMPLETED": "completed", "CANCELLED": "cancelled", "FAILED": "failed", "TIMEOUT": "failed",
          "NODE_FAIL": "failed", "PREEMPTED": "preempted", "BOOT_FAIL": "failed", "DEADLINE": "failed",
          "OUT_OF_MEMORY": "failed", "SPECIAL_EXIT": "failed"}
_TIME = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?")


def time_limit_s(text: str) -> int:
    """Seconds of a Slurm time limit: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS."""
    m = _TIME.fullmatch(text.strip())
    if not m:
        raise LaunchError(f"--time: must be a Slurm time limit (MM, HH:MM:SS or D-HH:MM:SS); got {text!r}")
    days, a, b, c = (int(g) if g else None for g in m.groups())
    if days is None:
        h, mi, s = (0, a, b or 0) if c is None else (a, b, c)  # MM[:SS] or HH:MM:SS
    else:
        h, mi, s = a, b or 0, c or 0
    return (days or 0) * 86400 + h * 3600 + mi * 60 + s


def _run(args: list[str], what: str) -> str:
    if shutil.which(args[0]) is None:
        raise LaunchError(f"--launcher slurm: {args[0]} is not on PATH (run this on a Slurm login node)")
    out = subprocess.run(args, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        message = (out.stderr.strip() or out.stdout.strip() or f"exit {out.returncode}").splitlines()[-1]
        raise LaunchError(f"{what}: {message}")
    return out.stdout


def sbatch_directives(options: SchedulerOptions, log_dir: Path, output: str = "slurm-%j.out") -> list[str]:
    """The #SBATCH lines the options add: limits, where the output goes (`output` in `log_dir`:
    slurm-%A_%a.out for a job array), and requeue on preemption with a signal before the time
    limit."""
    lines = [f"--output={log_dir}/{output}", "--open-mode=append", "--requeue",
             f"--signal=B:USR1@{options.signal_s}"]
    for flag, value in (("--partition", options.partition), ("--account", options.account),
                        ("--time", options.time)):
        if value:
            lines.append(f"{flag}={value}")
    return [f"#SBATCH {line}" for line in lines]


@dataclass(frozen=True)
class Slurm:
    name: str = "slurm"
    script: str = "sbatch.sh"

    def submit(self, script: Path, options: SchedulerOptions) -> str:
        """sbatch the script; returns the job id. sbatch's own refusal is the error."""
        out = _run(["sbatch", "--parsable", *options.extra, str(script)], "sbatch")
        job = out.strip().split(";")[0]
        if not job.isdigit():
            raise LaunchError(f"sbatch: printed no job id: {out.strip()!r}")
        return job

    def state(self, job: str) -> JobState:
        out = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True, timeout=60)
        if out.returncode != 0:  # the controller forgot it (MinJobAge passed) or never had it
            return JobState("unknown", "the scheduler no longer knows the job", None)
        fields = dict(f.split("=", 1) for f in out.stdout.split() if "=" in f)
        raw, reason = fields.get("JobState", "UNKNOWN"), fields.get("Reason", "None")
        restarts = int(fields.get("Restarts", "0") or 0)
        code = fields.get("ExitCode", "0:0").split(":")[0]
        exit_code = int(code) if code.isdigit() else None
        if raw in _PENDING:
            return JobState("pending", reason if reason != "None" else raw.lower(), None, restarts)
        if raw in _RUNNING:
            return JobState("running", "", None, restarts)
        return JobState(_ENDED.get(raw, "failed"), reason if reason != "None" else raw.lower(), exit_code, restarts)

    def cancel(self, job: str) -> None:
        _run(["scancel", job], "scancel")

    def nodes(self, options: SchedulerOptions) -> list[str]:
        """The host names of the nodes a job may get: its partition's, or the default partition's
        (the one sinfo marks with *) when none is given."""
        out = _run(["sinfo", "--noheader", "--Node", "--format=%n %P"], "sinfo")
        rows = [line.split() for line in out.splitlines() if len(line.split()) == 2]
        if options.partition:
            return sorted({host for host, part in rows if part.rstrip("*") == options.partition})
        default = {host for host, part in rows if part.endswith("*")}
        return sorted(default or {host for host, _ in rows})

    def check(self, options: SchedulerOptions) -> None:
        """Refuse at once, before anything is written, what would fail later: no sbatch here, an
        unknown partition."""
        if shutil.which("sbatch") is None:
            raise LaunchError("--launcher slurm: sbatch is not on PATH (run this on a Slurm login node)")
        if options.partition:
            out = _run(["sinfo", "--noheader", "--format=%R"], "sinfo")
            known = sorted({p.strip().rstrip("*") for p in out.split()})
            if options.partition not in known:
                raise LaunchError(f"--partition: {options.partition}: no such partition; "
                                  f"the cluster has {', '.join(known) or 'none'}")
