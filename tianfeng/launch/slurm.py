"""Slurm behind the launcher interface: submit a batch script, read a job's state, cancel it.

Job state is read with `scontrol show job -o`, not `sacct`: sacct needs Slurm's accounting
daemon (slurmdbd), which many clusters and every single-machine Slurm lack, and which submitit
and TorchX rely on. scontrol sees pending, running and recently finished jobs (until the
controller's MinJobAge passes); a job it no longer knows is judged by what its run directory
holds. Every command's own error line is passed on, and nothing is recorded as submitted unless
sbatch printed a job id."""

from __future__ import annotations

import math
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tianfeng.core.errors import LaunchError
from tianfeng.core.states import JobStatus
from tianfeng.launch import gate
from tianfeng.launch.job_options import SchedulerOptions
from tianfeng.launch.scheduler import JobState

# Slurm's job states, by what they mean for the run (JOB_STATE_STRING in Slurm's slurm.h)
_PENDING = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SUSPENDED"}
_RUNNING = {"RUNNING", "COMPLETING", "RESIZING", "SIGNALING", "STAGE_OUT"}
_ENDED = {"COMPLETED": JobStatus.COMPLETED, "CANCELLED": JobStatus.CANCELLED, "PREEMPTED": JobStatus.PREEMPTED}
# every other ended state (TIMEOUT, NODE_FAIL, BOOT_FAIL, DEADLINE, OUT_OF_MEMORY, ...) is a failure


def time_limit_s(text: str) -> int:
    """Seconds of a Slurm time limit (tianfeng.launch.gate.slurm_time_s: every field in range)."""
    return gate.slurm_time_s(text)


def slurm_time(seconds: float) -> str:
    """A time limit in Slurm's D-HH:MM:SS (HH:MM:SS under a day), rounded up to the minute."""
    minutes = math.ceil(seconds / 60)
    days, minutes = divmod(minutes, 24 * 60)
    text = f"{minutes // 60:02d}:{minutes % 60:02d}:00"
    return f"{days}-{text}" if days else text


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
    limit.
    Every value passes the gate (tianfeng.launch.gate) first: a directive holds one value of
    Slurm's grammar for its field, or nothing is written."""
    lines = [f"--output={gate.script_path('--runs-dir', str(log_dir))}/{output}", "--open-mode=append", "--requeue",
             f"--signal=B:USR1@{int(options.signal_s)}"]
    for flag, value in (("--partition", options.partition), ("--account", options.account), ("--qos", options.qos)):
        if value:
            lines.append(f"{flag}={gate.slurm_name(flag, value)}")
    if options.time:
        gate.slurm_time_s(options.time)
        lines.append(f"--time={options.time.strip()}")
    if options.job_name:
        lines.append(f"--job-name={gate.job_name('--job-name', options.job_name)}")
    if options.mem:
        lines.append(f"--mem={gate.memory('--mem', options.mem)}")
    if options.cpus_per_task:
        lines.append(f"--cpus-per-task={int(options.cpus_per_task)}")
    return [f"#SBATCH {line}" for line in lines]


def batch_script(header: list[str], command: str, *, job: str, who: str, on_signal: str, setup: tuple[str, ...] = (),
                 interrupt_first: bool = False, replace_killed: int = 0, replaced: str = "") -> str:
    """The one batch script tianfeng writes, for a run (a job) or a search's workers (an array's
    tasks): `header` (its #SBATCH lines), `setup`, then `command` in the
    background, so that the batch shell's trap runs when the pre-timeout signal comes (bash runs a
    trap only between commands). The trap says `on_signal` of `who` and requeues `job` (its id as
    the shell spells it); with `interrupt_first` it first stops the command as Ctrl-C would (a search
    worker queues its cut trial again) and waits for it. `replace_killed`: a command killed
    outright (SIGKILL: exit 137) is started again up to this many times, saying `replaced`."""
    lines = ["#!/bin/bash", *header, "set -uo pipefail"]
    if interrupt_first:  # job control: a background command keeps Ctrl-C (SIGINT), which the trap sends it
        lines.append("set -m")
    lines += [*setup, "requeue() {", f'  echo "tianfeng: {who}: signal before its time limit: {on_signal}" >&2']
    if interrupt_first:
        lines.append('  kill -INT "$child" 2> /dev/null; wait "$child"')
    lines += [f"  scontrol requeue {job}", "}", "trap requeue USR1"]
    run = [f"{command} &", "child=$!", 'wait "$child"; status=$?',
           'while kill -0 "$child" 2> /dev/null; do wait "$child"; status=$?; done  # a trap cut the wait']
    if replace_killed:
        lines += [f"for start in $(seq 0 {int(replace_killed)}); do", *(f"  {line}" for line in run),
                  '  [ "$status" -eq 137 ] || break', f'  echo "tianfeng: {who}: {replaced}" >&2', "done"]
    else:
        lines += run
    return "\n".join([*lines, 'exit "$status"']) + "\n"


