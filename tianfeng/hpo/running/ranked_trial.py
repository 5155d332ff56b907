"""A trial trained by several DDP ranks of one node (`tianfeng search --gpus-per-trial G`): the
worker starts `torchrun --standalone` with G processes on its trial's config and reads each
epoch back from the run directory as rank 0 writes it, so the search judges every epoch as it
does an in-process trial's. BatchNorm stays per target GPU: each rank emulates its share of the
target cluster's GPUs (the engine's `emulate_gpus`), so G real ranks and the emulated rest
normalise over what the target's GPUs would.

A pruned trial, Ctrl-C and a stopped worker send SIGTERM to the ranks, which
checkpoint after their step (trainers/stop_signals) and exit: an interrupted trial resumes from
there, as an in-process one does."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from tianfeng.core.epoch_metrics import EpochMetrics
from tianfeng.core.run_config import RunConfig, config_to_dict
from tianfeng.core.states import RunStatus
from tianfeng.trainers.engine import RunResult, StopTraining

log = logging.getLogger("tianfeng.search")
LOG_NAME = "ranks.log"  # the ranks' output, in the trial's run directory
STOP_WAIT_S = 120  # how long stopped ranks get to write their checkpoint before they are killed


def _epochs(run_dir: Path) -> list[EpochMetrics]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    out = []
    for line in lines:
        try:
            out.append(EpochMetrics(**json.loads(line)))
        except (ValueError, TypeError):  # caught mid-write: read again at the next look
            break
    return out


@dataclass(frozen=True)
class RankedTrainer:
    """The engine's `train(cfg, report)` for `ranks` DDP processes of this node."""
    ranks: int
    device: str  # cuda (nccl) or cpu (gloo)
    threads: int = 1  # torch threads of each CPU rank
    poll_s: float = 0.5

    def command(self, config: Path) -> list[str]:
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
                f"--nproc-per-node={self.ranks}", "-m", "tianfeng.cli", "train", "--config", str(config),
                "--set", f"device={self.device}", "--set", f"distributed.local_size={self.ranks}"]

    def __call__(self, cfg: RunConfig, report: Callable[[EpochMetrics], None]) -> RunResult:
        run_dir = cfg.resolved_run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        config = run_dir / "ranks-config.yaml"
        config.write_text(yaml.safe_dump(config_to_dict(cfg), sort_keys=False))
        (run_dir / "result.json").unlink(missing_ok=True)  # a resumed trial's result is the new one
        seen = len(_epochs(run_dir))  # a resumed trial: those were judged before
        env = {**os.environ, "OMP_NUM_THREADS": str(self.threads)}
        with (run_dir / LOG_NAME).open("ab") as out:
            # a session of its own: Ctrl-C reaches this worker, which stops the ranks itself
            proc = subprocess.Popen(self.command(config), stdout=out, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)
        stop: StopTraining | None = None
        try:
            while True:
                ended = proc.poll() is not None
                epochs = _epochs(run_dir)
                for m in epochs[seen:]:
                    seen += 1
                    if stop is None:
                        try:
                            report(m)
                        except StopTraining as exc:
                            stop = exc
                            _stop(proc)
                if ended or (stop is not None and proc.poll() is not None):
                    break
                time.sleep(self.poll_s)
        except BaseException:
            _stop(proc)
            raise
        history = _epochs(run_dir)
        if stop is not None:
            return RunResult(RunStatus(stop.status), history, run_dir, cfg.precision.mode, str(stop))
        result = run_dir / "result.json"
        if proc.returncode != 0 or not result.exists():
            raise RuntimeError(f"the trial's {self.ranks} ranks failed (exit {proc.returncode}): "
                               f"{_last_line(run_dir / LOG_NAME)} (all of it in {run_dir / LOG_NAME})")
        summary = json.loads(result.read_text())
        return RunResult(RunStatus(summary["status"]), history, run_dir, summary["precision"], summary["message"])


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the ranks and their agent; they checkpoint after the step in progress."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


def _last_line(path: Path) -> str:
    """What the ranks said went wrong: tianfeng's own error line, else the first exception a rank
    raised (not torchrun's summary of it), else the last line."""
    lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()] \
        if path.exists() else []
    ours = [line.removeprefix("tianfeng: error: ") for line in lines if line.startswith("tianfeng: error: ")]
    raised = [line for line in lines if _EXCEPTION.match(line) and "ChildFailedError" not in line]
    return (ours or raised or lines[-1:] or ["no output"])[0]


_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt)\b")
