"""The words for where a run, a trial or a scheduler's job stands, each said once here: the
engine's run statuses, the promoted runs' and trials' statuses and the jobs' states are each a
subset of `State`, read without importing torch."""

from enum import StrEnum


class State(StrEnum):
    """Every word; the enums below each take the ones that apply to what they describe."""
    COMPLETED = "completed"
    DIVERGED = "diverged"  # a non-finite loss on any rank, or collapsed to a uniform guess (collapse.py)
    PRUNED = "pruned"  # stopped by its epoch callback (a pruner)
    STOPPED = "stopped"  # max_steps or engine.stop_after_epochs reached, or stopped by the callback
    FAILED = "failed"  # an error, or a job that ended badly
    INTERRUPTED = "interrupted"  # cut by Ctrl-C, killed or preempted: it continues from its checkpoint
    RUNNING = "running"
    WAITING = "waiting"  # a trial queued in the study
    PLANNED = "planned"  # a launch plan for GPU nodes, collected when promoted again
    SUBMITTED = "submitted"  # a scheduler's job trains it
    PENDING = "pending"  # a job the scheduler has not started
    CANCELLED = "cancelled"
    PREEMPTED = "preempted"
    UNKNOWN = "unknown"  # a job the scheduler no longer knows, or cannot be asked about


class RunStatus(StrEnum):
    """How a run of the engine ended."""
    COMPLETED = State.COMPLETED.value
    DIVERGED = State.DIVERGED.value
    PRUNED = State.PRUNED.value
    STOPPED = State.STOPPED.value


class JobStatus(StrEnum):
    """Where a scheduler's job stands: pending, running, or how it ended."""
    PENDING = State.PENDING.value
    RUNNING = State.RUNNING.value
    COMPLETED = State.COMPLETED.value
    FAILED = State.FAILED.value
    CANCELLED = State.CANCELLED.value
    PREEMPTED = State.PREEMPTED.value
    UNKNOWN = State.UNKNOWN.value


JOB_LIVE = (JobStatus.PENDING, JobStatus.RUNNING)  # a job not ended (nor lost)
