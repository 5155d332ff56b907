"""The communication cost model against a hand calculation."""

from __future__ import annotations

import pytest

from tianfeng.costmodel import Cluster, Link, comm_seconds, predict

INTRA = Link(gbit_s=80.0, latency_us=10.0)  # 10 GB/s
INTER = Link(gbit_s=8.0, latency_us=100.0)  # 1 GB/s
MB100 = 100e6


def test_flat_ring_across_nodes_runs_at_the_inter_node_link() -> None:
    c = Cluster(gpus=4, gpus_per_node=2, intra=INTRA, inter=INTER)
    # 2(p-1) alpha + 2(p-1)/p M / B = 6 x 100us + 1.5 x 100MB / 1GB/s
    assert comm_seconds("flat", MB100, c) == pytest.approx(6 * 100e-6 + 1.5 * 0.1)


def test_hierarchical_by_hand() -> None:
    c = Cluster(gpus=4, gpus_per_node=2, intra=INTRA, inter=INTER)
    reduce_scatter = 1 * 10e-6 + 0.5 * MB100 / 10e9  # inside the node
    cross = 2 * 1 * 100e-6 + 2 * 0.5 * (MB100 / 2) / 1e9  # half the gradient between 2 nodes
    assert comm_seconds("hierarchical", MB100, c) == pytest.approx(2 * reduce_scatter + cross)
    fp16_cross = 2 * 100e-6 + (MB100 / 4) / 1e9
    assert comm_seconds("hierarchical+fp16", MB100, c) == pytest.approx(2 * reduce_scatter + fp16_cross)


def test_one_node_and_one_gpu() -> None:
    assert comm_seconds("flat", MB100, Cluster(1, 8)) == 0
    c = Cluster(gpus=8, gpus_per_node=8, intra=INTRA, inter=INTER)
    assert comm_seconds("flat", MB100, c) == pytest.approx(14 * 10e-6 + 2 * 7 / 8 * MB100 / 10e9)


def test_prediction_overlap_and_efficiency() -> None:
    c = Cluster(gpus=4, gpus_per_node=2, intra=INTRA, inter=INTER)
    p = predict("flat", c, grad_bytes=MB100, compute_s=0.1, per_gpu_batch=32, overlap=0.5)
    comm = 6 * 100e-6 + 0.15
    assert p.step_s == pytest.approx(0.1 + comm - 0.05)  # half the compute hides communication
    assert p.efficiency == pytest.approx(0.1 / p.step_s)
    assert p.samples_per_s == pytest.approx(4 * 32 / p.step_s)
