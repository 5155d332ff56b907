"""Schedules are pure functions of progress in epochs; they stay continuous across phases."""

from __future__ import annotations

import pytest

from tianfeng.core.lr_schedule import batch_scale, shape_factor
from tianfeng.core.run_config import ScheduleConfig


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


def test_piecewise_lines_jumps_and_its_checks() -> None:
    import pytest

    from tianfeng.core.errors import ConfigError
    from tianfeng.core.lr_schedule import shape_factor
    from tianfeng.core.run_config import RunConfig, ScheduleConfig, config_from_dict, config_to_dict

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
