"""The options of a search, in one typed object: built once (by `tianfeng search` from its flags,
by `tianfeng.search` from keyword arguments), checked once, passed down unchanged."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tianfeng.defaults import (
    DEFAULT_STORAGE,
    FAILURE_LIMIT,
    OBJECTIVE_MODES,
    PROMOTION_MODES,
    PRUNER_NAMES,
    SAMPLER_NAMES,
)
from tianfeng.options import with_changes
from tianfeng.trainers.config import ConfigError

BACKENDS = ("optuna", "ray")


@dataclass(frozen=True)
class SearchOptions:
    """What `tianfeng search` takes besides the space; each field is the flag of the same name
    (`ray_address` is `--address`, `timeout_s` is `--timeout` in seconds)."""
    data: str | None = None  # replaces the space's data source
    study: str | None = None  # default: the space's name
    storage: str = DEFAULT_STORAGE
    sampler: str = "auto"  # random on a screening rung, else tpe (registry.resolve_sampler)
    pruner: str = "asha"
    trials: int = 30  # the study's budget, counting trials already done
    timeout_s: float | None = None  # stop starting trials after this long
    workers: int | str = "auto"  # local worker processes: auto or a count
    fidelity: str | None = None  # the rung trials run at; default: the space's search_fidelity
    objective: str | None = None  # accuracy | pareto | time-to-target; default: the space's
    target: float | None = None  # time-to-target's target
    min_accuracy: float | None = None  # pareto's accuracy floor
    gpus: int | None = None  # the target cluster, replacing the space's cluster section
    gpus_per_node: int | None = None
    resume: bool = False  # continue an existing study
    seed: int = 0
    runs_dir: str | Path = "runs"
    verbose: bool = False  # every epoch of every trial in the log
    failure_limit: int = FAILURE_LIMIT  # this many trials in a row failing with one error stop it
    heartbeat_s: int = 10
    grace_s: int = 60  # seconds without a heartbeat before a trial counts as dead
    backend: str = "optuna"  # optuna: local worker processes; ray: Ray Tune places the trials
    ray_address: str | None = None  # with ray: auto or HOST:PORT of a running cluster
    cpus_per_trial: float | None = None  # with ray (default 1)
    gpus_per_trial: float | None = None  # with ray (default 1 on a cluster with GPUs, else 0)
    mlflow: str | None = None  # a tracking URI: every trial also logged as an MLflow run
    promote: str = "none"  # leader: each new proxy leader trained at full fidelity while the search waits
    progress: bool = True  # the live progress bar, on a terminal

    def changed(self, **changes: Any) -> SearchOptions:
        """A copy with `changes`; an unknown name is one line with the closest known one."""
        return with_changes(self, "search", changes)

    def checked(self) -> SearchOptions:
        """These options, or the first mistake as one line naming the flag. What needs the space
        (a rung it has, a target its mode needs) is checked when the space is read."""
        from tianfeng.hpo.run.workers import parse_workers

        def fail(flag: str, what: str) -> ConfigError:
            return ConfigError(flag, "", what)

        for flag, value, names in (("--sampler", self.sampler, SAMPLER_NAMES), ("--pruner", self.pruner, PRUNER_NAMES),
                                   ("--backend", self.backend, BACKENDS), ("--promote", self.promote, PROMOTION_MODES)):
            if value not in names:
                raise fail(flag, f"must be one of {', '.join(names)}; got {value!r}")
        if self.objective is not None and self.objective not in OBJECTIVE_MODES:
            raise fail("--objective", f"must be one of {', '.join(OBJECTIVE_MODES)}; got {self.objective!r}")
        if self.trials < 1:
            raise fail("--trials", f"must be >= 1, got {self.trials}")
        if self.timeout_s is not None and not (math.isfinite(self.timeout_s) and self.timeout_s > 0):
            raise fail("--timeout", f"must be a positive duration, got {self.timeout_s} s")
        workers = parse_workers(self.workers)
        if self.failure_limit < 1:
            raise fail("--failure-limit", f"must be >= 1, got {self.failure_limit}")
        for flag, value in (("--heartbeat-s", self.heartbeat_s), ("--grace-s", self.grace_s)):
            if value < 1:
                raise fail(flag, f"must be >= 1 second, got {value}")
        if self.grace_s <= self.heartbeat_s:
            raise fail("--grace-s", f"must be longer than the heartbeat interval ({self.heartbeat_s} s), "
                                    f"got {self.grace_s}")
        if self.backend == "ray" and workers != "auto":
            raise fail("--workers", "is for the optuna backend; with --backend ray, Ray runs as many trials at once "
                                    "as --cpus-per-trial and --gpus-per-trial allow")
        if self.backend == "ray" and self.promote != "none":
            raise fail("--promote", "needs --backend optuna (its workers pause while a promoted run trains)")
        if self.backend == "optuna" and any(v is not None for v in (self.ray_address, self.cpus_per_trial,
                                                                     self.gpus_per_trial)):
            raise fail("--backend", "--address, --cpus-per-trial and --gpus-per-trial need --backend ray")
        if self.cpus_per_trial is not None and not (math.isfinite(self.cpus_per_trial) and self.cpus_per_trial > 0):
            raise fail("--cpus-per-trial", f"must be > 0, got {self.cpus_per_trial:g}")
        if self.gpus_per_trial is not None and not (math.isfinite(self.gpus_per_trial) and self.gpus_per_trial >= 0):
            raise fail("--gpus-per-trial", f"must be >= 0, got {self.gpus_per_trial:g}")
        if self.target is not None and not math.isfinite(self.target):
            raise fail("--target", f"must be a finite number, got {self.target}")
        if self.min_accuracy is not None and not (math.isfinite(self.min_accuracy) and 0 <= self.min_accuracy < 100):
            raise fail("--min-accuracy", f"must be a percentage in [0, 100), got {self.min_accuracy}")
        return dataclasses.replace(self, workers=workers)


class SearchInterrupted(KeyboardInterrupt):
    """Ctrl-C during a search, after its cut trials were queued again. `study` is None when the
    interrupt came before the study's name was known; `requeued` is None when the study was
    never created, else the numbers of the trials that `--resume` continues."""

    def __init__(self, study: str | None, storage: str, requeued: list[int] | None) -> None:
        super().__init__(study)
        self.study, self.storage, self.requeued = study, storage, requeued
