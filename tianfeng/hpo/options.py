"""The options of a search, in one typed object: built once (by `tianfeng search` from its flags,
by `tianfeng.search` from keyword arguments), checked once, passed down unchanged."""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from tianfeng.core.errors import ConfigError
from tianfeng.defaults import (
    DEFAULT_STORAGE,
    DEFAULT_TRIALS,
    FAILURE_LIMIT,
    GRACE_S,
    HEARTBEAT_S,
    LEADER_AFTER,
    OBJECTIVE_MODES,
    PROMOTION_MODES,
    PRUNER_NAMES,
    SAMPLER_NAMES,
    STORAGE_HELP,
)
from tianfeng.launch.job_options import SchedulerOptions
from tianfeng.options import SCHEDULER_FLAGS, option, with_changes

BACKENDS = ("optuna", "ray")


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h)?$")


def parse_duration(text: str | None) -> float | None:
    """`90`, `90s`, `10m`, `1.5h` -> seconds."""
    if text is None:
        return None
    match = _DURATION.match(text.strip())
    if not match:
        raise ConfigError("--timeout", "", f"must look like 90s, 10m or 1h; got {text!r}")
    return float(match.group(1)) * {"s": 1, "m": 60, "h": 3600, None: 1}[match.group(2)]


@dataclass(frozen=True)
class SearchOptions(SchedulerOptions):
    """What `tianfeng search` takes besides the space: each field with `option(...)` is the flag
    of the same name (`ray_address` is `--address`, `timeout_s` is `--timeout`), generated from
    it; `progress` is the Python API's alone. With `launcher` slurm the workers are a job array
    of `workers` tasks (`SchedulerOptions` has the job's flags)."""
    FLAG_GROUPS: ClassVar[dict[str, tuple[str, ...]]] = {
        "what to search": ("data", "study", "objective", "min_accuracy", "target", "fidelity", "sampler", "pruner",
                           "trials", "timeout_s", "promote", "seed", "resume", "dry_run"),
        "where trials run": ("workers", "backend", "ray_address", "cpus_per_trial", "gpus_per_trial",
                             "trial_memory_gib", "runs_dir", "failure_limit", "grace_s", "verbose"),
        "the target cluster (what full runs are priced on)": ("gpus", "gpus_per_node", "profile"),
        "storage and tracking": ("storage", "mlflow", "wandb"),
        "scheduler (with --launcher slurm or ray)": (*SCHEDULER_FLAGS, "array_throttle"),
    }
    mlflow: str | None = option(None, "also log every trial (parameters, per-epoch metrics, final score) as an "
                                "MLflow run in an experiment named after the study, e.g. sqlite:///mlflow.db",
                                metavar="URI")
    wandb: str | None = option(None, "also log every trial as a W&B run in this project, grouped by study "
                               "(WANDB_MODE=offline keeps them on disk for wandb sync)", metavar="PROJECT")
    data: str | None = option(None, "replace the space's data source (digits, synthetic, imagefolder:DIR)")
    study: str | None = option(None, "study name (default: the space's name)")
    storage: str = option(DEFAULT_STORAGE, STORAGE_HELP, show_default=False)
    sampler: str = option("tpe", "how recipes are sampled (Optuna's samplers)", choices=SAMPLER_NAMES)
    pruner: str = option("asha", "how losers are stopped early (pareto and time-to-target use a peer rule)",
                         choices=PRUNER_NAMES)
    trials: int = option(DEFAULT_TRIALS, "the study's trial budget, counting trials already done")
    timeout_s: float | None = option(None, "stop starting trials after this long: 90s, 10m, 1h", name="--timeout",
                                     from_text=parse_duration)
    workers: int | str = option("auto", "worker processes sharing the study; auto: one per GPU, or without GPUs one "
                                "per CPU core (up to 8) with the cores shared out; 1 runs the trials one at a time, "
                                "in a reproducible order; with --launcher slurm, the job array's tasks")
    array_throttle: int | None = option(None, "with --launcher slurm: at most N of the job array's tasks run at "
                                        "once (sbatch --array=0-W%%N)", metavar="N")
    backend: str = option("optuna", "optuna: local worker processes; ray: Ray Tune places the trials (local or a "
                          "cluster) and prunes with its own ASHA; both record in the study", choices=BACKENDS)
    ray_address: str | None = option(None, "with --backend ray: auto or HOST:PORT of a running Ray cluster "
                                     "(default: start one here)", name="--address")
    cpus_per_trial: float | None = option(None, "with --backend ray (default 1), or --launcher slurm: each "
                                          "worker's CPUs")
    gpus_per_trial: float | None = option(None, "GPUs each trial trains on: with the optuna backend (here or "
                                          "--launcher slurm) that many DDP ranks of one node, its batch split over "
                                          "them and BatchNorm still per target GPU (on a machine without GPUs, CPU "
                                          "ranks); with --backend ray, the trial's share (default 1 on a cluster "
                                          "with GPUs, else 0)")
    trial_memory_gib: float | None = option(None, "memory of the device that trains each trial: a micro-batch "
                                            "beyond it runs in parts, BatchNorm still per target GPU, and a trial "
                                            "whose one emulated GPU's micro-batch does not fit fails saying what it "
                                            "needs (default: the CUDA device's own; none on a CPU)", metavar="GIB")
    fidelity: str | None = option(None, "the rung trials run at (default: the space's search_fidelity). Replayed on "
                                  "108 recorded cifar5-dev recipes of large_batch.yaml (2026-12-07), the default search "
                                  "reached their top-5% score in a median 801 s at lowres_half (its search rung), "
                                  "1053 s at proxy, 1869 s over the whole run's epochs (target, as on LCBench; "
                                  "within the 1440 s budget in 73 of 300 seeds): cheap rungs pay where they rank "
                                  "recipes as their whole runs do")
    objective: str | None = option(None, "accuracy: the metric alone; pareto: the metric against the full run's "
                                   "predicted wall time on the cluster; time-to-target: least predicted time whose "
                                   "metric reaches --target (default: the space's objective.mode, else accuracy)",
                                   choices=OBJECTIVE_MODES)
    min_accuracy: float | None = option(None, "with --objective pareto: trials below this accuracy are infeasible, "
                                        "never on the front (default: the space's objective.min_accuracy, else "
                                        "chance plus as much again, at least 10 points, at most halfway from chance "
                                        "to 100: 40 for 5 classes, 20 for 10, 10.1 for 1000); the front also asks "
                                        "for halfway from chance to the study's best", metavar="PERCENT")
    target: float | None = option(None, "with --objective time-to-target: the metric the search rung must reach")
    gpus: int | None = option(None, "GPUs of the cluster the full run is for (replaces the space's cluster.gpus)")
    gpus_per_node: int | None = option(None, "GPUs per node of that cluster")
    profile: str | None = option(None, "a throughput profile `tianfeng calibrate --throughput` or `--from-run` wrote: "
                                 "predict full runs with its measured figures (cluster.device measured)",
                                 metavar="FILE")
    promote: str = option("auto", f"leader: once {LEADER_AFTER} trials are complete, train each new leader at full "
                          "fidelity (as tianfeng promote does) while the other workers wait, so the search ends "
                          "with its best trial's full run; balanced: the same, but a leader's full run waits until "
                          "the search has run proxies at least as long as its full runs will have trained, so they "
                          "take at most half its time; none: proxy trials only; auto: leader where the objective "
                          "picks one best trial (accuracy, time-to-target) and the workers run here, else none (the "
                          "first log line says which and why). Replayed on 108 recorded cifar5-dev recipes "
                          "(2026-12-07), a lowres_half search reached their top-5% score in a median 801 s with "
                          "leader, 778 s with balanced, 985 s with none: promotion pays where proxies rank "
                          "well; leader and balanced are level seed by seed, and leader has a whole run's score "
                          "earlier in the budget", choices=PROMOTION_MODES)
    resume: bool = option(False, "continue an existing study")
    dry_run: bool = option(False, "check the space and every option against it, print what the search would run "
                           "(with --launcher slurm, the job array's batch script) and start, create or submit nothing")
    seed: int = option(0, "the sampler's seed (with --workers 1 a search repeats exactly)")
    runs_dir: str | Path = option("runs", "where trial run directories go")
    verbose: bool = option(False, "also log every epoch of every trial")
    failure_limit: int = option(FAILURE_LIMIT, "stop the search when this many trials in a row fail with the "
                                "same error")
    heartbeat_s: int = option(HEARTBEAT_S, "seconds between a running trial's heartbeats", hidden=True)
    grace_s: int = option(GRACE_S, "seconds without a heartbeat before a trial counts as dead and is retried")
    progress: bool = True  # the live progress bar, on a terminal

    def changed(self, **changes: Any) -> SearchOptions:
        """A copy with `changes`; an unknown name is one line with the closest known one."""
        return with_changes(self, "search", changes)

    def checked(self) -> SearchOptions:
        """These options, or the first mistake as one line naming the flag. What needs the space
        (a rung it has, a target its mode needs) is checked when the space is read."""
        from tianfeng.hpo.workers import parse_workers

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
        if self.backend == "ray" and self.promote not in ("none", "auto"):
            raise fail("--promote", "needs --backend optuna (its workers pause while a promoted run trains)")
        self.check()
        if self.launcher == "ray":
            raise fail("--launcher", "ray is for promote; a search on a Ray cluster is --backend ray --address "
                                     "HOST:PORT (Ray Tune runs its trials there)")
        if self.launcher != "local":
            if self.backend != "optuna" or self.promote not in ("none", "auto"):
                raise fail("--launcher", f"{self.launcher} submits optuna workers: not with --backend ray or "
                                         "--promote leader")
            if workers == "auto":
                raise fail("--workers", f"with --launcher {self.launcher}: give the job array's tasks, e.g. --workers 4")
        if self.array_throttle is not None:
            if self.launcher != "slurm":
                raise fail("--array-throttle", "goes with --launcher slurm")
            if self.array_throttle < 1:
                raise fail("--array-throttle", f"must be >= 1, got {self.array_throttle}")
        if self.backend == "optuna" and self.ray_address is not None:
            raise fail("--backend", "--address needs --backend ray")
        if self.backend == "optuna" and self.launcher == "local" and self.cpus_per_trial is not None:
            raise fail("--backend", "--cpus-per-trial needs --backend ray or --launcher slurm")
        if self.backend == "optuna" and self.gpus_per_trial is not None and not (
                float(self.gpus_per_trial).is_integer() and self.gpus_per_trial >= 1):
            raise fail("--gpus-per-trial", f"with the optuna backend: the DDP ranks of each trial, an integer >= 1; "
                                           f"got {self.gpus_per_trial:g} (a share of a GPU is --backend ray's)")
        if self.cpus_per_trial is not None and not (math.isfinite(self.cpus_per_trial) and self.cpus_per_trial > 0):
            raise fail("--cpus-per-trial", f"must be > 0, got {self.cpus_per_trial:g}")
        if self.gpus_per_trial is not None and not (math.isfinite(self.gpus_per_trial) and self.gpus_per_trial >= 0):
            raise fail("--gpus-per-trial", f"must be >= 0, got {self.gpus_per_trial:g}")
        if self.trial_memory_gib is not None and not (math.isfinite(self.trial_memory_gib) and self.trial_memory_gib > 0):
            raise fail("--trial-memory-gib", f"must be > 0 GiB, got {self.trial_memory_gib:g}")
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
