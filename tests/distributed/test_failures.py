"""A killed rank ends the job cleanly; the restart (even at another world size) resumes from
the last checkpoint without losing a completed epoch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.distributed.test_hooks import REPO, free_port


def launch(nproc: int, run_dir: Path) -> subprocess.Popen:
    args = ["-m", "tianfeng.cli", "train", "--set", f"run_dir={run_dir}", "--set", "device=cpu",
            "--set", "phases.0.epochs=4", "--set", "phases.0.resolution=8", "--set", "phases.0.batch_size=32",
            "--set", "checkpoint.every_steps=5"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    if nproc == 1:
        return subprocess.Popen([sys.executable, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
    return subprocess.Popen([sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
                             f"--master-port={free_port()}", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)


def rank_pids(job: subprocess.Popen) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(job.pid)], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


@pytest.mark.slow
def test_killed_rank_fails_the_job_and_a_smaller_world_resumes(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    job = launch(2, run_dir)
    ckpt = run_dir / "checkpoints" / "last.pt"
    deadline, killed_epoch = time.time() + 240, None
    while time.time() < deadline:
        time.sleep(0.2)
        try:
            position = torch.load(ckpt, weights_only=False)["position"]
        except (FileNotFoundError, EOFError, RuntimeError):
            continue
        if position["epoch"] >= 2 and position["step"] > 0:  # two epochs done, the third under way
            ranks = rank_pids(job)
            assert len(ranks) == 2
            os.kill(ranks[1], signal.SIGKILL)
            killed_epoch = position["epoch"]
            break
    assert killed_epoch is not None, "no mid-epoch checkpoint appeared"
    assert job.wait(timeout=120) != 0  # the whole job failed instead of hanging
    epochs_done = len((run_dir / "metrics.jsonl").read_text().splitlines())
    assert epochs_done >= 2

    resumed = launch(1, run_dir)  # the restart runs on one process: world 2 -> 1
    _, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err.decode()[-2000:]
    assert "resumed from" in err.decode()
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["epoch"] for m in metrics] == [1, 2, 3, 4]  # no completed epoch lost or repeated
    assert metrics[-1]["val_top1"] > 30


def _launch_plain(nproc: int, run_dir: Path, *extra: str) -> subprocess.Popen:
    """A run that checkpoints only at epoch ends, so a mid-epoch checkpoint is the signal's."""
    args = ["-m", "tianfeng.cli", "train", "--set", f"run_dir={run_dir}", "--set", "device=cpu",
            "--set", "phases.0.epochs=5", "--set", "phases.0.resolution=16", "--set", "phases.0.batch_size=8",
            "--set", "data.workers=1", *extra]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    launcher = [] if nproc == 1 else ["-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
                                      f"--master-port={free_port()}"]
    return subprocess.Popen([sys.executable, *launcher, *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)


@pytest.mark.slow
@pytest.mark.alone  # the signal must land mid-epoch
def test_a_stop_signal_checkpoints_after_its_step_and_the_restart_repeats_nothing(
        tmp_path: Path, small_imagefolder: Path) -> None:
    """SIGTERM to every process of a 2-rank torchrun job (as a scheduler's preemption or requeue
    sends it, the torch loader's decode workers included): the ranks agree on one step,
    checkpoint after it and exit; the restart resumes at that step and ends with the
    uninterrupted run's metrics."""
    files = ("--set", f"data.source=imagefolder:{small_imagefolder}", "--set", "data.loader=torch")
    whole = _launch_plain(2, tmp_path / "whole", *files)
    _, err = whole.communicate(timeout=300)
    assert whole.returncode == 0, err.decode()[-2000:]

    run_dir = tmp_path / "cut"
    job = _launch_plain(2, run_dir, *files)
    metrics = run_dir / "metrics.jsonl"
    deadline = time.time() + 240
    while time.time() < deadline and not (metrics.exists() and metrics.read_text().count("\n") >= 1):
        time.sleep(0.05)
    os.killpg(job.pid, signal.SIGTERM)
    _, err = job.communicate(timeout=120)
    assert job.returncode != 0
    assert "stopped on SIGTERM at epoch" in err.decode(), err.decode()[-3000:]
    assert not (run_dir / "result.json").exists()  # not an ended run: nothing may collect it
    position = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)["position"]
    assert position["step"] > 0, position  # after the signal's step, not the last epoch's end

    resumed = _launch_plain(2, run_dir, *files)
    _, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err.decode()[-2000:]
    assert f"at epoch {position['epoch'] + 1}, step {position['step']}" in err.decode()  # where it resumed
    cut = [json.loads(line) for line in metrics.read_text().splitlines()]
    uncut = [json.loads(line) for line in (tmp_path / "whole" / "metrics.jsonl").read_text().splitlines()]
    assert [m["epoch"] for m in cut] == [1, 2, 3, 4, 5]
    for a, b in zip(cut, uncut, strict=True):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-6) and a["val_top1"] == b["val_top1"]
