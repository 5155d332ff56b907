"""Gradient compression hooks: fp16/bf16 casts and top-k sparsification with error feedback
(ours), PowerSGD (rank r, error feedback, warm start: torch's over all ranks, ours across nodes
when composed). Every kind composes with the hierarchical hook by compressing only the
inter-node step, where bandwidth is scarce.

No `from __future__ import annotations` here: DDP checks the hooks' annotations at run time."""

from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import PowerSGDState, powerSGD_hook

from tianfeng.trainers.comm.hierarchical import (
    Background,
    CommBytes,
    HierarchicalState,
    NodeLayout,
    hierarchical_sum,
    run_hook,
)
from tianfeng.trainers.comm.powersgd import NodePowerSGDState, node_powersgd_sum

_CASTS = {"fp16": torch.float16, "bf16": torch.bfloat16}


@dataclass
class CompressionState:
    kind: str  # fp16 | bf16 | topk | powersgd
    layout: NodeLayout
    topk_ratio: float = 0.01
    hierarchical: HierarchicalState | None = None  # compress only the inter-node step
    powersgd: PowerSGDState | None = None  # flat: torch's hook over all ranks
    node_powersgd: NodePowerSGDState | None = None  # with hierarchical: ours, across nodes only
    bytes: CommBytes = field(default_factory=CommBytes)
    residuals: dict[int, torch.Tensor] = field(default_factory=dict)  # top-k error feedback
    background: Background | None = field(default_factory=Background)  # None: block in the hook


def build_state(kind: str, layout: NodeLayout, *, topk_ratio: float = 0.01, powersgd_rank: int = 4,
                powersgd_start_step: int = 10, hierarchical: HierarchicalState | None = None) -> CompressionState:
    state = CompressionState(kind, layout, topk_ratio, hierarchical)
    if kind == "powersgd" and hierarchical is not None:
        state.node_powersgd = NodePowerSGDState(hierarchical, powersgd_rank, max(2, powersgd_start_step))
    elif kind == "powersgd":
        state.powersgd = PowerSGDState(
            process_group=None, matrix_approximation_rank=powersgd_rank,
            start_powerSGD_iter=max(2, powersgd_start_step), use_error_feedback=True, warm_start=True)
    return state


def _sum_compressed(state: CompressionState, tensor: torch.Tensor, group, group_size: int, key: int,
                    inter: bool) -> torch.Tensor:
    """Sum over `group` of `tensor`, sent compressed, divided by the world size (a cast divides
    before casting, as torch's fp16 hook does: a sum of world-size fp16 values would overflow
    world-size times sooner); counts the bytes sent."""
    world = state.layout.world
    if state.kind in _CASTS:
        low = tensor.div(world).to(_CASTS[state.kind])
        dist.all_reduce(low, group=group)
        state.bytes.add(low.numel() * low.element_size(), group_size, inter=inter, allreduce=True)
        return low.to(tensor.dtype)
    # top-k: send the k largest entries of (gradient + what earlier steps left unsent)
    residual = state.residuals.get(key)
    acc = tensor + residual if residual is not None and residual.shape == tensor.shape else tensor.clone()
    k = max(1, int(state.topk_ratio * acc.numel()))
    index = acc.abs().topk(k).indices
    values = acc[index]
    acc[index] = 0
    state.residuals[key] = acc
    all_index = index.new_empty(k * group_size, dtype=torch.int32)
    all_values = values.new_empty(k * group_size)
    dist.all_gather_into_tensor(all_index, index.to(torch.int32), group=group)
    dist.all_gather_into_tensor(all_values, values, group=group)
    sent = k * (4 + values.element_size())  # int32 indices and the values
    state.bytes.add(sent * group_size, group_size, inter=inter, allreduce=False, payload=sent)
    return torch.zeros_like(tensor).index_add_(0, all_index.long(), all_values).div_(world)


class _Bucket:
    """What a hook reads of a GradBucket, taken while DDP holds the bucket (the work runs later)."""

    def __init__(self, bucket: dist.GradBucket) -> None:
        self._index, self._buffer, self._params = bucket.index(), bucket.buffer(), bucket.parameters()
        self._last = bucket.is_last()

    def is_last(self) -> bool:
        return self._last

    def index(self) -> int:
        return self._index

    def buffer(self) -> torch.Tensor:
        return self._buffer

    def parameters(self) -> list[torch.Tensor]:
        return self._params


def compressed_allreduce_hook(state: CompressionState,
                              bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    buffer = bucket.buffer()
    world = state.layout.world
    if state.node_powersgd is not None:
        held = _Bucket(bucket)
        return run_hook(state.background,
                        lambda: node_powersgd_sum(state.node_powersgd, held, state.bytes).div_(world), buffer)
    if state.powersgd is not None:  # torch's hook: a chain of futures of its own
        ps = state.powersgd
        vanilla = ps.iter < ps.start_powerSGD_iter
        before = ps.total_numel_after_compression
        fut = powerSGD_hook(ps, bucket)
        sent = buffer.numel() if vanilla else ps.total_numel_after_compression - before
        state.bytes.add(sent * buffer.element_size(), world, inter=state.layout.nodes > 1, allreduce=True)
        return fut
    hier, index = state.hierarchical, bucket.index()
    if hier is None:
        return run_hook(state.background, lambda: buffer.copy_(_sum_compressed(
            state, buffer, None, world, index, inter=state.layout.nodes > 1)), buffer)
    # only the inter-node step is compressed (and divided: the node sums before it are exact)
    return run_hook(state.background, lambda: hierarchical_sum(hier, buffer, state.bytes, lambda shard: _sum_compressed(
        state, shard, hier.cross_group, hier.layout.nodes, index, inter=True)), buffer)
