"""`tianfeng train`: one run of the engine from a config file (or the embedded default)."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import asdict
from pathlib import Path

from tianfeng import api
from tianfeng.commands.flags import emit
from tianfeng.trainers import distributed
from tianfeng.trainers.engine import RunStatus
from tianfeng.trainers.metrics import summary_lines
from tianfeng.trainers.stop_signals import Left, Signalled, checkpoint_on_stop_signals


def run_train_command(args) -> int:
    return run_train(args.config, list(args.overrides), json_output=args.json)


def run_train(config_path: Path | None, overrides: list[str], *, json_output: bool = False) -> int:
    code = _train_and_report(config_path, overrides, json_output)
    if int(os.environ.get("WORLD_SIZE", 1)) > 1:
        distributed.exit_rank(code)
    return code


def _train_and_report(config_path: Path | None, overrides: list[str], json_output: bool) -> int:
    try:
        with checkpoint_on_stop_signals():
            result = api.train(config_path, overrides)
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
