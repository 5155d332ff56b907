"""A search's plan: every setting a worker process needs (plain values that cross a process
boundary), and the space it searches with the plan's changes applied."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import optuna

from tianfeng.defaults import FAILURE_LIMIT, ObjectiveMode
from tianfeng.hpo.space.read import SearchSpace, load_space
from tianfeng.trainers.config import ConfigError
from tianfeng.trainers.names import STUDY_MAX_LENGTH, check_name

log = logging.getLogger("tianfeng.search")


UNLIMITED_TRIALS = 10**6  # a plan's `trials` when only a time or epoch budget bounds it


@dataclass(frozen=True)
class SearchPlan:
    """Everything a worker process needs; plain values, so it crosses a process boundary."""
    space_path: str
    data: str | None
    storage: str
    study: str
    sampler: str
    pruner: str
    seed: int
    trials: int
    timeout_s: float | None
    runs_root: str
    rung: str
    heartbeat_s: int = 10
    grace_s: int = 60
    verbose: bool = False
    # set by `tianfeng scale`: every run at this global batch, extra `set:` entries (key ->
    # expression), whether to enqueue the space's priors, named parameter sets to enqueue
    # first (warm start), and extra study attributes
    batch_size: int | None = None
    set_overrides: dict[str, str] = field(default_factory=dict)
    priors: bool = True
    warm_start: tuple[tuple[str, dict[str, Any]], ...] = ()
    copied_trials: tuple[optuna.trial.FrozenTrial, ...] = ()  # finished elsewhere, added to a new study
    study_attrs: dict[str, Any] = field(default_factory=dict)
    epoch_budget: int | None = None  # training epochs summed over trials (pruned ones count what they ran)
    failure_limit: int = FAILURE_LIMIT  # this many trials in a row failing with one error stop the search
    gpus: int | None = None  # the cluster's size, replacing the space's cluster section
    gpus_per_node: int | None = None
    objective: str | None = None  # objective mode, replacing the space's
    target: float | None = None  # time-to-target's target, replacing the space's
    min_accuracy: float | None = None  # pareto's accuracy floor, replacing the space's
    pause_file: str | None = None  # while this file exists the worker starts no trial (a promoted run has the cores)

    def __post_init__(self) -> None:
        check_name(self.study, "--study", "", max_length=STUDY_MAX_LENGTH)  # runs/<study>/trial-N


def plan_space(plan: SearchPlan) -> SearchSpace:
    """The space a plan searches: the file's, pinned and adjusted as the plan says."""
    space = load_space(plan.space_path, data=plan.data, gpus=plan.gpus, gpus_per_node=plan.gpus_per_node)
    space = with_objective(space, plan.objective, plan.target, plan.min_accuracy)
    if plan.batch_size is None and not plan.set_overrides and plan.priors:
        return space
    from tianfeng.hpo.space.pinned import at_batch

    return at_batch(space, plan.batch_size, assignments=plan.set_overrides, priors=plan.priors)


def with_objective(space: SearchSpace, mode: str | None, target: float | None,
                   min_accuracy: float | None = None) -> SearchSpace:
    """`--objective`, `--target` and `--min-accuracy` replace the space's objective mode, target
    and accuracy floor."""
    import dataclasses

    if mode is None and target is None and min_accuracy is None:
        return space
    objective = dataclasses.replace(
        space.objective, mode=ObjectiveMode(mode) if mode else space.objective.mode,
        target=space.objective.target if target is None else target,
        min_accuracy=space.objective.min_accuracy if min_accuracy is None else min_accuracy)
    if objective.mode == ObjectiveMode.TIME_TO_TARGET and objective.target is None:
        raise ConfigError("--target", "", f"is required with --objective time-to-target (the {objective.metric} "
                          "the search rung must reach), unless the space's objective gives one")
    return dataclasses.replace(space, objective=objective)


def rung_epochs(space: SearchSpace, rung: str) -> int:
    from tianfeng.hpo.space.materialize import max_rung_epochs

    return max_rung_epochs(space, rung)
