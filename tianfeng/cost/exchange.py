"""Communication cost model: alpha-beta times for the collectives each DDP variant runs, against
the compute of every phase of a run, giving step times, samples/s and scaling efficiency.

What it assumes (printed by `tianfeng plan`, stated in the README):
- a node's network adapters are shared by every flow that leaves the node: `adapters_per_node`
  NICs of `inter` speed each, whatever the number of GPUs sending;
- the flat allreduce is NCCL's topology-aware ring (one ring per adapter, entering and leaving
  each node once): its bandwidth term runs at min(per-GPU intra-node speed, the node's network);
  its latency grows with the ring's length, paid once per bucket; or NCCL's tree where that is
  faster (small messages on many nodes: its latency grows with log2(nodes)); or, where the
  network reduces in its switches (`in_network_reduction`: InfiniBand SHARP through NCCL's
  CollNet), a reduce-scatter inside each node, each node's bytes sent once to the switch and the
  sum received once (half the ring's bytes through the adapters), and an all-gather inside;
- the hierarchical variant reduce-scatters inside the node, runs `gpus_per_node` concurrent rings
  between nodes on a 1/G shard each (together the node's whole gradient through the same shared
  adapters: no bandwidth saved, fewer ring steps), then all-gathers inside the node;
- PowerSGD exchanges two factors (P, then Q) per bucket, each an allreduce of its own;
- every variant overlaps the backward pass (about 2/3 of the compute) except for the last
  bucket: DDP's built-in allreduce and torch's PowerSGD hook by design, tianfeng's hierarchical
  and compression hooks because they run their collectives on a background thread and return
  at once (trainers/comm/hierarchical.Background)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Link:
    gbit_s: float  # bandwidth, gigabits per second, one direction
    latency_us: float

    @property
    def alpha_s(self) -> float:
        return self.latency_us * 1e-6

    @property
    def bytes_per_s(self) -> float:
        return self.gbit_s * 1e9 / 8


@dataclass(frozen=True)
class ClusterPreset:
    """A cluster's links, with where each figure comes from."""
    intra: Link  # one GPU into its node's NVLink fabric, one direction
    inter: Link  # one network adapter
    adapters_per_node: int
    source: str


# Latencies are per collective step as NCCL sees them (a few us on NVLink, ~10 us across an
# InfiniBand hop, switches included): assumptions, not datasheet figures.
PRESETS = {
    "v100": ClusterPreset(
        Link(1200.0, 5.0), Link(100.0, 10.0), 4,
        "DGX-1 with V100: 6 NVLink 2.0 links of 25 GB/s per direction per GPU (NVIDIA Tesla V100 "
        "GPU architecture white paper, 2017); four 100 Gbit/s EDR InfiniBand adapters per node "
        "(NVIDIA DGX-1 datasheet)"),
    "a100": ClusterPreset(
        Link(2400.0, 5.0), Link(200.0, 10.0), 8,
        "DGX A100: NVSwitch, 600 GB/s GPU-to-GPU (300 GB/s per direction; NVIDIA A100 Tensor Core "
        "GPU architecture white paper, 2020); eight 200 Gbit/s HDR InfiniBand adapters per node "
        "(NVIDIA DGX A100 datasheet)"),
    "h100": ClusterPreset(
        Link(3600.0, 5.0), Link(400.0, 10.0), 8,
        "DGX H100: fourth-generation NVLink, 900 GB/s per GPU (450 GB/s per direction; NVIDIA H100 "
        "Tensor Core GPU datasheet); eight 400 Gbit/s NDR InfiniBand ConnectX-7 adapters per node "
        "(NVIDIA DGX H100 datasheet)"),
}
DEFAULT_PRESET = "v100"
BACKWARD_SHARE = 2 / 3  # of a step's compute: what an overlapping allreduce can hide behind