def _task_state(line: str) -> JobState:
    """One line of `scontrol --oneliner show job`: one job, or one task of an array."""
    fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
    raw, reason = fields.get("JobState", "UNKNOWN"), fields.get("Reason", "None")
    restarts = int(fields.get("Restarts", "0") or 0) if fields.get("Restarts", "0").isdigit() else 0
    code = fields.get("ExitCode", "0:0").split(":")[0]
    exit_code = int(code) if code.isdigit() else None
    if raw in _PENDING:
        return JobState(JobStatus.PENDING, reason if reason != "None" else raw.lower(), None, restarts)
    if raw in _RUNNING:
        return JobState(JobStatus.RUNNING, "", None, restarts)
    return JobState(_ENDED.get(raw, JobStatus.FAILED), reason if reason != "None" else raw.lower(), exit_code, restarts)


# how an ended array reads when its tasks ended differently: the worst outcome first
_WORST_FIRST = (JobStatus.FAILED, JobStatus.PREEMPTED, JobStatus.CANCELLED, JobStatus.COMPLETED)


def array_state(tasks: list[JobState]) -> JobState:
    """A job array's state from its tasks': running while any task runs, pending while any waits
    (and none runs), and ended only when every task has: failed if any failed, else preempted,
    else cancelled, else completed."""
    restarts = max(t.restarts for t in tasks)
    if any(t.state == JobStatus.RUNNING for t in tasks):
        return JobState(JobStatus.RUNNING, "", None, restarts)
    waiting = [t for t in tasks if t.state == JobStatus.PENDING]
    if waiting:
        return JobState(JobStatus.PENDING, waiting[0].reason, None, restarts)
    for outcome in _WORST_FIRST:
        ended = [t for t in tasks if t.state == outcome]
        if ended:
            return JobState(outcome, ended[0].reason, ended[0].exit_code, restarts)
    return tasks[0]


@dataclass(frozen=True)
class Slurm:
    name: str = "slurm"
    script: str = "sbatch.sh"

    def submit(self, script: Path, options: SchedulerOptions) -> str:
        """sbatch the script; returns the job id. sbatch's own refusal is the error."""
        extra = [gate.sbatch_arg(a) for a in options.scheduler_args]
        out = _run(["sbatch", "--parsable", *extra, str(script)], "sbatch")
        job = out.strip().split(";")[0]
        if not job.isdigit() or not job.strip("0"):
            raise LaunchError(f"sbatch: printed no job id: {out.strip()!r}")
        return job

    def state(self, job: str) -> JobState:
        """The job's state; a job array's folds every task's (array_state)."""
        job = gate.job_id(self.name, job)
        out = subprocess.run(["scontrol", "--oneliner", "show", "job", job], capture_output=True, text=True, timeout=60)
        if out.returncode != 0:  # the controller forgot it (MinJobAge passed) or never had it
            return JobState(JobStatus.UNKNOWN, "the scheduler no longer knows the job", None)
        tasks = [_task_state(line) for line in out.stdout.splitlines() if "JobState=" in line]
        return array_state(tasks) if tasks else JobState(JobStatus.UNKNOWN, "scontrol printed no job state", None)

    def cancel(self, job: str) -> None:
        _run(["scancel", "--", gate.job_id(self.name, job)], "scancel")

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
        unknown partition, a time limit beyond the partition's MaxTime."""
        if shutil.which("sbatch") is None:
            raise LaunchError("--launcher slurm: sbatch is not on PATH (run this on a Slurm login node)")
        if not (options.partition or options.time):
            return
        out = _run(["sinfo", "--noheader", "--format=%R %l %a"], "sinfo")
        limits = {}
        default = None
        for line in out.splitlines():
            parts = line.split()
            if len(parts) >= 2:
                name = parts[0].rstrip("*")
                limits[name] = parts[1]
                default = default or (name if parts[0].endswith("*") else None)
        if options.partition and options.partition not in limits:
            raise LaunchError(f"--partition: {options.partition}: no such partition; "
                              f"the cluster has {', '.join(sorted(limits)) or 'none'}")
        partition = options.partition or default
        if options.time and partition and limits.get(partition, "infinite") not in ("infinite", "n/a", "UNLIMITED"):
            most = gate.slurm_time_s(limits[partition], "MaxTime")
            if gate.slurm_time_s(options.time) > most:
                raise LaunchError(f"--time: {options.time} is beyond partition {partition}'s MaxTime "
                                  f"{limits[partition]}; give at most that")
