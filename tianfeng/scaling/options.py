"""The options of a scale study, in one typed object: built once (by `tianfeng scale` from its
flags, by `tianfeng.scale` from keyword arguments), checked once, passed down unchanged."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tianfeng.core.errors import ConfigError
from tianfeng.defaults import DEFAULT_STORAGE, PRUNER_NAMES, SAMPLER_NAMES, STORAGE_HELP
from tianfeng.launch.job_options import SchedulerOptions
from tianfeng.options import option, with_changes


def parse_batch_sizes(text: str) -> tuple[int, ...]:
    sizes = []
    for part in text.split(","):
        part = part.strip()
        if not part.lstrip("-").isdigit():
            raise ConfigError("--batch-sizes", "", f"must be comma-separated integers such as 64,256,1024; got {part!r}")
        sizes.append(int(part))
    if any(b < 1 for b in sizes):
        raise ConfigError("--batch-sizes", "", f"must all be positive; got {text}")
    if len(sizes) < 2:
        raise ConfigError("--batch-sizes", "", f"a curve needs at least two batch sizes; got {text}")
    if any(later <= earlier for earlier, later in zip(sizes, sizes[1:], strict=False)):
        raise ConfigError("--batch-sizes", "", f"must be strictly increasing; got {text}")
    return tuple(sizes)


@dataclass(frozen=True)
class ScaleOptions(SchedulerOptions):
    """What `tianfeng scale` takes besides the space; each field is the flag of the same name,
    generated from it (the three budgets are `--budget-per-batch` as trials, seconds or epochs:
    give one). With `--launcher slurm` each batch size's search is a job array of `--workers`
    tasks, waited for before the next batch size (which warm-starts from it)."""

    launcher: str = option("local", "local: search here; slurm: each batch size's search as a job array of --workers "
                           "tasks (requeueable, signalled before its time limit), waited for before the next "
                           "batch size", choices=("local", "slurm"))
    jobs_address: str | None = option(None, "Ray's Jobs API: not used by scale", hidden=True)
    batch_sizes: tuple[int, ...] = option((), "increasing global batch sizes, e.g. 64,256,1024,2048",
                                          from_text=parse_batch_sizes, required=True)
    trials_per_batch: int | None = None  # the three budgets: `--budget-per-batch` gives one
    timeout_s_per_batch: float | None = None
    epochs_per_batch: int | None = None
    data: str | None = option(None, "replace the space's data source (digits, imagefolder:DIR)")
    name: str | None = option(None, "name of the scale study; its searches are NAME-b<batch> (default <space "
                              "name>-scale)")
    storage: str = option(DEFAULT_STORAGE, STORAGE_HELP, show_default=False)
    sampler: str = option("tpe", "sampler of each batch size's search", choices=SAMPLER_NAMES)
    pruner: str = option("asha", "pruner of each batch size's search", choices=PRUNER_NAMES)
    fidelity: str | None = option(None, "the rung trials run at (default: the space's search_fidelity)")
    workers: int = option(1, "local worker processes per search")
    warm_start: int = option(3, "best trials of the previous batch size enqueued first")
    tolerance: float = option(1.0, "how far below the smallest batch's value, in points, still counts as kept")
    seed: int = option(0, "the samplers' seed")
    runs_dir: str | Path = option("runs", "where trial run directories go")
    verbose: bool = option(False, "also log every epoch of every trial")

    def changed(self, **changes: Any) -> ScaleOptions:
        """A copy with `changes`; an unknown name is one line with the closest known one."""
        return with_changes(self, "scale", changes)

    def checked(self) -> ScaleOptions:
        """These options, or the first mistake as one line naming the flag. What needs the space
        (its rungs, the training set's size) is checked when the space is read."""
        budgets = [b for b in (self.trials_per_batch, self.timeout_s_per_batch, self.epochs_per_batch)
                   if b is not None]
        if len(budgets) != 1 or not budgets[0] > 0:
            raise ConfigError("--budget-per-batch", "", "give one budget per batch size (> 0): trials, seconds or epochs")
        sizes = list(self.batch_sizes)
        if len(sizes) < 2 or any(b < 1 for b in sizes) or sizes != sorted(set(sizes)):
            raise ConfigError("--batch-sizes", "", f"must be at least two increasing positive sizes; got {sizes}")
        for flag, value, names in (("--sampler", self.sampler, SAMPLER_NAMES), ("--pruner", self.pruner, PRUNER_NAMES)):
            if value not in names:
                raise ConfigError(flag, "", f"must be one of {', '.join(names)}; got {value!r}")
        if self.workers < 1:
            raise ConfigError("--workers", "", f"must be >= 1, got {self.workers}")
        self.check()
        if self.launcher == "ray":
            raise ConfigError("--launcher", "", "scale submits its searches' workers to Slurm (--launcher slurm); "
                                                "Ray is for promote")
        if self.warm_start < 0:
            raise ConfigError("--warm-start", "", f"must be >= 0, got {self.warm_start}")
        if not (math.isfinite(self.tolerance) and self.tolerance >= 0):
            raise ConfigError("--tolerance", "", f"must be a finite number >= 0 (points of the metric), got {self.tolerance}")
        return self
