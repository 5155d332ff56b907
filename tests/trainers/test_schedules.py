"""Schedules are pure functions of progress in epochs; they stay continuous across phases."""

from __future__ import annotations

import pytest

from tianfeng.trainers.config import PhaseConfig, ScheduleConfig, load_config
from tianfeng.trainers.phases import PhasePlan
from tianfeng.trainers.schedules import batch_scale, learning_rate, shape_factor


@pytest.mark.parametrize(("rule", "expected"), [("linear", 4.0), ("sqrt", 2.0), ("none", 1.0)])
def test_batch_scaling_rules(rule: str, expected: float) -> None:
    assert batch_scale(1024, ScheduleConfig(scaling_rule=rule, reference_batch_size=256)) == expected


def test_linear_warmup_then_cosine() -> None:
    s = ScheduleConfig(warmup_epochs=2, warmup_start_factor=0.1, decay="cosine")
    assert shape_factor(0, 10, s) == pytest.approx(0.1)
    assert shape_factor(1, 10, s) == pytest.approx(0.55)
    assert shape_factor(2, 10, s) == pytest.approx(1.0)
    assert shape_factor(6, 10, s) == pytest.approx(0.5)
    assert shape_factor(10, 10, s) == pytest.approx(0.0)


def test_exponential_warmup() -> None:
    s = ScheduleConfig(warmup_epochs=4, warmup_shape="exponential", warmup_start_factor=0.01, decay="constant")
    assert shape_factor(0, 8, s) == pytest.approx(0.01)
    assert shape_factor(2, 8, s) == pytest.approx(0.1)
    assert shape_factor(4, 8, s) == pytest.approx(1.0)


def test_poly_and_step_decay() -> None:
    poly = ScheduleConfig(decay="poly", poly_power=2.0, final_lr_factor=0.0)
    assert shape_factor(5, 10, poly) == pytest.approx(0.25)
    step = ScheduleConfig(decay="step", step_milestones=(3.0, 6.0), step_gamma=0.1)
    assert [shape_factor(e, 10, step) for e in (2.99, 3, 6.5)] == pytest.approx([1.0, 0.1, 0.01])


@pytest.mark.parametrize("decay", ["poly", "cosine", "constant"])
@pytest.mark.parametrize("shape", ["linear", "exponential"])
def test_schedule_is_continuous_everywhere(decay: str, shape: str) -> None:
    s = ScheduleConfig(warmup_epochs=1.5, warmup_shape=shape, decay=decay)
    values = [shape_factor(i / 1000, 6, s) for i in range(6001)]
    assert max(abs(a - b) for a, b in zip(values, values[1:], strict=False)) < 0.01


def test_lr_continuous_across_phase_changes() -> None:
    """Same batch: no jump at the phase boundary; different batch: jump by exactly the rule's ratio."""
    cfg = load_config(None, ["schedule.warmup_epochs=2", "optimizer.lr=0.1"])
    phases = (PhaseConfig(3, 16, 128), PhaseConfig(3, 24, 128), PhaseConfig(2, 32, 64))
    cfg = type(cfg)(**{**cfg.__dict__, "phases": phases})
    plan = PhasePlan(phases, train_size=1280)
    lrs = []
    for epoch in range(plan.total_epochs):
        phase = plan.phase_of_epoch(epoch)
        for step in range(phase.steps_per_epoch):
            lrs.append((plan.progress(epoch, step), phase.batch_size,
                        learning_rate(plan.progress(epoch, step), phase.batch_size, cfg)))
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
    plan = PhasePlan((PhaseConfig(2, 16, 100), PhaseConfig(1, 32, 50)), train_size=1000)
    assert [p.steps_per_epoch for p in plan.phases] == [10, 20]
    assert plan.phase_of_epoch(2).resolution == 32
    assert plan.progress(2, 5) == 2.25
    assert plan.total_steps == 40


def test_piecewise_lines_jumps_and_its_checks() -> None:
    import pytest

    from tianfeng.core.errors import ConfigError
    from tianfeng.trainers.config import RunConfig, ScheduleConfig, config_from_dict, config_to_dict
    from tianfeng.trainers.schedules import shape_factor

    s = ScheduleConfig(decay="piecewise", piecewise_epochs=(0, 4, 4, 8), piecewise_factors=(0.5, 1.0, 0.1, 0.0))
    assert [shape_factor(e, 10, s) for e in (0, 2, 3.999, 4, 6, 8, 9)] == pytest.approx(
        [0.5, 0.75, 1.0, 0.1, 0.05, 0.0, 0.0], abs=1e-3)
    raw = config_to_dict(RunConfig())
    raw["schedule"].update(decay="piecewise", piecewise_epochs=[0, 4], piecewise_factors=[1.0])
    with pytest.raises(ConfigError, match="schedule.piecewise_epochs: must list epochs, as many as"):
        config_from_dict(raw, "run.yaml")
    raw["schedule"].update(piecewise_epochs=[4, 0], piecewise_factors=[1.0, 0.5])
    with pytest.raises(ConfigError, match="must be non-decreasing epochs"):
        config_from_dict(raw, "run.yaml")
    raw["schedule"].update(piecewise_epochs=[0, 4], warmup_epochs=1)
    with pytest.raises(ConfigError, match="schedule.warmup_epochs: must be 0 with decay piecewise"):
        config_from_dict(raw, "run.yaml")