@dataclass(frozen=True)
class Cluster:
    gpus: int
    gpus_per_node: int
    intra: Link = PRESETS[DEFAULT_PRESET].intra
    inter: Link = PRESETS[DEFAULT_PRESET].inter
    adapters_per_node: int = PRESETS[DEFAULT_PRESET].adapters_per_node
    in_network_reduction: bool = False  # the switches sum the nodes' gradients (SHARP)

    @property
    def nodes(self) -> int:
        return max(1, math.ceil(self.gpus / self.gpus_per_node))

    @property
    def local(self) -> int:
        return min(self.gpus, self.gpus_per_node)

    @property
    def network_bytes_per_s(self) -> float:
        """What one node can send to the others at once, over all its adapters."""
        return self.adapters_per_node * self.inter.bytes_per_s


def _ring(nbytes: float, ranks: int, bytes_per_s: float, alpha_s: float, halves: int = 2) -> float:
    """A ring allreduce (halves=2) or reduce-scatter / all-gather (halves=1) of `nbytes`."""
    if ranks <= 1:
        return 0.0
    return halves * (ranks - 1) * (alpha_s + nbytes / ranks / bytes_per_s)


def ring_allreduce_s(nbytes: float, c: Cluster) -> float:
    """NCCL's flat ring over every GPU: bound by the slower of a GPU's NVLink and its node's network."""
    if c.nodes == 1:
        return _ring(nbytes, c.gpus, c.intra.bytes_per_s, c.intra.alpha_s)
    speed = min(c.intra.bytes_per_s, c.network_bytes_per_s)
    return _ring(nbytes, c.gpus, speed, c.inter.alpha_s)


def tree_allreduce_s(nbytes: float, c: Cluster) -> float:
    """NCCL's tree: a chain through each node's GPUs and a binary tree across the nodes, reducing
    up and broadcasting down, pipelined: the latency of the path both ways (a few hops across
    nodes where the ring has `gpus`), and the bytes about once each way through the slower link."""
    if c.gpus <= 1:
        return 0.0
    hops = (c.local - 1) * c.intra.alpha_s + math.ceil(math.log2(c.nodes)) * c.inter.alpha_s
    speed = c.intra.bytes_per_s if c.nodes == 1 else min(c.intra.bytes_per_s, c.network_bytes_per_s)
    return 2 * (hops + nbytes / speed)


def in_network_allreduce_s(nbytes: float, c: Cluster) -> float:
    """An allreduce whose sum across nodes the switches compute (SHARP, as NCCL's CollNet uses it;
    Graham et al., Scalable Hierarchical Aggregation Protocol, COMHPC 2016): reduce-scatter in the
    node, each GPU's shard up to the switch and the sum back down (the node's whole gradient once
    each way through its adapters, where a ring sends it twice), all-gather in the node. The
    switch tree's latency is taken as two network hops: an assumption, not a datasheet figure."""
    if c.nodes == 1 or not c.in_network_reduction:
        return math.inf
    inside = 2 * _ring(nbytes, c.local, c.intra.bytes_per_s, c.intra.alpha_s, halves=1)
    return inside + 2 * c.inter.alpha_s + nbytes / c.network_bytes_per_s


def allreduce_s(nbytes: float, c: Cluster) -> float:
    """A flat allreduce as NCCL runs it: ring, tree or (where the network has it) in-network
    reduction, whichever is faster for this size (NCCL's tuner chooses by the same kind of
    latency and bandwidth estimate, per message size)."""
    return min(ring_allreduce_s(nbytes, c), tree_allreduce_s(nbytes, c), in_network_allreduce_s(nbytes, c))


def hierarchical_s(nbytes: float, c: Cluster, inter_fraction: float = 1.0) -> float:
    """Reduce-scatter in the node, G concurrent rings between nodes sharing the adapters (each on
    a 1/G shard, `inter_fraction` of it sent: 0.5 for fp16), all-gather in the node."""
    inside = 2 * _ring(nbytes, c.local, c.intra.bytes_per_s, c.intra.alpha_s, halves=1)
    flows = c.local  # one ring per local rank, all leaving through the node's adapters
    per_flow = min(c.inter.bytes_per_s, c.network_bytes_per_s / flows)
    across = _ring(nbytes / c.local * inter_fraction, c.nodes, per_flow, c.inter.alpha_s)
    return inside + across


