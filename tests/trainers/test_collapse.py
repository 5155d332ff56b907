"""A run that learned and fell back to a uniform guess stops; runs that leave chance late, dip
and recover, or still learn their training set, do not."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.conftest import make_config
from tianfeng.core.epoch_metrics import EpochMetrics
from tianfeng.trainers.collapse import collapse_message
from tianfeng.trainers.engine import train


def curve(top1: list[float], loss: list[float]) -> list[EpochMetrics]:
    return [EpochMetrics(epoch=i + 1, phase=0, resolution=32, batch_size=256, lr=0.1, train_loss=lo,
                         val_loss=lo, val_top1=t, val_top5=100.0, samples_per_s=1.0, data_wait_fraction=0.0,
                         skipped_steps=0, elapsed_s=float(i))
            for i, (t, lo) in enumerate(zip(top1, loss, strict=True))]


def first_stop(history: list[EpochMetrics], classes: int, patience: int = 3) -> int | None:
    """The epoch after which the engine would stop the run (it checks after every epoch)."""
    return next((n for n in range(1, len(history) + 1) if collapse_message(history[:n], classes, patience)), None)


# a LARS recipe on a 5-class data set (base LR 5.25, warm-up 3.5 epochs to a peak LR of 8.2):
# learned to 57.6%, then after its warm-up a uniform guess to the last of its 19 epochs
COLLAPSED_TOP1 = [52.6, 57.6, 29.6, 19.1, 18.8, 17.5] + [20.0] * 13
COLLAPSED_LOSS = [1.372, 1.142, 1.223, 1.988, 1.748, 1.677, 1.628, 1.655, 1.631, 1.63, 1.63, 1.62, 1.616,
                  1.617, 1.614, 1.612, 1.611, 1.611, 1.61]


def test_a_run_that_learned_then_sat_at_a_uniform_guess_stops_after_patience_epochs() -> None:
    history = curve(COLLAPSED_TOP1, COLLAPSED_LOSS)
    assert first_stop(history, classes=5) == 6
    message = collapse_message(history[:6], 5, 3)
    assert "epochs 4-6" in message and "57.60% at epoch 2" in message and "ln 5 = 1.609" in message
    assert first_stop(history, classes=5, patience=5) == 8
    assert first_stop(history, classes=5, patience=0) is None


def test_a_run_slow_to_leave_chance_at_its_start_is_not_collapsed() -> None:
    top1 = [18.3, 19.1, 20.4, 19.6, 20.1, 24.9, 32.7, 35.8]
    loss = [1.62, 1.61, 1.609, 1.61, 1.608, 1.55, 1.41, 1.35]
    assert first_stop(curve(top1, loss), classes=5) is None


def test_a_dip_to_chance_shorter_than_the_patience_then_recovery_is_not_collapsed() -> None:
    top1 = [45.0, 52.0, 20.0, 20.0, 31.0, 48.0, 20.0, 20.0, 55.0]
    loss = [1.40, 1.20, 1.70, 1.62, 1.50, 1.30, 1.61, 1.61, 1.10]
    assert first_stop(curve(top1, loss), classes=5) is None


def test_accuracy_at_chance_while_the_training_loss_still_falls_below_a_uniform_guess_is_not_collapsed() -> None:
    # a validation set the model does not generalise to (or mislabelled): it still learns
    top1 = [40.0, 10.5, 10.2, 10.0, 10.1, 10.0]
    loss = [1.8, 1.2, 1.0, 0.8, 0.6, 0.5]
    assert first_stop(curve(top1, loss), classes=10) is None


def test_chance_and_the_uniform_loss_follow_the_number_of_classes() -> None:
    top1 = [30.0, 1.0, 0.5, 0.1, 0.1]
    uniform = math.log(1000)
    assert first_stop(curve(top1, [5.0, uniform, uniform + 0.1, uniform, uniform]), classes=1000) == 4
    # 1% top-1 is 0.9 points above chance for 1000 classes: still chance
    assert first_stop(curve([30.0, 1.0, 1.0, 1.0], [5.0] + [uniform] * 3), classes=1000) == 4
    assert first_stop(curve([30.0, 2.5, 2.5, 2.5], [5.0] + [uniform] * 3), classes=1000) is None


class Collapsing:
    """build_model whose output turns zero (every class equally likely, no gradient), in
    training and evaluation, from the epoch after the run first reaches `learned`% top-1: a
    model that collapsed. It is also the run's epoch callback, which watches for that."""

    def __init__(self, learned: float) -> None:
        from tianfeng.trainers import engine

        self.real_build, self.learned, self.at = engine.build_model, learned, None

    def __call__(self, *args):
        model = self.real_build(*args)
        model.register_forward_hook(lambda module, inputs, output: output * 0.0 if self.at else None)
        return model

    def epoch_end(self, m: EpochMetrics) -> None:
        if self.at is None and m.val_top1 >= self.learned:
            self.at = m.epoch


@pytest.mark.parametrize("patience", [2, 0])
def test_the_engine_ends_a_collapsed_run_as_diverged_after_its_patience(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, patience: int) -> None:
    from tianfeng.trainers import engine

    collapsing = Collapsing(learned=30.0)  # digits: 10 classes, chance 10%
    monkeypatch.setattr(engine, "build_model", collapsing)
    cfg = make_config(tmp_path, phases=[{"epochs": 10, "resolution": 8, "batch_size": 32}],
                      engine={"collapse_patience": patience})
    result = train(cfg, collapsing.epoch_end)
    top1 = [round(m.val_top1, 1) for m in result.epochs]
    assert collapsing.at is not None and collapsing.at <= 6, top1
    if patience == 0:
        assert result.status == "completed" and len(result.epochs) == 10, top1
        return
    first, last = collapsing.at + 1, collapsing.at + 2
    assert result.status == "diverged" and len(result.epochs) == last, (top1, result.message)
    assert "collapsed to a uniform guess" in result.message and f"epochs {first}-{last}" in result.message
    assert result.epochs[-1].train_loss == pytest.approx(math.log(10), rel=1e-4)
