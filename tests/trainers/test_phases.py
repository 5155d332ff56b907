"""The phase timeline places each step in fractional epochs, so the LR stays continuous where a phase
changes resolution or batch: a jump only by the batch-scaling rule's ratio, never a warm-up restart."""

from __future__ import annotations

import pytest

from tianfeng.core.lr_schedule import learning_rate, shape_factor
from tianfeng.core.run_config import PhaseConfig, load_config
from tianfeng.trainers.phases import PhaseTimeline


def test_lr_continuous_across_phase_changes() -> None:
    """Same batch: no jump at the phase boundary; different batch: jump by exactly the rule's ratio."""
    cfg = load_config(None, ["schedule.warmup_epochs=2", "optimizer.lr=0.1"])
    phases = (PhaseConfig(3, 16, 128), PhaseConfig(3, 24, 128), PhaseConfig(2, 32, 64))
    cfg = type(cfg)(**{**cfg.__dict__, "phases": phases})
    timeline = PhaseTimeline(phases, train_size=1280)
    lrs = []
    for epoch in range(timeline.total_epochs):
        phase = timeline.phase_of_epoch(epoch)
        for step in range(phase.steps_per_epoch):
            lrs.append((timeline.progress(epoch, step), phase.batch_size,
                        learning_rate(timeline.progress(epoch, step), phase.batch_size, cfg)))
    i = next(i for i, (e, _, _) in enumerate(lrs) if e >= 3)  # first step at 24px
    jump, previous = lrs[i][2] - lrs[i - 1][2], lrs[i - 1][2] - lrs[i - 2][2]
    assert jump == pytest.approx(previous, rel=0.2)  # the boundary step is like any other step
    before = next(lr for e, b, lr in reversed(lrs) if e < 6)
    after = next(lr for e, b, lr in lrs if e >= 6)
    shape_before = shape_factor(5.9, 8, cfg.schedule)
    shape_after = shape_factor(6.0, 8, cfg.schedule)
    assert after / before == pytest.approx(0.5 * shape_after / shape_before, rel=1e-6)
    assert shape_after < shape_before  # still decaying: no warm-up restart at the phase change


def test_phase_plan_positions() -> None:
    timeline = PhaseTimeline((PhaseConfig(2, 16, 100), PhaseConfig(1, 32, 50)), train_size=1000)
    assert [p.steps_per_epoch for p in timeline.phases] == [10, 20]
    assert timeline.phase_of_epoch(2).resolution == 32
    assert timeline.progress(2, 5) == 2.25
    assert timeline.total_steps == 40
