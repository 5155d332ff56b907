"""Communication cost model: alpha-beta times for the ring collectives each DDP variant runs,
with separate intra-node and inter-node links, against a compute time per step, giving step
time, samples/s and scaling efficiency at several GPU counts.

Assumptions (stated in the README and printed by `tianfeng plan`): a ring's bandwidth term is
bound by its slowest link, so a flat ring spanning nodes runs at the inter-node speed; the
hierarchical variant sends 1/G of the gradient between nodes; compression shrinks only what it
compresses; communication overlaps `overlap` of the backward pass."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Link:
    gbit_s: float  # bandwidth, gigabits per second
    latency_us: float

    @property
    def alpha_s(self) -> float:
        return self.latency_us * 1e-6

    @property
    def beta_s_per_byte(self) -> float:
        return 8 / (self.gbit_s * 1e9)


# NVLink inside a DGX-1-class node; the 25 Gbit/s Ethernet between nodes of the records' clusters
NVLINK = Link(gbit_s=800.0, latency_us=5.0)
ETHERNET_25G = Link(gbit_s=25.0, latency_us=15.0)


def ring_allreduce_s(nbytes: float, ranks: int, link: Link) -> float:
    if ranks <= 1:
        return 0.0
    return 2 * (ranks - 1) * link.alpha_s + 2 * (ranks - 1) / ranks * nbytes * link.beta_s_per_byte


def ring_half_s(nbytes: float, ranks: int, link: Link) -> float:
    """Reduce-scatter or all-gather: half of a ring allreduce."""
    if ranks <= 1:
        return 0.0
    return (ranks - 1) * link.alpha_s + (ranks - 1) / ranks * nbytes * link.beta_s_per_byte


@dataclass(frozen=True)
class Cluster:
    gpus: int
    gpus_per_node: int
    intra: Link = NVLINK
    inter: Link = ETHERNET_25G

    @property
    def nodes(self) -> int:
        return max(1, self.gpus // self.gpus_per_node)

    @property
    def local(self) -> int:
        return min(self.gpus, self.gpus_per_node)


def comm_seconds(variant: str, grad_bytes: float, c: Cluster, *, powersgd_ratio: float = 0.05) -> float:
    """One step's gradient exchange. Variants: flat, hierarchical, hierarchical+fp16, powersgd."""
    if c.gpus <= 1:
        return 0.0
    if variant == "flat":
        link = c.inter if c.nodes > 1 else c.intra
        return ring_allreduce_s(grad_bytes, c.gpus, link)
    if variant == "powersgd":  # flat ring over the compressed factors
        link = c.inter if c.nodes > 1 else c.intra
        return ring_allreduce_s(grad_bytes * powersgd_ratio, c.gpus, link)
    inter_bytes = grad_bytes / c.local * (0.5 if variant == "hierarchical+fp16" else 1.0)
    return (2 * ring_half_s(grad_bytes, c.local, c.intra)
            + ring_allreduce_s(inter_bytes, c.nodes, c.inter))


@dataclass(frozen=True)
class Prediction:
    variant: str
    gpus: int
    step_s: float
    comm_s: float
    samples_per_s: float
    efficiency: float


def predict(variant: str, c: Cluster, *, grad_bytes: float, compute_s: float, per_gpu_batch: int,
            overlap: float = 0.7) -> Prediction:
    comm = comm_seconds(variant, grad_bytes, c)
    exposed = max(comm - overlap * compute_s, (1 - overlap) * comm)
    step = compute_s + exposed
    return Prediction(variant, c.gpus, step, comm, c.gpus * per_gpu_batch / step, compute_s / step)


VARIANTS = ("flat", "hierarchical", "hierarchical+fp16", "powersgd")
