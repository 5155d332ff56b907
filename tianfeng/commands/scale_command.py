"""`tianfeng scale`: how far can the batch grow before accuracy drops, and with which recipe?"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from tianfeng.commands.flags import options_from_flags
from tianfeng.scaling.options import ScaleOptions
from tianfeng.trainers.config import ConfigError

_BUDGET = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|trials?|epochs?)$")
BUDGET_FORMS = "a time (600s, 10m, 1h), a trial count (12trials) or training epochs (72epochs)"


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


def run_scale_command(args) -> int:
    budget = parse_budget(args.budget_per_batch)
    options = options_from_flags(args, ScaleOptions, trials_per_batch=budget["trials"], timeout_s_per_batch=budget["timeout_s"],
                                 epochs_per_batch=budget["epochs"])

    from tianfeng import api
    from tianfeng.scaling.table import print_curve

    plan, steps, space = api.plan_scale(args.space, options=options)
    try:
        points = api.run_scale_plan(plan, steps, resume=args.resume, mlflow=args.mlflow, output=args.output)
    except KeyboardInterrupt:
        print(f"tianfeng: interrupted; finished trials and batch sizes are saved in {args.storage}. "
              f"Continue with the same command and --resume", file=sys.stderr)
        return 130
    report = api.scale_report(plan.name, storage=args.storage, output=args.output)
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


def add_scale_arguments(parser) -> None:
    parser.add_argument("--space", type=Path, required=True, help="search-space YAML, e.g. search_spaces/large_batch.yaml")
