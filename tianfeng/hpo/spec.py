"""A search's spec: the options as given, what was resolved from them and the space once (the
study's name, the rung, the sampler `auto` stands for, the accuracy floor), and what `tianfeng
scale` adds; plain values, so it crosses a process boundary to the workers."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna

from tianfeng.core.errors import ConfigError
from tianfeng.core.names import STUDY_MAX_LENGTH, check_name
from tianfeng.defaults import ObjectiveMode
from tianfeng.hpo.judge.front import chance_level, default_floor
from tianfeng.hpo.options import SearchOptions
from tianfeng.hpo.promotion_rule import resolve_promotion
from tianfeng.hpo.space.materialize import max_rung_epochs
from tianfeng.hpo.space.pinned import at_batch
from tianfeng.hpo.space.read import SearchSpace, load_space
from tianfeng.storage.ownership import check_report_of, default_report_path
from tianfeng.storage.study_attrs import StudyKey

log = logging.getLogger("tianfeng.search")


UNLIMITED_TRIALS = 10**6  # a spec's trial budget when only a time or epoch budget bounds it


@dataclass(frozen=True)
class SearchSpec:
    """Everything a worker process needs."""
    space_path: str
    options: SearchOptions
    study: str  # the option's, or the space's name
    rung: str  # the option's fidelity, or the space's search_fidelity
    sampler: str  # never `auto`: what it stands for at this rung
    floor: float | None = None  # pareto's accuracy floor: the option's, the space's, or the default
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
    promotion_rule: str = ""  # "promote MODE (why)": what --promote stood for, said in the first log line
    pause_file: str | None = None  # while this file exists the worker starts no trial (a promoted run has the cores)
    # the space as read once, its objective and floor resolved: what every worker, Ray and a scale
    # study search (pinned by `space_of`), handed on rather than read again
    space: SearchSpace | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_name(self.study, "--study", "", max_length=STUDY_MAX_LENGTH)  # runs/<study>/trial-N

    @property
    def accuracy_floor(self) -> float | None:
        """The floor the spec's trials are judged by: the resolved one, else the option's."""
        return self.options.min_accuracy if self.floor is None else self.floor

    @property
    def runs_root(self) -> Path:
        return Path(self.options.runs_dir)

    @classmethod
    def of(cls, space_path: str | Path, *, study: str, rung: str, sampler: str = "tpe",
           **changes: Any) -> SearchSpec:
        """A spec made by hand (benchmarks, studies built on searches): `changes` name the spec's
        own fields or options."""
        return cls(str(space_path), SearchOptions(), study, rung, sampler).changed(**changes)

    def changed(self, **changes: Any) -> SearchSpec:
        """A copy with `changes` to the spec's own fields or to its options."""
        own = {f.name for f in dataclasses.fields(self)}
        options = {k: v for k, v in changes.items() if k not in own}
        spec = dataclasses.replace(self, **{k: v for k, v in changes.items() if k in own})
        return dataclasses.replace(spec, options=spec.options.changed(**options)) if options else spec


def check_data(space) -> int:
    """Open the space's data source once before any trial: a missing or empty image folder is
    one error here, not a failure in every trial. Returns its number of classes."""
    from tianfeng.trainers.data.sources import open_source

    base = space.base.data
    return open_source(base.source, synthetic_images=base.synthetic_images,
                       synthetic_classes=base.synthetic_classes).num_classes


def resolve_search(space: str | Path, options: SearchOptions) -> tuple[SearchSpec, SearchSpace]:
    """The spec of a search over `space` (a file, or a shipped space's bare name) with checked
    `options`, and the space it searches, read once: the rung checked, the sampler and the
    default Pareto floor resolved, and a report path of another study refused before any trial."""
    o = options
    loaded = with_objective(load_space(space, data=o.data, gpus=o.gpus, gpus_per_node=o.gpus_per_node,
                                       profile=o.profile), o.objective, o.target, o.min_accuracy)
    study = o.study or loaded.name
    if not o.dry_run:  # a dry run touches no database; the real run checks this before its first trial
        check_report_of(o.storage, study, default_report_path(study))
    rung = o.fidelity or loaded.search_fidelity
    if rung not in loaded.fidelities:
        raise ConfigError("--fidelity", "", f"must be one of {', '.join(loaded.fidelities)}; got {rung!r}")
    if o.promote not in ("none", "auto") and loaded.objective.mode == ObjectiveMode.PARETO:
        raise ConfigError("--promote", o.promote, "needs one best trial: use it with --objective accuracy or "
                                                  "time-to-target, not pareto (promote front trials with "
                                                  "tianfeng promote --fastest-to)")
    classes = check_data(loaded)
    floor, obj, attrs = o.min_accuracy, loaded.objective, {}
    if obj.mode == ObjectiveMode.PARETO and floor is None and obj.min_accuracy is None and obj.direction == "maximize":
        floor = default_floor(obj.metric, classes)  # resolved once: every worker uses the same floor
        loaded = with_objective(loaded, None, None, floor)
        # the default floor also rises with the study's best: the front reads the chance level
        attrs = {StudyKey.CHANCE: chance_level(obj.metric, classes)} if floor is not None else {}
    promote, why = resolve_promotion(o, loaded, rung)
    spec = SearchSpec(loaded.path, o.changed(promote=promote), study, rung, o.sampler,
                      floor, study_attrs=attrs, space=loaded, promotion_rule=f"promote {promote} ({why})")
    return spec, loaded


def space_of(spec: SearchSpec) -> SearchSpace:
    """The space a spec searches, pinned and adjusted as the spec says: the one it carries, or
    (a spec made in another process from flags alone) the file's."""
    o = spec.options
    space = spec.space
    if space is None:
        space = load_space(spec.space_path, data=o.data, gpus=o.gpus, gpus_per_node=o.gpus_per_node,
                           profile=o.profile)
    space = with_objective(space, o.objective, o.target, spec.accuracy_floor)
    if spec.batch_size is None and not spec.set_overrides and spec.priors:
        return space
    return at_batch(space, spec.batch_size, assignments=spec.set_overrides, priors=spec.priors)


def with_objective(space: SearchSpace, mode: str | None, target: float | None,
                   min_accuracy: float | None = None) -> SearchSpace:
    """`--objective`, `--target` and `--min-accuracy` replace the space's objective mode, target
    and accuracy floor."""
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
    return max_rung_epochs(space, rung)
