"""What a loaded search space is: its parameters, fidelity rungs, phases template, objective,
priors and cluster, as plain records (tianfeng.hpo.space.read reads them from YAML and checks them;
tianfeng.hpo.space.materialize builds run configs from them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tianfeng.core.epoch_metrics import EpochMetrics
from tianfeng.core.run_config import RunConfig
from tianfeng.cost.cluster import ClusterSpec
from tianfeng.defaults import ObjectiveMode
from tianfeng.hpo.space.expressions import Expression

PARAMETER_TYPES = ("float", "int", "categorical", "fixed")
METRICS = tuple(f for f in EpochMetrics.__dataclass_fields__ if f not in ("epoch", "phase", "noise_scale"))
ACCURACY_METRICS = ("val_top1", "val_top5")  # percentages, with a chance level
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
# what every expression may read besides the parameters: the cluster's size and the data's
# Names every expression may read: the cluster's (min_per_gpu and max_per_gpu bound the per-GPU
# batch: cluster.min_per_gpu_batch, and what fits a GPU's memory) and the data's.
CLUSTER_CONSTANTS = ("gpus", "gpus_per_node", "min_per_gpu", "max_per_gpu")
CONSTANTS = (*CLUSTER_CONSTANTS, "train_images")


DEFAULT_MIN_STEPS = 50  # a space's `min_steps` when it gives none


@dataclass(frozen=True)
class Parameter:
    name: str
    type: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    bounds: tuple[str, str] | None = None  # low and high as written, when they are expressions
    step: float | None = None
    choices: tuple[Any, ...] = ()
    value: Any = None
    when: Expression | None = None


@dataclass(frozen=True)
class Fidelity:
    """Proxy knobs: each shrinks the base run; the target rung is the run promotion aims at."""
    name: str
    epochs: int | None = None  # total epochs; None keeps the base's
    epoch_fraction: float | None = None  # or this share of the trial's target epochs (at least 1)
    resolution_scale: float = 1.0
    data_fraction: float = 1.0
    width_scale: float = 1.0
    precision: str = "auto"


@dataclass(frozen=True)
class PhasesTemplate:
    stages: Expression
    start_resolution: Expression
    end_resolution: Expression
    batch_size: Expression
    final_stage_fraction: Expression
    scale_batch_with_resolution: Expression
    epochs: Expression | None = None  # the full run's epochs; None keeps the base's
    # explicit phases instead of the ramp: a list of [epochs, resolution, batch] (an empty list:
    # the ramp), for recipes whose batch changes by phase (fast.ai's imagenet18)
    table: Expression | None = None


@dataclass(frozen=True)
class Objective:
    metric: str = "val_top1"
    direction: str = "maximize"
    at: str = "final"  # final | best (over epochs)
    constraints: tuple[Expression, ...] = ()
    mode: ObjectiveMode = ObjectiveMode.ACCURACY
    target: float | None = None  # time-to-target: the metric the search rung must reach
    # pareto: a trial whose metric is below this is infeasible (off the front); None: the default
    # the search sets from the data's classes (`tianfeng.hpo.judge.front.default_floor`)
    min_accuracy: float | None = None

    def reached(self, value: float) -> bool:
        return value >= self.target if self.direction == "maximize" else value <= self.target


@dataclass(frozen=True)
class Prior:
    name: str
    params: dict[str, Any]


@dataclass(frozen=True)
class SearchSpace:
    path: str
    name: str
    base: RunConfig
    parameters: tuple[Parameter, ...]
    assignments: dict[str, Expression]  # config key path -> expression
    phases: PhasesTemplate | None
    fidelities: dict[str, Fidelity]
    search_fidelity: str
    objective: Objective
    priors: tuple[Prior, ...] = field(default=())
    cluster: ClusterSpec = field(default_factory=ClusterSpec)
    constants: dict[str, int] = field(default_factory=dict)  # CONSTANTS' values
    min_steps: int = DEFAULT_MIN_STEPS  # the fewest optimizer steps a proxy rung may leave a trial (0: any)

    @property
    def target(self) -> Fidelity:
        return self.fidelities["target"]


def round_resolution(value: float) -> int:
    """Resolutions snap to multiples of 4 (at least 8), the granularity strided nets need."""
    return max(8, int(4 * round(value / 4)))


def corner_value(p: Parameter, *, low: bool) -> Any:
    if p.type == "categorical":
        return p.choices[0] if low else p.choices[-1]
    return p.low if low else p.high
