"""Promoted runs that a scheduler trains: submitted once, watched from the study database, and
collected into the study by whichever command next reads it (`tianfeng runs`, `status`,
`report`). The run record says `submitted` while the job lives; its job row holds the
scheduler's own state (pending with the reason, running, how it ended)."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tianfeng.core.errors import ConfigError, LaunchError
from tianfeng.core.states import JOB_LIVE, JobStatus
from tianfeng.launch.launchers import scheduler
from tianfeng.launch.ray_jobs import jobs_address
from tianfeng.launch.scheduler import JobState
from tianfeng.storage.runs import RunRecordStatus, RunStore

log = logging.getLogger("tianfeng.promote")

CANCEL_WAIT_S = 60  # how long a cancel waits for the scheduler to say the job ended
# how a job that ended without the run's result leaves the run record
_ENDED_WITHOUT_RESULT = {JobStatus.CANCELLED: RunRecordStatus.INTERRUPTED, JobStatus.PREEMPTED: RunRecordStatus.INTERRUPTED}


def submit_run(launch: Any, run_dir: Path, store: RunStore, run_id: int) -> dict:
    """Submit the run's batch script, unless a job of the run is still alive; returns the job's
    state. Nothing is recorded as submitted unless the scheduler gave a job id."""
    live = live_job(store, run_id)
    if live is not None:
        job, state = live
        log.info("run %d is job %s of %s (%s): not submitted again", run_id, job["job_id"], job["launcher"],
                 state.state)
        return _answer(job["launcher"], job["job_id"], state, run_dir)
    sched = scheduler(launch.launcher, launch.options.jobs_address)
    try:
        job_id = sched.submit(run_dir / "launch" / sched.script, launch.options)
    except BaseException:
        store.update(run_id, status=RunRecordStatus.PLANNED)  # the plan is written; nothing was submitted
        raise
    address = jobs_address(launch.options) if launch.launcher == "ray" else None
    store.record_job(run_id, launcher=launch.launcher, job_id=job_id, state=JobStatus.PENDING, address=address)
    store.update(run_id, status=RunRecordStatus.SUBMITTED)
    print(f"tianfeng: submitted run {run_id} as {sched.name} job {job_id}; follow it with `tianfeng runs` "
          f"(the result enters the study when the job ends)", file=sys.stderr)
    return _answer(launch.launcher, job_id, JobState(JobStatus.PENDING, "submitted", None), run_dir)


def cancel_job(store: RunStore, run_id: int) -> dict:
    """Cancel the scheduler job of submitted run `run_id`; the run is then collected as any
    ended job is (interrupted, or completed if it finished first) and resumes from its last
    checkpoint when the trial is promoted again. Returns the job as it was."""
    runs = {r["id"]: r for r in store.runs()}
    if run_id not in runs:
        raise ConfigError("--cancel", "", f"no run {run_id} in this database (tianfeng runs lists them)")
    job = store.jobs().get(run_id)
    if job is None or runs[run_id]["status"] != RunRecordStatus.SUBMITTED:
        raise ConfigError("--cancel", "", f"run {run_id} is {runs[run_id]['status']}: only a submitted run's job "
                                          "can be cancelled")
    sched = scheduler(job["launcher"], job["address"])
    sched.cancel(job["job_id"])
    deadline = time.monotonic() + CANCEL_WAIT_S  # the scheduler ends the job's processes first
    while not sched.state(job["job_id"]).ended and time.monotonic() < deadline:
        time.sleep(0.5)
    log.info("run %d: %s job %s cancelled", run_id, job["launcher"], job["job_id"])
    return job


def _answer(launcher: str, job_id: str, state: JobState, run_dir: Path) -> dict:
    return {"status": RunRecordStatus.SUBMITTED, "launcher": launcher, "job": job_id, "job_state": state.state,
            "launch": str(run_dir / "launch")}


def refresh_jobs(store: RunStore, collect: Callable[[dict], None], study: str | None = None) -> None:
    """Ask the scheduler about every live job (of one study, or all) and write what it says;
    a job that ended is collected (`collect(run)`) when its run left a result, else its run is
    failed or interrupted with the scheduler's reason."""
    runs = {r["id"]: r for r in store.runs(study)}
    for run_id, job in store.jobs().items():
        run = runs.get(run_id)
        if run is None or run["status"] != RunRecordStatus.SUBMITTED:
            continue
        try:
            state = scheduler(job["launcher"], job["address"]).state(job["job_id"])
        except LaunchError as exc:  # a record no scheduler wrote: said, and the other runs still listed
            log.warning("run %d: %s", run_id, exc)
            continue
        result = Path(run["run_dir"]) / "result.json"
        if state.state == JobStatus.UNKNOWN and not result.exists():
            continue  # forgotten by the controller before it finished here: nothing to say yet
        store.update_job(run_id, state=state.state, reason=state.reason, restarts=state.restarts)
        if not state.ended:
            epochs = _epochs_so_far(Path(run["run_dir"]))
            if len(epochs) != len(run["epochs"]):
                store.update(run_id, epochs=epochs)  # the live progress `tianfeng runs` shows
            continue
        if result.exists():
            collect(run)
        else:  # what the job trained before it ended stays on the record: a later promote resumes it
            store.update(run_id, status=_ENDED_WITHOUT_RESULT.get(state.state, RunRecordStatus.FAILED),
                         **_trained_so_far(Path(run["run_dir"])))


def _trained_so_far(run_dir: Path) -> dict[str, Any]:
    """The epochs and last checkpoint a job left in its run directory, as the record keeps them."""
    checkpoint = run_dir / "checkpoints" / "last.pt"
    return {"epochs": _epochs_so_far(run_dir), **({"checkpoint": str(checkpoint)} if checkpoint.exists() else {})}


def live_job(store: RunStore, run_id: int) -> tuple[dict, JobState] | None:
    """Run `run_id`'s job and its state, if the scheduler says it is still pending or running."""
    job = store.jobs().get(run_id)
    if job is None or job["state"] not in JOB_LIVE:
        return None
    state = scheduler(job["launcher"], job["address"]).state(job["job_id"])
    return None if state.ended or state.state == JobStatus.UNKNOWN else (job, state)


def _epochs_so_far(run_dir: Path) -> list[dict]:
    """The epochs the job's engine has recorded in the run directory (whole lines only: the
    engine may be writing the next one)."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    lines = path.read_text().split("\n")[:-1]  # the text after the last newline may be half a line
    return [json.loads(line) for line in lines if line.strip()]


def with_jobs(store: RunStore, runs: list[dict]) -> list[dict]:
    """The runs, each with its scheduler job (launcher, job id, state, reason, restarts, and where
    its log is) if any."""
    jobs = store.jobs()
    return [r | ({"job": {**jobs[r["id"]], "log": job_log(r["run_dir"], jobs[r["id"]])}} if r["id"] in jobs else {})
            for r in runs]


def job_log(run_dir: str, job: dict) -> str:
    """Where a job's output is: Slurm's file in the run's launch folder; Ray's through its CLI."""
    if job["launcher"] == "slurm":
        return str(Path(run_dir) / "launch" / f"slurm-{job['job_id']}.out")
    return f"ray job logs {job['job_id']}"
