"""How long a proxy trial's full run will take on the search machine, before any full run has
been timed there: what `--promote balanced` waits for before its first full run.

A step's time is a fixed part (kernel launches, the optimizer, the loader's per-batch work) plus a
part per image that grows with the model's FLOPs at the step's resolution (the step-time model of
`tianfeng.cost.step_time`). A full run's time over its proxy's therefore lies between two bounds:
the ratio of their optimizer steps, where the fixed part dominates, and the ratio of their
training FLOPs, where arithmetic does. Which part dominates depends on the machine and the model,
which the search has not measured, so the estimate is the geometric middle of the two: it is off
by at most the square root of their quotient. On the 108 recorded cifar5-dev recipes of
`large_batch.yaml` (`lowres_half` against `target`, recorded on 2-core AMD EPYC VMs, 2026-12-06
and 07) the steps said a median 4.0x, the FLOPs 39.7x, the middle 12.6x and the recorded CPU
seconds 12.8x; per recipe the middle was 0.64 to 1.32 of the recorded ratio in 80% of them."""

from __future__ import annotations

import math

from tianfeng.core.run_config import RunConfig


def _steps_and_flops(cfg: RunConfig) -> tuple[float, float]:
    """(optimizer steps, training FLOPs) of `cfg`'s run, each per image of the full training set."""
    from tianfeng.cost.step_time import step_cost

    steps = sum(p.epochs * cfg.data.fraction / p.batch_size for p in cfg.phases)
    flops = sum(p.epochs * cfg.data.fraction * step_cost(cfg.model, p.resolution).flops for p in cfg.phases)
    return steps, flops


def full_run_ratio(proxy: RunConfig, full: RunConfig) -> float:
    """The full run's time over its proxy's on one machine: the geometric middle of their steps'
    ratio and their FLOPs' ratio (see the module's docstring)."""
    proxy_steps, proxy_flops = _steps_and_flops(proxy)
    full_steps, full_flops = _steps_and_flops(full)
    return math.sqrt(full_steps / proxy_steps * full_flops / proxy_flops)
