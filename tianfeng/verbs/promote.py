"""`tianfeng promote`: a trial's recipe at full scale."""

from __future__ import annotations

import argparse

from tianfeng.promotion.options import PromoteOptions
from tianfeng.verbs import Verb


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trial", type=int, nargs="?", default=None, help="trial number in the study")
    parser.add_argument("--front", action="store_true", help="list the study's Pareto front (proxy metric, "
                        "predicted wall time, GPU-hours, batch, resolution schedule) and promote nothing")


VERB = Verb(
    "promote", "run a trial's recipe at full scale",
    "Transfer a trial's recipe from its proxy rung to the full-fidelity target (printed rule by rule), run it, and "
    "record the run beside the study. Promoting the same trial with the same config again resumes that run.",
    "tianfeng.commands.promote_command:run_promote_command",
    (("tianfeng promote --front --study large_batch", "list the Pareto front"),
     ("tianfeng promote --fastest-to 80 --study large_batch", "the fastest front trial reaching 80"),
     ("tianfeng promote 14 --study large_batch --nodes 16 --gpus-per-node 8 --launcher slurm --partition gpu "
      "--time 2:00:00", "trial 14 on 128 GPUs through Slurm")),
    options=PromoteOptions, arguments=_arguments, json=True, storage="writes")
