"""Every run directory holds its per-epoch metrics as TensorBoard scalars: read back with
TensorBoard's own reader, they match metrics.jsonl."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tianfeng.core.run_config import load_config
from tianfeng.recipes import DEFAULT_RECIPE
from tianfeng.trainers.engine import train


def scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_event_file_matches_metrics_jsonl(tmp_path: Path) -> None:
    cfg = load_config(DEFAULT_RECIPE, [f"run_dir={tmp_path / 'run'}", "phases.0.epochs=3", "precision.mode=fp32"])
    train(cfg)
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    board = scalars(tmp_path / "run")
    for tag in ("train_loss", "val_loss", "val_top1", "lr", "samples_per_s"):
        assert [step for step, _ in board[tag]] == [line["epoch"] for line in lines] == [1, 2, 3]
        assert [v for _, v in board[tag]] == pytest.approx([line[tag] for line in lines], rel=1e-6)


def test_a_resumed_run_shows_each_epoch_once(tmp_path: Path) -> None:
    """Stopped after epoch 2 with a checkpoint every 2 epochs... then epoch 3 logged, killed: the
    resume re-runs epoch 3, and TensorBoard keeps one value for it."""
    from tianfeng.trainers.engine import StopTraining

    overrides = [f"run_dir={tmp_path / 'run'}", "phases.0.epochs=4", "precision.mode=fp32",
                 "checkpoint.every_epochs=2"]

    def stop_after_three(metrics) -> None:
        if metrics.epoch == 3:
            raise StopTraining("pruned", "stopped for the test")

    train(load_config(DEFAULT_RECIPE, overrides), stop_after_three)
    train(load_config(DEFAULT_RECIPE, overrides))
    board = scalars(tmp_path / "run")
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [step for step, _ in board["val_top1"]] == [1, 2, 3, 4]
    assert [v for _, v in board["val_top1"]] == pytest.approx([line["val_top1"] for line in lines], rel=1e-6)
