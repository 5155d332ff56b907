"""Adaptive gradient fusion: time a few DDP bucket sizes on real training steps at start-up
and keep the fastest (every rank agrees: the slowest rank's time counts)."""

from __future__ import annotations

import contextlib
import copy
import gc
import time
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn

CANDIDATE_MB = (1.0, 5.0, 25.0, 100.0)


def choose_bucket_mb(model: nn.Module, wrap: Callable[[float], nn.Module], batch: tuple[torch.Tensor, torch.Tensor],
                     loss_fn: Callable, steps: int = 3,
                     autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
                     ) -> tuple[float, dict[float, float]]:
    """(fastest bucket size in MB, seconds per step for each candidate), timed as the run steps:
    under its autocast and memory format (an fp32 NCHW step may not even fit where the run
    does). The model's weights and BatchNorm statistics are restored afterwards: timing does
    not train."""
    saved = copy.deepcopy(model.state_dict())
    x, y = batch
    if x.is_cuda:
        x = x.contiguous(memory_format=torch.channels_last)
    timings: dict[float, float] = {}
    for mb in CANDIDATE_MB:
        ddp = wrap(mb)
        start = 0.0
        for i in range(steps + 1):
            if i == 1:  # the first step builds DDP's buckets and warms up kernels
                if x.is_cuda:
                    torch.cuda.synchronize()
                start = time.perf_counter()
            with autocast():
                loss = loss_fn(ddp(x), y)
            loss.backward()
            model.zero_grad(set_to_none=True)
        if x.is_cuda:
            torch.cuda.synchronize()
        # on the batch's device: an NCCL group has no CPU tensors
        seconds = torch.tensor([(time.perf_counter() - start) / steps], dtype=torch.float64, device=x.device)
        dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
        timings[mb] = seconds.item()
        del ddp
        gc.collect()  # drop the candidate's reducer and its autograd hooks before the next one
    model.load_state_dict(saved)
    return min(timings, key=timings.get), timings


def settle_buckets(ddp: nn.Module, model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor],
                   loss_fn: Callable,
                   autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext) -> None:
    """One backward pass that trains nothing, so DDP records the order gradients become ready
    and rebuilds its buckets in that order at the next forward. Without it the first step of a
    run uses the initial buckets and every later step the rebuilt ones, and a run resumed
    mid-way would take that first step with another layout than the uninterrupted run: hook
    state kept per bucket (top-k residuals, PowerSGD's error and factors) would meet the wrong
    gradients."""
    saved = copy.deepcopy(model.state_dict())
    x, y = batch
    with autocast():
        loss = loss_fn(ddp(x.contiguous(memory_format=torch.channels_last) if x.is_cuda else x), y)
    loss.backward()
    model.zero_grad(set_to_none=True)
    model.load_state_dict(saved)
