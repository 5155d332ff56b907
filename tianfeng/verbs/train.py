"""`tianfeng train`: one run config on the bundled engine."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tianfeng.options import option
from tianfeng.verbs import Verb


@dataclass(frozen=True)
class TrainOptions:
    config: Path | None = option(None, "run config YAML (default: the embedded digits recipe)")
    overrides: tuple[str, ...] = option((), "override one config value, e.g. --set optimizer.lr=0.2 or --set "
                                        "phases.0.batch_size=128 (repeatable)", name="--set", repeat=True,
                                        metavar="KEY=VALUE")


VERB = Verb(
    "train", "run one training job with the bundled engine",
    "Train with the bundled engine. Logs go to stderr; the final metrics to stdout (JSON with --json), and the run "
    "directory holds config.yaml, metrics.jsonl, result.json and checkpoints.",
    "tianfeng.commands.train_command:run_train_command",
    (("tianfeng train", "the embedded digits recipe, here"),
     ("tianfeng train --config run.yaml --set optimizer.lr=0.2 --json", "a run config, one value changed"),
     ("torchrun --nproc-per-node 8 -m tianfeng.cli train --config run.yaml", "8 ranks on one node")),
    options=TrainOptions, json=True, source="config", default_source="the embedded default recipe")
