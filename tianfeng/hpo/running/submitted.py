"""A search's workers submitted to Slurm: a job array whose every task runs one worker (`tianfeng
search --resume --workers 1`) on the study this process created, so the budget is spent on the
cluster while nothing runs here. Each worker draws from its own sampler stream; a task signalled
before its time limit (or preempted) stops its worker, whose cut trial is queued again from its
checkpoint, and is requeued; a worker killed outright leaves its trial to the heartbeat, which
another worker retries, and its task starts a new worker while the budget lasts. The study
records the job (`workers_job`)."""

from __future__ import annotations

import dataclasses
import logging
import math
import pickle
import shlex
import socket
import sys
from pathlib import Path

from tianfeng.core.errors import LaunchError
from tianfeng.hpo.options import SearchOptions
from tianfeng.hpo.spec import SearchSpec
from tianfeng.launch import gate
from tianfeng.launch.launchers import scheduler
from tianfeng.launch.slurm import batch_script, sbatch_directives
from tianfeng.options import option_args
from tianfeng.storage.study_attrs import StudyKey

log = logging.getLogger("tianfeng.search")
WORKER_RESTARTS = 3  # workers killed outright that a task replaces



def worker_options(spec: SearchSpec) -> SearchOptions:
    """What each task's worker runs: the search's own options, resolved as this process resolved
    them (study, rung, sampler, floor), joining the study, with paths that hold on any node."""
    # the job's own options stay here: a task runs one local worker (its trials on
    # --gpus-per-trial ranks, the task's GPUs)
    return spec.options.changed(
        study=spec.study, sampler=spec.sampler, fidelity=spec.rung, min_accuracy=spec.accuracy_floor, workers=1,
        promote="none",  # no task pauses the others for a full run
        resume=True, runs_dir=str(spec.runs_root.resolve()), launcher="local", partition=None, account=None,
        time=None, scheduler_args=(), cpus_per_trial=None, mlflow=None, wandb=None, dry_run=False, qos=None, job_name=None, mem=None,
        cpus_per_task=None, array_throttle=None,
        profile=str(Path(spec.options.profile).resolve()) if spec.options.profile else None)


def needs_spec_file(spec: SearchSpec) -> bool:
    """Whether the spec says more than `tianfeng search`'s flags can."""
    default = SearchSpec(spec.space_path, spec.options, spec.study, spec.rung, spec.sampler)
    return any(getattr(spec, f) != getattr(default, f)
               for f in ("batch_size", "set_overrides", "priors", "epoch_budget"))


def write_spec_file(spec: SearchSpec, path: Path) -> Path:
    # the worker joins a study that exists: nothing of the start-up (warm start, copied trials) again
    path.write_bytes(pickle.dumps(dataclasses.replace(spec, warm_start=(), copied_trials=(), study_attrs={})))
    return path


def array_script(spec: SearchSpec, workers: int, log_dir: Path, check_only: bool = False) -> str:
    """The batch script of the job array: one worker per task, in the background so that the
    batch shell's trap runs when the pre-timeout signal comes (bash runs a trap only between
    commands), and the trap stops the worker as Ctrl-C would. `check_only`: every value passes
    the gate, and no spec file is written."""
    o = spec.options
    if needs_spec_file(spec) and check_only:
        worker = [sys.executable]
    elif needs_spec_file(spec):  # a scale study's search: what its flags cannot say travels in a file
        worker = [sys.executable, "-m", "tianfeng.hpo.running.spec_worker",
                  str(write_spec_file(spec, log_dir / "search-spec.pickle"))]
    else:
        worker = [sys.executable, "-m", "tianfeng.cli", "search", "--space", str(Path(spec.space_path).resolve()),
                  *option_args(worker_options(spec))]
    command = " ".join(shlex.quote(a) for a in worker)
    # Slurm allots whole CPUs and GPUs: a share is rounded up
    resources = [*([f"#SBATCH --cpus-per-task={math.ceil(o.cpus_per_trial)}"] if o.cpus_per_trial and not o.cpus_per_task
                   else []),
                 *([f"#SBATCH --gpus-per-task={math.ceil(o.gpus_per_trial)}"] if o.gpus_per_trial else [])]
    throttle = f"%{int(o.array_throttle)}" if o.array_throttle else ""
    header = [f"#SBATCH --job-name=search-{spec.study}", f"#SBATCH --array=0-{workers - 1}{throttle}",
              "#SBATCH --ntasks=1", *resources,
              f"#SBATCH --chdir={gate.script_path('the working folder', str(Path.cwd()))}",
              *sbatch_directives(o, log_dir, "slurm-%A_%a.out")]
    task = '"${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"'
    # a worker killed outright (SIGKILL: the OOM killer, a node agent) is replaced in the same
    # task: the new one joins the study and exits at once if the budget is spent
    return batch_script(header, command, job=task, who=f"task {task[1:-1]}", interrupt_first=True,
                        on_signal="the worker stops, its trial is queued again, and the task is requeued",
                        replace_killed=WORKER_RESTARTS,
                        replaced="its worker was killed; starting another (its trial is continued from its "
                                 "checkpoint once its heartbeat is missed)")


def check_workers_submission(spec: SearchSpec) -> None:
    """Every check the submission makes, before anything is created or written: the scheduler
    here and its partition, each value the batch script would hold, and a SQLite study whose
    workers may run on other machines (SQLite's file locks do not hold on network file systems;
    a cluster whose every node is this machine, as a workstation's Slurm, may use it)."""
    o = spec.options
    scheduler(o.launcher).check(o)
    array_script(spec, int(o.workers), spec.runs_root.resolve() / spec.study / o.launcher, check_only=True)
    if not o.storage.startswith("sqlite"):
        return
    nodes = scheduler(o.launcher).nodes(o)
    here = socket.gethostname().split(".")[0]
    elsewhere = sorted(n for n in nodes if n.split(".")[0] != here)
    if elsewhere:
        shown = ", ".join(elsewhere[:4]) + (f" and {len(elsewhere) - 4} more" if len(elsewhere) > 4 else "")
        raise LaunchError(f"--storage: a SQLite study cannot take workers on other machines ({shown}): its file "
                          "locks do not hold on a shared file system; give --storage postgresql://USER@HOST/DB")


def submit_workers(spec: SearchSpec, study) -> dict:
    """Submit the search's workers as a job array (the study already created); returns the job
    as the study records it."""
    o = spec.options
    sched = scheduler(o.launcher)
    sched.check(o)
    workers = int(o.workers)
    log_dir = spec.runs_root.resolve() / spec.study / o.launcher
    log_dir.mkdir(parents=True, exist_ok=True)
    script = log_dir / "search-workers.sh"
    script.write_text(array_script(spec, workers, log_dir))
    script.chmod(0o755)
    job = sched.submit(script, o)
    record = {"launcher": o.launcher, "job": job, "workers": workers, "script": str(script), "log_dir": str(log_dir)}
    study.set_user_attr(StudyKey.WORKERS_JOB, record)
    log.info("study %s: %d workers submitted as %s job array %s (logs in %s)", spec.study, workers, o.launcher,
             job, log_dir)
    return record
