"""`tianfeng scale`: how far can the batch grow before accuracy drops, and with which recipe?"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from tianfeng.commands.flags import add_storage, options_from_flags
from tianfeng.scaling.options import ScaleOptions
from tianfeng.trainers.config import ConfigError

_BUDGET = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|trials?|epochs?)$")
BUDGET_FORMS = "a time (600s, 10m, 1h), a trial count (12trials) or training epochs (72epochs)"


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
    options = options_from_flags(args, ScaleOptions, batch_sizes=parse_batch_sizes(args.batch_sizes),
                                 trials_per_batch=budget["trials"], timeout_s_per_batch=budget["timeout_s"],
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
    print_curve(points, plan.tolerance, space.objective.metric, space.objective.direction == "maximize")
    print(f"report: {api.scale_report(plan.name, storage=args.storage, output=args.output)}")
    return 0


def add_scale_arguments(parser) -> None:
    from tianfeng.defaults import PRUNER_NAMES, SAMPLER_NAMES

    parser.add_argument("--space", type=Path, required=True, help="search-space YAML, e.g. search_spaces/large_batch.yaml")
    parser.add_argument("--mlflow", default=None, metavar="URI",
                        help="also log each batch size's trials as MLflow runs (an experiment per study)")
    parser.add_argument("--batch-sizes", required=True, help="increasing global batch sizes, e.g. 64,256,1024,2048")
    parser.add_argument("--budget-per-batch", default="10trials",
                        help=f"search budget of each batch size: {BUDGET_FORMS} (default 10trials); every "
                             "trial trains the same epochs at every batch size")
    parser.add_argument("--data", default=None, help="replace the space's data source (digits, imagefolder:DIR)")
    parser.add_argument("--name", default=None, help="name of the scale study; its searches are NAME-b<batch> "
                                                      "(default <space name>-scale)")
    add_storage(parser)
    parser.add_argument("--sampler", choices=SAMPLER_NAMES, default="auto",
                        help="sampler of each batch size's search (auto, the default: as tianfeng search's)")
    parser.add_argument("--pruner", choices=PRUNER_NAMES, default="asha", help="pruner of each batch size's search")
    parser.add_argument("--workers", type=int, default=1, help="local worker processes per search")
    parser.add_argument("--fidelity", default=None, help="the rung trials run at (default: the space's search_fidelity)")
    parser.add_argument("--warm-start", type=int, default=3,
                        help="best trials of the previous batch size enqueued first (default 3)")
    parser.add_argument("--tolerance", type=float, default=1.0,
                        help="how far below the smallest batch's value still counts as kept (default 1 point)")
    parser.add_argument("--seed", type=int, default=0, help="the samplers' seed")
    parser.add_argument("--runs-dir", type=Path, default=Path("runs"), help="where trial run directories go (default runs/)")
    parser.add_argument("--resume", action="store_true", help="continue an interrupted scale study")
    parser.add_argument("--verbose", action="store_true", help="also log every epoch of every trial")
    parser.add_argument("-o", "--output", type=Path, default=None, help="report path (default reports/<name>.html)")
