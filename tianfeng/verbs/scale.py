"""`tianfeng scale`: how far can the batch grow before accuracy drops, and with which recipe? A
search per batch size, from the API functions to what the command prints."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tianfeng.core.errors import ConfigError
from tianfeng.defaults import DEFAULT_STORAGE
from tianfeng.options import option
from tianfeng.scaling.options import ScaleOptions
from tianfeng.verbs import Verb
from tianfeng.verbs._flags import SpaceFlag, options_from_flags

_BUDGET = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|trials?|epochs?)$")
BUDGET_FORMS = "a time (600s, 10m, 1h), a trial count (12trials) or training epochs (72epochs)"


@dataclass(frozen=True)
class ScaleCommandOptions(ScaleOptions):
    """The API's options, and what the command does around them: the budget in words, tracking,
    resuming and where the report goes."""
    mlflow: str | None = option(None, "also log each batch size's trials as MLflow runs (an experiment per study)",
                                metavar="URI")
    budget_per_batch: str = option("10trials", f"search budget of each batch size: {BUDGET_FORMS}; every trial "
                                   "trains the same epochs at every batch size")
    resume: bool = option(False, "continue an interrupted scale study")
    output: Path | None = option(None, "report path (default reports/<name>.html)", short="-o")


def plan_scale(space: str | Path, batch_sizes: Sequence[int] | None = None, options: ScaleOptions | None = None,
               **changes: Any):
    """The checked plan of a scale study: (ScalePlan, steps per epoch by batch size, the space).
    `options` (a `ScaleOptions`) holds what `tianfeng scale` takes as flags; `batch_sizes` and
    keyword arguments change single options."""
    from tianfeng.hpo.space.read import load_space
    from tianfeng.hpo.space.shipped import resolve_space
    from tianfeng.hpo.spec import UNLIMITED_TRIALS, SearchSpec, rung_epochs
    from tianfeng.scaling.sizes import training_set_size
    from tianfeng.scaling.study import ScalePlan

    if batch_sizes is not None:
        changes["batch_sizes"] = batch_sizes
    o = (options or ScaleOptions()).changed(**changes).checked()
    sizes = o.batch_sizes
    path = resolve_space(space)
    loaded = load_space(path, data=o.data)
    rung = o.fidelity or loaded.search_fidelity
    if rung not in loaded.fidelities:
        raise ConfigError("--fidelity", "", f"must be one of {', '.join(loaded.fidelities)}; got {rung!r}")
    size, described = training_set_size(loaded, rung)
    too_big = [b for b in sizes if b > size]
    if too_big:
        raise ConfigError("--batch-sizes", "", f"{too_big[0]} is larger than the training set ({size} images of "
                          f"{described})")
    trial_epochs = rung_epochs(loaded, rung)
    if o.epochs_per_batch is not None and o.epochs_per_batch < trial_epochs:
        raise ConfigError("--budget-per-batch", "", f"{o.epochs_per_batch}epochs allows no trial: one trial at rung "
                          f"{rung} trains {trial_epochs} epochs")
    study = o.name or f"{loaded.name}-scale"
    search_spec = SearchSpec.of(path, study=study, rung=rung, sampler=o.sampler, space=loaded,
                                data=o.data, storage=o.storage, pruner=o.pruner, seed=o.seed,
                                trials=o.trials_per_batch or UNLIMITED_TRIALS, timeout_s=o.timeout_s_per_batch,
                                epoch_budget=o.epochs_per_batch, runs_dir=o.runs_dir, verbose=o.verbose,
                                launcher=o.launcher, partition=o.partition, account=o.account, time=o.time,
                                scheduler_args=o.scheduler_args)
    plan = ScalePlan(search=search_spec, name=study, batch_sizes=sizes, workers=o.workers, warm_start_k=o.warm_start,
                     tolerance=o.tolerance)
    return plan, {b: size // b for b in sizes}, loaded


def scale(space: str | Path, batch_sizes: Sequence[int] | None = None, options: ScaleOptions | None = None, *,
          resume: bool = False, mlflow: str | None = None, output: str | Path | None = None, **changes: Any) -> list:
    """Best accuracy against batch size: a search per batch size, warm-started from the previous
    size's best, beside the naive linear-scaling baseline. Give one budget per batch size
    (trials_per_batch, timeout_s_per_batch or epochs_per_batch); the other options are
    `ScaleOptions`'. Returns the curve's points. As `tianfeng scale` (which also writes the
    report: `scale_report`)."""
    plan, steps, _ = plan_scale(space, batch_sizes, options, **changes)
    return run_scale_plan(plan, steps, resume=resume, mlflow=mlflow, output=output)


def run_scale_plan(plan, steps_per_epoch: dict[int, int], *, resume: bool = False, mlflow: str | None = None,
                   output: str | Path | None = None) -> list:
    """Run a scale study planned by `plan_scale`; refuses, before any trial, a report path that
    belongs to another study (`output`, default reports/<name>.html)."""
    from tianfeng.scaling.study import run_scale, search_study
    from tianfeng.storage.ownership import check_report_of, default_report_path

    storage = plan.search.options.storage
    check_report_of(storage, search_study(plan.name, plan.batch_sizes[0]),
                    Path(output) if output else default_report_path(plan.name))
    points = run_scale(plan, resume=resume, steps_per_epoch=steps_per_epoch)
    if mlflow:
        export_scale(mlflow, storage, plan.name, plan.batch_sizes)
    return points


def scale_report(name: str, *, storage: str = DEFAULT_STORAGE, output: str | Path | None = None) -> Path:
    """Write a scale study's HTML report (default reports/<name>.html) and return its path."""
    from tianfeng.reporting.scale_study import build_scale_report

    return build_scale_report(storage, name, Path(output) if output else None)


