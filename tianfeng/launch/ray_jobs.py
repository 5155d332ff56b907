"""Ray's Jobs API behind the launcher interface: a promoted run's entry script submitted as a Ray
job (`JobSubmissionClient.submit_job`), its state read from the job's status and message, and
`stop_job` to cancel it. The entry runs on the head node and starts the run's ranks as Ray Train
workers (tianfeng.launch.ray_train), which Ray Train restarts from the run's last checkpoint
after a worker fails (`FailureConfig`); the job itself is not retried, as Ray Jobs has no
requeue. The Jobs API address (the head's dashboard, http://HEAD:8265) is recorded with the job,
so any later command that reads the study finds the job again."""

from __future__ import annotations

import os
import secrets
import shlex
from dataclasses import dataclass
from pathlib import Path

from tianfeng.core.errors import LaunchError
from tianfeng.core.states import JobStatus
from tianfeng.launch import gate
from tianfeng.launch.job_options import SchedulerOptions
from tianfeng.launch.scheduler import JobState

# Ray's JobStatus by what it means for the run; STOPPED is a stop_job (a cancel)
_STATES = {"PENDING": JobStatus.PENDING, "RUNNING": JobStatus.RUNNING, "SUCCEEDED": JobStatus.COMPLETED,
           "STOPPED": JobStatus.CANCELLED, "FAILED": JobStatus.FAILED}


def jobs_address(options: SchedulerOptions) -> str:
    """The Jobs API address: --jobs-address, else $RAY_ADDRESS (Ray's own convention)."""
    address = options.jobs_address or os.environ.get("RAY_ADDRESS")
    if not address:
        raise LaunchError("--launcher ray: needs --jobs-address http://HEAD:8265 (the Ray head's dashboard) "
                          "or $RAY_ADDRESS")
    return address


def runtime_env(options: SchedulerOptions) -> dict | None:
    """The job's runtime_env: with --working-dir, that folder uploaded to every node (the job and
    its workers start in their node's copy, tianfeng's code folder, and import from it); else the
    user's code folder as PYTHONPATH, for a cluster that shares this machine's files."""
    if options.working_dir is not None:
        return {"working_dir": str(Path(options.working_dir).resolve())}
    env = {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}
    return {"env_vars": env} if env else None


def _first_line(text: str | None) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[0] if lines else ""


@dataclass(frozen=True)
class RayJobs:
    address: str | None = None  # the Jobs API; None: $RAY_ADDRESS
    name: str = "ray"
    script: str = "ray-entry.sh"  # the launch plan's file this scheduler runs

    def _client(self):
        from ray.job_submission import JobSubmissionClient

        address = self.address or os.environ.get("RAY_ADDRESS")
        try:
            return JobSubmissionClient(address)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise LaunchError(f"--jobs-address: cannot reach Ray's Jobs API at {address!r}: "
                              f"{_first_line(str(exc))}") from None

    def submit(self, script: Path, options: SchedulerOptions) -> str:
        """Submit `bash script` as a Ray job; returns its submission id."""
        client = RayJobs(jobs_address(options))._client()
        submission = f"tianfeng-{secrets.token_hex(6)}"
        try:
            return client.submit_job(entrypoint=f"bash {shlex.quote(str(script.resolve()))}", submission_id=submission,
                                     metadata={"tianfeng_run": script.resolve().parent.parent.name},
                                     runtime_env=runtime_env(options))
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise LaunchError(f"ray job submit: {_first_line(str(exc))}") from None

    def state(self, job: str) -> JobState:
        job = gate.job_id(self.name, job)
        try:
            info = self._client().get_job_info(job)
        except LaunchError:
            return JobState(JobStatus.UNKNOWN, "the Ray cluster cannot be reached", None)
        except RuntimeError:  # the cluster restarted and forgot it, or never had it
            return JobState(JobStatus.UNKNOWN, "the Ray cluster no longer knows the job", None)
        state = _STATES.get(str(info.status.value if hasattr(info.status, "value") else info.status), JobStatus.FAILED)
        if state == JobStatus.RUNNING:
            return JobState(JobStatus.RUNNING, "", None)
        if state == JobStatus.PENDING:
            return JobState(JobStatus.PENDING, _first_line(info.message) or "pending", None)
        code = info.driver_exit_code if info.driver_exit_code is not None else (0 if state == JobStatus.COMPLETED else None)
        return JobState(state, _first_line(info.message) or state, code)

    def cancel(self, job: str) -> None:
        try:
            self._client().stop_job(gate.job_id(self.name, job))
        except RuntimeError as exc:
            raise LaunchError(f"ray job stop: {_first_line(str(exc))}") from None

    def nodes(self, options: SchedulerOptions) -> list[str]:
        """Search workers are not submitted to Ray (the Ray backend places trials): none."""
        return []

    def check(self, options: SchedulerOptions) -> None:
        """Refuse at once, before anything is written: no address, a cluster that cannot be reached."""
        RayJobs(jobs_address(options))._client()
