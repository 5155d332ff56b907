"""PowerSGD on the inter-node step only (Vogels et al. 2019, composed with the hierarchical hook).

The ranks of a node first sum their gradients over the fast intra-node link. Each local rank then
owns a share of the bucket's tensors and runs rank-r PowerSGD on them with its peers of the same
local rank on the other nodes, so each rank sends about 1/local_size of what flat PowerSGD sends
across nodes. The node then shares the results. torch's powerSGD_hook compresses a whole bucket
over one process group, so it cannot split the work across a node's ranks this way.

Error feedback and warm start follow torch's hook: the error is what this node fed in minus its
share of the decompressed sum, and the Q factors are reused from the previous step.

No `from __future__ import annotations` here: DDP checks the hooks' annotations at run time."""

from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from tianfeng.trainers.comm.hierarchical import CommBytes, HierarchicalState, hierarchical_sum

MIN_RATE = 2.0  # compress a matrix only when that sends at most half its entries (torch's rule)


@dataclass
class NodePowerSGDState:
    hierarchical: HierarchicalState
    rank: int = 4
    start_step: int = 10  # the hierarchical allreduce, uncompressed, before this step
    min_rate: float = MIN_RATE
    step: int = 0
    q: dict[tuple[int, int], torch.Tensor] = field(default_factory=dict)  # warm start
    error: dict[tuple[int, int], torch.Tensor] = field(default_factory=dict)  # error feedback
    # per bucket: its gradient shapes, and each tensor's (owning local rank, compression rank)
    plans: dict[int, tuple[tuple[torch.Size, ...], list[tuple[int, int]]]] = field(default_factory=dict)


def _views(bucket: dist.GradBucket, buffer: torch.Tensor) -> list[torch.Tensor]:
    """The bucket's gradients as views of its flat buffer, in parameter order."""
    views, offset = [], 0
    for p in bucket.parameters():
        views.append(buffer[offset:offset + p.numel()].view(p.shape))
        offset += p.numel()
    return views


def owners(sizes: list[int], local_size: int) -> list[int]:
    """The local rank that handles each tensor: the costliest first, each to the least loaded rank.
    `sizes` are what each tensor sends (its factors when compressed), which keeps the ranks'
    inter-node bytes even."""
    load = [0] * local_size
    owner = [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        r = min(range(local_size), key=lambda r: (load[r], r))
        owner[i] = r
        load[r] += sizes[i]
    return owner


def _matrix_rank(t: torch.Tensor, rank: int, min_rate: float) -> int:
    """The rank to compress `t` at, or 0 to send it as it is."""
    if t.dim() < 2:
        return 0
    n, m = t.shape[0], t.numel() // t.shape[0]
    r = min(rank, n, m)
    return r if r * (n + m) * min_rate <= n * m else 0


def _plan(state: NodePowerSGDState, bucket_index: int, grads: list[torch.Tensor]) -> list[tuple[int, int]]:
    """Each tensor's (owning local rank, compression rank), worked out once per bucket layout:
    ownership is balanced by what each tensor sends (its P and Q factors, or itself)."""
    shapes = tuple(g.shape for g in grads)
    cached = state.plans.get(bucket_index)
    if cached is not None and cached[0] == shapes:
        return cached[1]
    ranks = [_matrix_rank(g, state.rank, state.min_rate) for g in grads]
    sent = [r * (g.shape[0] + g.numel() // g.shape[0]) if r else g.numel() for g, r in zip(grads, ranks, strict=True)]
    plan = list(zip(owners(sent, state.hierarchical.layout.local_size), ranks, strict=True))
    state.plans[bucket_index] = (shapes, plan)
    return plan


def _initial_q(key: tuple[int, int], m: int, r: int, like: torch.Tensor) -> torch.Tensor:
    # the same on every node: each node's P must use the same Q for their sum to be meaningful
    gen = torch.Generator().manual_seed(1_000_003 * key[0] + key[1])
    return torch.randn(m, r, generator=gen).to(like)


def _cross_sum(state: NodePowerSGDState, tally: CommBytes, parts: list[torch.Tensor]) -> list[torch.Tensor]:
    """Sum the tensors over the nodes (one allreduce of their concatenation)."""
    if not parts:
        return []
    flat = torch.cat([p.reshape(-1) for p in parts])
    dist.all_reduce(flat, group=state.hierarchical.cross_group)
    tally.add(flat.numel() * flat.element_size(), state.hierarchical.layout.nodes, inter=True, allreduce=True)
    return [chunk.view_as(p) for chunk, p in zip(flat.split([p.numel() for p in parts]), parts, strict=True)]


def _intra_sum(state: NodePowerSGDState, tally: CommBytes, tensor: torch.Tensor) -> None:
    dist.all_reduce(tensor, group=state.hierarchical.node_group)
    tally.add(tensor.numel() * tensor.element_size(), state.hierarchical.layout.local_size, inter=False,
              allreduce=True)


def _compress_owned(state: NodePowerSGDState, tally: CommBytes, bucket_index: int,
                    grads: list[torch.Tensor], mine: list[tuple[int, int]]) -> None:
    """Replace the owned node-summed gradients (index, compression rank) by the (approximate)
    global sums, in place."""
    nodes = state.hierarchical.layout.nodes
    matrices = [(i, r) for i, r in mine if r]
    plain = [(i, r) for i, r in mine if not r]
    inputs = {}
    for i, r in matrices:
        key = (bucket_index, i)
        m = grads[i].view(grads[i].shape[0], -1)
        if key in state.error:
            m.add_(state.error[key])
        inputs[i] = m.clone()
        if key not in state.q:
            state.q[key] = _initial_q(key, m.shape[1], r, m)
    ps = [grads[i].view(grads[i].shape[0], -1) @ state.q[(bucket_index, i)] for i, _ in matrices]
    summed = _cross_sum(state, tally, ps + [grads[i] for i, _ in plain])
    for (i, _), total in zip(plain, summed[len(ps):], strict=True):
        grads[i].copy_(total)
    ps = [torch.linalg.qr(p).Q for p in summed[:len(ps)]]
    qs = _cross_sum(state, tally, [inputs[i].t() @ p for (i, _), p in zip(matrices, ps, strict=True)])
    for (i, _), p, q in zip(matrices, ps, qs, strict=True):
        key = (bucket_index, i)
        state.q[key] = q
        approx = p @ q.t()  # the sum over nodes, projected on P
        state.error[key] = inputs[i] - approx / nodes
        grads[i].view_as(approx).copy_(approx)


def node_powersgd_sum(state: NodePowerSGDState, bucket: dist.GradBucket, tally: CommBytes) -> torch.Tensor:
    """The bucket summed over all ranks (approximately, once compression starts), in place."""
    hier = state.hierarchical
    buffer = bucket.buffer()
    compress = state.step >= state.start_step
    if bucket.is_last():
        state.step += 1
    if not compress:
        return hierarchical_sum(hier, buffer, tally)
    _intra_sum(state, tally, buffer)
    grads = _views(bucket, buffer)
    plan = _plan(state, bucket.index(), grads)
    me = hier.layout.local_rank
    _compress_owned(state, tally, bucket.index(), grads, [(i, r) for i, (o, r) in enumerate(plan) if o == me])
    for i, (o, _) in enumerate(plan):  # the node shares the results: each rank adds only its own
        if o != me:
            grads[i].zero_()
    _intra_sum(state, tally, buffer)
    return buffer
