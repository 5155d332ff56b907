"""A scheduler's stop signal in each phase of a run: at once while starting up or before a step
that compiles (nothing new to save), after a checkpoint while training or evaluating. The
signals are sent by the process to itself, inside the handlers `tianfeng train` installs."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import torch

from tests.conftest import make_config
from tianfeng.trainers import engine
from tianfeng.trainers.stop_signals import (
    Left,
    Signalled,
    checkpoint_on_stop_signals,
    leaving_at_once,
)

RESUMED_KEYS = ("train_loss", "val_loss", "val_top1", "val_top5", "lr", "noise_scale", "skipped_steps")


def _config(tmp_path: Path, name: str, **sections):
    # several validation batches, so a signal can come between them
    return make_config(tmp_path / name, data={"val_batch_size": 32, "workers": 0},
                       phases=[{"epochs": 2, "resolution": 8, "batch_size": 64}],
                       **{"engine": {"compile": "off"}, **sections})


def _signal_when(monkeypatch, split: str, epoch_call: int, batch: int) -> list[int]:
    """SIGTERM to this process while the pipeline yields batch `batch` of its `epoch_call`-th pass
    over `split` (train or val); the list records that it was sent."""
    original, sent, calls = engine.build_pipeline, [], []

    def build(*args, **kwargs):
        data, reason = original(*args, **kwargs)
        real = getattr(data, f"{split}_batches")

        def batches(*a, **k):
            calls.append(1)
            for i, b in enumerate(real(*a, **k)):
                if len(calls) == epoch_call and i == batch and not sent:
                    os.kill(os.getpid(), signal.SIGTERM)
                    sent.append(i)
                yield b
        setattr(data, f"{split}_batches", batches)
        return data, reason

    monkeypatch.setattr(engine, "build_pipeline", build)
    return sent


def test_a_signal_while_starting_up_leaves_at_once() -> None:
    with (checkpoint_on_stop_signals(), pytest.raises(Left, match="SIGTERM while starting up: nothing trained"),
          leaving_at_once("while starting up")):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)  # what the handler cuts short


def test_outside_the_handlers_a_stretch_that_leaves_at_once_runs_to_its_end() -> None:
    """A search's in-process trials keep their own Ctrl-C handling: no handler of ours raises."""
    previous = signal.signal(signal.SIGUSR1, lambda *_: None)
    try:
        with leaving_at_once("while starting up"):
            os.kill(os.getpid(), signal.SIGUSR1)
            time.sleep(0.2)
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_a_signal_before_a_step_that_compiles_leaves_before_compiling_and_writes_nothing(
        tmp_path, monkeypatch) -> None:
    sent = _signal_when(monkeypatch, "train", epoch_call=1, batch=0)
    cfg = _config(tmp_path, "victim", engine={"compile": "on"}, noise_scale_every=0)  # no eager noise step first
    compiled = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    with checkpoint_on_stop_signals(), pytest.raises(Left, match="while compiling for epoch 1, step 1"):
        engine.train(cfg)
    assert sent == [0]
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == compiled  # nothing was compiled
    assert not (cfg.resolved_checkpoint_dir / "last.pt").exists()


def test_a_signal_while_evaluating_checkpoints_the_trained_epoch_and_the_resumed_run_is_the_uncut_one(
        tmp_path, monkeypatch) -> None:
    reference = engine.train(_config(tmp_path, "reference"))
    sent = _signal_when(monkeypatch, "val", epoch_call=1, batch=1)
    cfg = _config(tmp_path, "victim")
    with checkpoint_on_stop_signals(), pytest.raises(Signalled, match="SIGTERM while evaluating epoch 1: checkpoint"):
        engine.train(cfg)
    assert sent == [1]
    saved = torch.load(cfg.resolved_checkpoint_dir / "last.pt", weights_only=False)["position"]
    assert saved["epoch"] == 0 and saved["step"] > 0 and saved["history"] == []  # trained, not yet evaluated
    monkeypatch.undo()
    resumed = engine.train(cfg)
    assert len(resumed.epochs) == len(reference.epochs) == 2
    for a, b in zip(reference.epochs, resumed.epochs, strict=True):
        for key in RESUMED_KEYS:
            assert getattr(a, key) == pytest.approx(getattr(b, key), rel=1e-5, abs=1e-7), (key, a, b)
