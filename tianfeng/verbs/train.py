"""`tianfeng train`: one run config on the bundled engine."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tianfeng.options import option
from tianfeng.verbs import Verb
from tianfeng.verbs._flags import emit


@dataclass(frozen=True)
class TrainOptions:
    config: Path | None = option(None, "run config YAML (default: the embedded digits recipe)")
    overrides: tuple[str, ...] = option((), "override one config value, e.g. --set optimizer.lr=0.2 or --set "
                                        "phases.0.batch_size=128 (repeatable)", name="--set", repeat=True,
                                        metavar="KEY=VALUE")


def train(config: str | Path | None = None, overrides: Sequence[str] = (),
          callback: Callable[[Any], None] | None = None):
    """Train one run with the bundled engine: `config` a run-config file (default: the embedded
    digits recipe), `overrides` as `--set KEY=VALUE`, `callback` called with each epoch's metrics.
    Returns the engine's RunResult."""
    from tianfeng.core.run_config import load_config
    from tianfeng.recipes import DEFAULT_RECIPE
    from tianfeng.trainers.engine import train as run_engine

    return run_engine(load_config(config or DEFAULT_RECIPE, list(overrides)), callback)


def command(args: argparse.Namespace) -> int:
    return run_train(args.config, list(args.overrides), json_output=args.json)


def run_train(config_path: Path | None, overrides: list[str], *, json_output: bool = False) -> int:
    from tianfeng.trainers import distributed

    code = _train_and_report(config_path, overrides, json_output)
    if int(os.environ.get("WORLD_SIZE", 1)) > 1:
        distributed.exit_rank(code)
    return code


def _train_and_report(config_path: Path | None, overrides: list[str], json_output: bool) -> int:
    from tianfeng.core.epoch_metrics import summary_lines
    from tianfeng.core.states import RunStatus
    from tianfeng.trainers import distributed
    from tianfeng.trainers.stop_signals import Left, Signalled, checkpoint_on_stop_signals

    try:
        with checkpoint_on_stop_signals():
            result = train(config_path, overrides)
    except (Signalled, Left) as stopped:  # preempted or at its time limit: the scheduler restarts it
        distributed.shutdown()
        if int(os.environ.get("RANK", 0)) == 0:
            print(f"tianfeng: {stopped}", file=sys.stderr)
        # without the interpreter's teardown, which would first finish the compile jobs a step
        # that was compiling had queued (tens of seconds past the scheduler's KillWait)
        distributed.exit_rank(128 + stopped.signum)
    distributed.shutdown()
    if int(os.environ.get("RANK", 0)) != 0:  # under torchrun, rank 0 speaks for the job
        return 0 if result.status != RunStatus.DIVERGED else 1
    final = asdict(result.final) if result.final else None
    summary = {"status": result.status, "run_dir": str(result.run_dir), "precision": result.precision, "final": final}
    emit(argparse.Namespace(json=json_output), summary,
         summary_lines(result.status, final, result.precision, str(result.run_dir)))
    if result.status == RunStatus.DIVERGED:
        print(f"tianfeng: run diverged: {result.message}", file=sys.stderr)
        return 1
    return 0


VERB = Verb(
    "train", "run one training job with the bundled engine",
    "Train with the bundled engine. Logs go to stderr; the final metrics to stdout (JSON with --json), and the run "
    "directory holds config.yaml, metrics.jsonl, result.json and checkpoints.",
    command,
    (("tianfeng train", "the embedded digits recipe, here"),
     ("tianfeng train --config run.yaml --set optimizer.lr=0.2 --json", "a run config, one value changed"),
     ("torchrun --nproc-per-node 8 -m tianfeng.cli train --config run.yaml", "8 ranks on one node")),
    options=(TrainOptions,), json=True, source="config", default_source="the embedded default recipe",
    loads=("torch",))