def export_scale(uri: str, storage: str, name: str, batch_sizes: Sequence[int]) -> None:
    """Each batch size's study of a scale run as its own MLflow experiment."""
    import optuna

    from tianfeng.export.mlflow import export_study
    from tianfeng.scaling.study import search_study

    names = set(optuna.get_all_study_names(storage))
    for batch in batch_sizes:
        if search_study(name, batch) in names:
            export_study(uri, optuna.load_study(study_name=search_study(name, batch), storage=storage), storage)


def parse_budget(text: str) -> dict[str, float | int | None]:
    """-> {"trials", "timeout_s", "epochs"}: exactly one of them set."""
    match = _BUDGET.match(text.strip())
    if not match:
        raise ConfigError("--budget-per-batch", "", f"must be {BUDGET_FORMS}; got {text!r}")
    amount, unit = float(match.group(1)), match.group(2)
    if amount <= 0:
        raise ConfigError("--budget-per-batch", "", f"allows no trial: {text!r}; it must be > 0")
    if unit.startswith("trial") or unit.startswith("epoch"):
        if not amount.is_integer():
            raise ConfigError("--budget-per-batch", "", f"a count of {unit} must be whole; got {text!r}")
        key = "trials" if unit.startswith("trial") else "epochs"
        return {"trials": None, "timeout_s": None, "epochs": None, key: int(amount)}
    return {"trials": None, "epochs": None, "timeout_s": amount * {"s": 1, "m": 60, "h": 3600}[unit]}


def command(args: argparse.Namespace) -> int:
    budget = parse_budget(args.budget_per_batch)
    options = options_from_flags(args, ScaleOptions, trials_per_batch=budget["trials"],
                                 timeout_s_per_batch=budget["timeout_s"], epochs_per_batch=budget["epochs"])

    from tianfeng.scaling.table import print_curve

    plan, steps, space = plan_scale(args.space, options=options)
    try:
        points = run_scale_plan(plan, steps, resume=args.resume, mlflow=args.mlflow, output=args.output)
    except KeyboardInterrupt:
        print(f"tianfeng: interrupted; finished trials and batch sizes are saved in {args.storage}. "
              f"Continue with the same command and --resume", file=sys.stderr)
        return 130
    report = scale_report(plan.name, storage=args.storage, output=args.output)
    if args.json:
        import dataclasses
        import json

        print(json.dumps({"name": plan.name, "storage": args.storage, "tolerance": plan.tolerance,
                          "metric": space.objective.metric, "points": [dataclasses.asdict(p) for p in points],
                          "report": str(report)}, indent=2, default=str))
        return 0
    print_curve(points, plan.tolerance, space.objective.metric, space.objective.direction == "maximize")
    print(f"report: {report}")
    return 0


VERB = Verb(
    "scale", "best accuracy against batch size: a search per batch size",
    "For each batch size (increasing), search the space with the batch pinned, warm-started from the previous "
    "size's best trials; run the naive baseline (the smallest batch's winner with linear LR scaling) beside it; "
    "store the curve, print it and write its HTML report.",
    command,
    (("tianfeng scale --space large_batch.yaml --batch-sizes 256,1024,4096", "a search per batch size"),
     ("tianfeng scale --space large_batch.yaml --batch-sizes 512,2048 --budget-per-batch 20 --resume",
      "go on with a scale run")),
    options=(SpaceFlag, ScaleCommandOptions), json=True, source="space", storage="creates")
