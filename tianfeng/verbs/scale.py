"""`tianfeng scale`: best accuracy against batch size, a search per batch size."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tianfeng.commands.scale_command import BUDGET_FORMS, add_scale_arguments
from tianfeng.options import option
from tianfeng.scaling.options import ScaleOptions
from tianfeng.verbs import Verb


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


VERB = Verb(
    "scale", "best accuracy against batch size: a search per batch size",
    "For each batch size (increasing), search the space with the batch pinned, warm-started from the previous "
    "size's best trials; run the naive baseline (the smallest batch's winner with linear LR scaling) beside it; "
    "store the curve, print it and write its HTML report.",
    "tianfeng.commands.scale_command:run_scale_command",
    (("tianfeng scale --space large_batch.yaml --batch-sizes 256,1024,4096", "a search per batch size"),
     ("tianfeng scale --space large_batch.yaml --batch-sizes 512,2048 --budget-per-batch 20 --resume",
      "go on with a scale run")),
    options=ScaleCommandOptions, arguments=add_scale_arguments, json=True, source="space", storage="creates")