VARIANTS = ("flat", "hierarchical", "hierarchical+fp16", "powersgd")
OVERLAPS = {"flat": True, "powersgd": True, "hierarchical": True, "hierarchical+fp16": True}  # see the module doc


def comm_seconds(variant: str, grad_bytes: float, c: Cluster, *, bucket_bytes: float = 25 * 2**20,
                 powersgd_ratio: float = 0.05) -> float:
    """One step's gradient exchange, bucket by bucket (each bucket pays the latency terms)."""
    if c.gpus <= 1:
        return 0.0
    buckets = max(1, math.ceil(grad_bytes / bucket_bytes))
    bucket = grad_bytes / buckets
    if variant == "flat":
        return buckets * allreduce_s(bucket, c)
    if variant == "powersgd":  # P and Q: two allreduces, splitting the compressed bytes
        return buckets * 2 * allreduce_s(bucket * powersgd_ratio / 2, c)
    if variant in ("hierarchical", "hierarchical+fp16"):
        return buckets * hierarchical_s(bucket, c, 0.5 if variant == "hierarchical+fp16" else 1.0)
    raise ValueError(f"unknown variant {variant!r}; allowed: {', '.join(VARIANTS)}")


@dataclass(frozen=True)
class Prediction:
    variant: str
    gpus: int
    step_s: float  # of the last phase
    comm_s: float  # of the last phase
    samples_per_s: float  # over the whole run
    efficiency: float  # compute time / wall time, over the whole run
    run_s: float = 0.0  # the whole run's training time


@dataclass(frozen=True)
class Phase:
    steps: int
    per_gpu_batch: int
    compute_s: float  # one step's forward and backward on one GPU


def step_seconds(variant: str, c: Cluster, *, grad_bytes: float, compute_s: float,
                 bucket_bytes: float = 25 * 2**20, backward_share: float = BACKWARD_SHARE) -> tuple[float, float]:
    """(step time, its exchange time): an overlapping variant hides its exchange behind the
    backward pass except the last bucket's; a blocking one hides nothing."""
    comm = comm_seconds(variant, grad_bytes, c, bucket_bytes=bucket_bytes)
    if not OVERLAPS[variant]:
        return compute_s + comm, comm
    last_bucket = comm / max(1, math.ceil(grad_bytes / bucket_bytes))
    exposed = max(comm - backward_share * compute_s, last_bucket)
    return compute_s + exposed, comm


def predict_run(variant: str, c: Cluster, *, grad_bytes: float, phases: list[Phase],
                bucket_bytes: float = 25 * 2**20, backward_share: float = BACKWARD_SHARE) -> Prediction:
    """Every phase's steps at its own per-GPU batch and compute time."""
    total = compute = samples = 0.0
    step = comm = 0.0
    for p in phases:
        step, comm = step_seconds(variant, c, grad_bytes=grad_bytes, compute_s=p.compute_s,
                                  bucket_bytes=bucket_bytes, backward_share=backward_share)
        total += p.steps * step
        compute += p.steps * p.compute_s
        samples += p.steps * p.per_gpu_batch * c.gpus
    return Prediction(variant, c.gpus, step, comm, samples / total, compute / total, total)


def predict(variant: str, c: Cluster, *, grad_bytes: float, compute_s: float, per_gpu_batch: int,
            bucket_bytes: float = 25 * 2**20) -> Prediction:
    """One phase, per step."""
    return predict_run(variant, c, grad_bytes=grad_bytes, phases=[Phase(1, per_gpu_batch, compute_s)],
                       bucket_bytes=bucket_bytes)
