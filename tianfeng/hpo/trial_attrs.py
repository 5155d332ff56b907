"""The attributes tianfeng keeps on each Optuna trial, every key named once here (Optuna stores
them as JSON beside the trial), and the one way a trial's status is written. Read them as
`trial.user_attrs.get(TrialKey.PREDICTED)`: a `TrialKey` is the string it names."""

from __future__ import annotations

from enum import StrEnum
from typing import Protocol

from tianfeng.core.states import RunStatus, State


class TrialStatus(StrEnum):
    """A trial's `status` user attribute: how its run ended (each of the engine's `RunStatus`
    values, the same words), or that it failed with an error or was cut short; `running` only in
    the Ray backend's reports. `of_run` turns the engine's status into this vocabulary."""
    COMPLETED = RunStatus.COMPLETED.value
    DIVERGED = RunStatus.DIVERGED.value
    PRUNED = RunStatus.PRUNED.value
    STOPPED = RunStatus.STOPPED.value
    FAILED = State.FAILED.value
    INTERRUPTED = State.INTERRUPTED.value
    RUNNING = State.RUNNING.value

    @classmethod
    def of_run(cls, status: RunStatus) -> TrialStatus:
        return cls(RunStatus(status).value)  # the engine's word, checked; a plain string too


class TrialKey(StrEnum):
    STATUS = "status"  # a TrialStatus: how the trial's run ended
    MESSAGE = "message"  # why it diverged
    ERROR = "error"  # the error a failed trial raised, one line
    VALUES = "values"  # every sampled and derived value, as the space names them
    FIDELITY = "fidelity"  # the rung it ran at
    CONFIG = "config"  # the run config it trained, as a dict
    RUN_DIR = "run_dir"
    PREDICTED = "predicted"  # the full run's predicted wall time, GPU-hours and parts (cost.walltime)
    CURVE = "curve"  # the metric at each epoch it reported
    NOISE_CURVE = "noise_curve"  # the gradient noise scale at each epoch
    RUNG_VALUES = "rung_values"  # every metric at the end of each epoch
    FINAL = "final"  # the last epoch's metrics
    SCORE = "score"  # its proxy score, whatever the objective mode
    PRIOR = "prior"  # the named prior it was enqueued as
    WARM_START = "warm_start"  # the earlier study's trial it was enqueued from (tianfeng scale)
    COPIED_FROM = "copied_from"  # the study whose finished trial it copies
    WORKER = "worker"  # the process that runs it (host:pid)
    CORES = "cores"  # the CPU threads its worker gave it
    BACKEND = "backend"  # ray when Ray Tune ran it


class _Settable(Protocol):
    def set_user_attr(self, key: str, value: object) -> None: ...


def set_status(trial: _Settable, status: TrialStatus) -> None:
    """Record how `trial` ended (an Optuna Trial, or a FrozenTrial being built)."""
    trial.set_user_attr(TrialKey.STATUS, TrialStatus(status))
