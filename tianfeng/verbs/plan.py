"""`tianfeng plan`: a run's predicted wall time, part by part, at many GPUs."""

from __future__ import annotations

import argparse
from pathlib import Path

from tianfeng.cost.grid_options import PlanOptions
from tianfeng.verbs import Verb


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, required=True, help="the run config YAML to predict")


VERB = Verb(
    "plan", "predict a run's wall time, part by part, at many GPUs",
    "The predicted wall time of a run (start-up, compute, exchange, data, evaluation, checkpoints) at several GPU "
    "counts for flat, hierarchical and compressed gradient exchange, with scaling efficiency and whether the "
    "per-GPU batch fits the GPU's memory: the model the search scores recipes with.",
    "tianfeng.commands.plan_command:run_plan_command",
    (("tianfeng plan --config run.yaml --gpus 128", "predicted time part by part at 128 GPUs"),
     ("tianfeng plan --config run.yaml --gpus 512 --preset a100 --json", "on A100s, as JSON")),
    options=PlanOptions, arguments=_arguments, json=True, source="config")
