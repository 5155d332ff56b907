"""Hierarchical (2D) allreduce (Jia et al. 2018): reduce-scatter inside each node, allreduce of
each shard across nodes among ranks with the same local rank, all-gather inside the node. Only
1/local_size of the gradient crosses the slow inter-node network from each rank.

No `from __future__ import annotations` here: DDP checks the hooks' annotations at run time."""

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.distributed as dist


@dataclass
class CommBytes:
    """Bytes each rank put into collectives, split by whether the group spans nodes. `payload`
    counts the tensor handed to the collective; `ring` the bytes a ring algorithm sends for it."""
    intra_payload: int = 0
    inter_payload: int = 0
    intra_ring: int = 0
    inter_ring: int = 0
    steps: int = 0

    def add(self, nbytes: int, group_size: int, *, inter: bool, allreduce: bool,
            payload: int | None = None) -> None:
        """`nbytes`: the collective's full buffer (an all-gather's output); `payload`: what this
        rank hands in, when that is less (an all-gather's input)."""
        ring = (2 if allreduce else 1) * (group_size - 1) * nbytes // max(group_size, 1)
        payload = nbytes if payload is None else payload
        if inter:
            self.inter_payload += payload
            self.inter_ring += ring
        else:
            self.intra_payload += payload
            self.intra_ring += ring


@dataclass
class NodeLayout:
    """Ranks grouped into nodes of `local_size` consecutive ranks (torchrun's layout)."""
    world: int
    rank: int
    local_size: int

    @property
    def nodes(self) -> int:
        return self.world // self.local_size

    @property
    def node(self) -> int:
        return self.rank // self.local_size

    @property
    def local_rank(self) -> int:
        return self.rank % self.local_size


class Background:
    """One thread that runs a hook's collectives, bucket after bucket, while autograd goes on
    computing the next buckets' gradients: the hook returns a future at once. One thread, in
    the order DDP calls the hook (bucket order, the same on every rank), so every group sees
    its collectives in the same order on every rank."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def submit(self, work: Callable[[], torch.Tensor], device: torch.device) -> torch.futures.Future[torch.Tensor]:
        fut: torch.futures.Future[torch.Tensor] = torch.futures.Future(
            devices=[device] if device.type == "cuda" else None)
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, daemon=True, name="tianfeng-comm-hook")
            self._thread.start()
        stream = torch.cuda.current_stream(device) if device.type == "cuda" else None
        self._jobs.put((work, fut, stream))
        return fut

    def _run(self) -> None:
        while True:
            work, fut, stream = self._jobs.get()
            try:
                if stream is not None:  # the gradients were written on the caller's stream
                    with torch.cuda.stream(stream):
                        fut.set_result(work())
                else:
                    fut.set_result(work())
            except BaseException as exc:  # noqa: BLE001 - handed to DDP through the future
                fut.set_exception(exc)


@dataclass
class HierarchicalState:
    layout: NodeLayout
    node_group: dist.ProcessGroup
    cross_group: dist.ProcessGroup
    bytes: CommBytes = field(default_factory=CommBytes)
    background: Background | None = field(default_factory=Background)  # None: block in the hook


def build_state(local_size: int) -> HierarchicalState:
    """Create the node and cross-node groups; every rank must call this, in the same order."""
    layout = NodeLayout(dist.get_world_size(), dist.get_rank(), local_size)
    node_group = cross_group = None
    for n in range(layout.nodes):
        group = dist.new_group(list(range(n * local_size, (n + 1) * local_size)))
        if n == layout.node:
            node_group = group
    for local in range(local_size):
        group = dist.new_group([n * local_size + local for n in range(layout.nodes)])
        if local == layout.local_rank:
            cross_group = group
    return HierarchicalState(layout, node_group, cross_group)


def _done(tensor: torch.Tensor) -> torch.futures.Future[torch.Tensor]:
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(tensor)
    return fut


def hierarchical_sum(state: HierarchicalState, buffer: torch.Tensor, tally: CommBytes,
                     cross: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
    """Sum `buffer` over all ranks in place: reduce-scatter inside the node, `cross` (a plain
    allreduce unless given) of this rank's shard across nodes, all-gather inside the node."""
    local, nodes = state.layout.local_size, state.layout.nodes
    n = buffer.numel()
    shard_len = -(-n // local)
    padded = buffer.new_zeros(shard_len * local)
    padded[:n].copy_(buffer)
    shard = buffer.new_empty(shard_len)
    size = buffer.element_size()
    dist.reduce_scatter_single(shard, padded, group=state.node_group)  # inside the node
    tally.add(padded.numel() * size, local, inter=False, allreduce=False)
    if cross is None:
        dist.all_reduce(shard, group=state.cross_group)  # across nodes: 1/local of the gradient
        tally.add(shard.numel() * size, nodes, inter=True, allreduce=True)
    else:
        shard = cross(shard)
    dist.all_gather_into_tensor(padded, shard, group=state.node_group)  # inside the node
    tally.add(padded.numel() * size, local, inter=False, allreduce=False, payload=shard.numel() * size)
    return buffer.copy_(padded[:n])


def run_hook(background: Background | None, work: Callable[[], torch.Tensor],
             buffer: torch.Tensor) -> torch.futures.Future[torch.Tensor]:
    """`work` on the background thread (overlapping the rest of the backward pass), or here."""
    if background is None:
        return _done(work())
    return background.submit(work, buffer.device)


def hierarchical_allreduce_hook(state: HierarchicalState,
                                bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    buffer = bucket.buffer()
    return run_hook(state.background, lambda: hierarchical_sum(state, buffer, state.bytes).div_(state.layout.world),
                    buffer)


@dataclass
class FlatState:
    """The baseline: one allreduce over all ranks, counted like the hierarchical hook."""
    layout: NodeLayout
    bytes: CommBytes = field(default_factory=CommBytes)


def flat_allreduce_hook(state: "FlatState", bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    buffer = bucket.buffer()
    dist.all_reduce(buffer)
    spans_nodes = state.layout.nodes > 1
    state.bytes.add(buffer.numel() * buffer.element_size(), state.layout.world, inter=spans_nodes,
                    allreduce=True)
    return _done(buffer.div_(state.layout.world))
