"""Following one promoted run as it trains (`tianfeng runs --follow RUN`): its job's state as
the scheduler reports it, each epoch once as the engine records it, until the run ends. One
process polls the study database (which asks the scheduler about submitted runs), so following
costs one query an interval."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from tianfeng.core.errors import ConfigError
from tianfeng.core.states import JobStatus
from tianfeng.storage.runs import RunRecordStatus

# a run is under way while it trains here or its job lives
_LIVE = (RunRecordStatus.RUNNING, RunRecordStatus.SUBMITTED)


def state_of(run: dict) -> str:
    """What the run's record and its job say: `submitted: slurm 12 pending (Resources)`."""
    job = run.get("job")
    if job is None or run["status"] != RunRecordStatus.SUBMITTED:
        return str(run["status"])
    return f"{run['status']}: {job['launcher']} {job['job_id']} {job['state']}{waiting_reason(job)}"


def waiting_reason(job: dict) -> str:
    """` (Resources)`: why a pending job waits, as the scheduler says; empty otherwise."""
    return f" ({job['reason']})" if job["state"] == JobStatus.PENDING and job["reason"] else ""


def follow(run_id: int, list_runs: Callable[[], list[dict]], interval_s: float) -> Iterator[tuple[str, dict]]:
    """("state", run) when the run's state changes, ("epoch", metrics) for each new epoch, and
    last ("ended", run) once it no longer trains. `list_runs` is `tianfeng runs`' own listing,
    which collects a submitted run whose job ended."""
    epochs_seen, last = 0, None
    while True:
        run = next((r for r in list_runs() if r["id"] == run_id), None)
        if run is None:
            raise ConfigError("--follow", "", f"no run {run_id} in this database (tianfeng runs lists them)")
        for epoch in run["epochs"][epochs_seen:]:
            yield "epoch", epoch
        epochs_seen = max(epochs_seen, len(run["epochs"]))
        if state_of(run) != last:
            last = state_of(run)
            if run["status"] in _LIVE:
                yield "state", run
        if run["status"] not in _LIVE:
            yield "ended", run
            return
        time.sleep(interval_s)
