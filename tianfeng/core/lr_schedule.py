"""Learning-rate schedules as pure functions of training progress in epochs (fractional).

The report draws schedules with these same functions, so what is plotted is what ran.
"""

from __future__ import annotations

import math

from tianfeng.core.run_config import RunConfig, ScheduleConfig


def batch_scale(batch_size: int, schedule: ScheduleConfig) -> float:
    """LR multiplier for a batch size relative to the reference batch (Goyal et al.'s linear rule)."""
    ratio = batch_size / schedule.reference_batch_size
    if schedule.scaling_rule == "linear":
        return ratio
    if schedule.scaling_rule == "sqrt":
        return math.sqrt(ratio)
    return 1.0


def peak_lr(cfg: RunConfig, phase: int = -1) -> float:
    """The peak LR (after warm-up) while `phase` runs: the base LR scaled for that phase's batch."""
    return cfg.optimizer.lr * batch_scale(cfg.phases[phase].batch_size, cfg.schedule)


def warmup_start(schedule: ScheduleConfig) -> float:
    """The warm-up's first LR as a fraction of the peak."""
    if schedule.warmup_start_factor is not None:
        return schedule.warmup_start_factor
    return 0.0 if schedule.warmup_shape == "linear" else 0.01


def shape_factor(epoch: float, total_epochs: float, schedule: ScheduleConfig) -> float:
    """Warm-up then decay, as a fraction of the peak LR; continuous in `epoch`."""
    warmup = schedule.warmup_epochs
    if warmup > 0 and epoch < warmup:
        start = warmup_start(schedule)
        frac = epoch / warmup
        if schedule.warmup_shape == "linear":
            return start + (1.0 - start) * frac
        return start ** (1.0 - frac)  # exponential: start * (1/start) ** frac
    if schedule.decay == "piecewise":
        return piecewise(epoch, schedule.piecewise_epochs, schedule.piecewise_factors)
    if schedule.decay == "step":
        passed = sum(1 for m in schedule.step_milestones if epoch >= m)
        return schedule.step_gamma**passed
    if schedule.decay == "constant":
        return 1.0
    span = max(total_epochs - warmup, 1e-12)
    progress = min(max((epoch - warmup) / span, 0.0), 1.0)
    final = schedule.final_lr_factor
    if schedule.decay == "poly":
        return final + (1.0 - final) * (1.0 - progress) ** schedule.poly_power
    return final + (1.0 - final) * 0.5 * (1.0 + math.cos(math.pi * progress))


def piecewise(epoch: float, epochs: tuple[float, ...], factors: tuple[float, ...]) -> float:
    """Straight lines between (epoch, factor) points; the first value before them, the last after;
    at an epoch listed twice, the later point's value (a jump)."""
    if epoch < epochs[0]:
        return factors[0]
    for i in range(len(epochs) - 1, -1, -1):
        if epoch >= epochs[i]:
            if i + 1 == len(epochs):
                return factors[i]
            span = epochs[i + 1] - epochs[i]
            return factors[i] + (factors[i + 1] - factors[i]) * (epoch - epochs[i]) / span
    return factors[-1]


def learning_rate(epoch: float, batch_size: int, cfg: RunConfig) -> float:
    """The LR the optimizer uses at `epoch` while training with global `batch_size`."""
    return (cfg.optimizer.lr * batch_scale(batch_size, cfg.schedule)
            * shape_factor(epoch, cfg.total_epochs, cfg.schedule))
