"""The communication cost model against hand calculations."""

from __future__ import annotations

import math

import pytest

from tianfeng.core.errors import ConfigError
from tianfeng.cost.exchange import Cluster, Link, Phase, comm_seconds, predict, predict_run

INTRA = Link(gbit_s=80.0, latency_us=10.0)  # 10 GB/s per GPU
INTER = Link(gbit_s=8.0, latency_us=100.0)  # 1 GB/s per adapter
MB100 = 100e6
ONE_BUCKET = math.inf


def test_flat_ring_across_nodes_runs_at_the_node_network() -> None:
    c = Cluster(gpus=4, gpus_per_node=2, intra=INTRA, inter=INTER, adapters_per_node=1)
    # 2(p-1) (alpha + M/p / B) = 6 x 100us + 1.5 x 100MB / 1GB/s
    assert comm_seconds("flat", MB100, c, bucket_bytes=ONE_BUCKET) == pytest.approx(6 * 100e-6 + 1.5 * 0.1)
    # two adapters double the node's network; the ring is then bound by it, not by NVLink
    two = Cluster(gpus=4, gpus_per_node=2, intra=INTRA, inter=INTER, adapters_per_node=2)
    assert comm_seconds("flat", MB100, two, bucket_bytes=ONE_BUCKET) == pytest.approx(6 * 100e-6 + 1.5 * 0.05)


def test_in_network_reduction_sends_the_gradient_once_each_way_through_the_adapters() -> None:
    from tianfeng.cost.exchange import allreduce_s, ring_allreduce_s, tree_allreduce_s

    plain = Cluster(gpus=64, gpus_per_node=8, intra=INTRA, inter=INTER, adapters_per_node=1)
    sharp = Cluster(gpus=64, gpus_per_node=8, intra=INTRA, inter=INTER, adapters_per_node=1,
                    in_network_reduction=True)
    inside = 2 * 7 * (10e-6 + MB100 / 8 / 10e9)  # reduce-scatter and all-gather over NVLink
    assert allreduce_s(MB100, sharp) == pytest.approx(inside + 2 * 100e-6 + MB100 / 1e9)
    # ring and tree send the gradient about twice through the adapters: NVLink's share aside,
    # the switch's sum takes half as long
    assert allreduce_s(MB100, plain) == min(ring_allreduce_s(MB100, plain), tree_allreduce_s(MB100, plain))
    assert 1.6 < allreduce_s(MB100, plain) / allreduce_s(MB100, sharp) < 2.0
    # within one node there is no switch to reduce in
    one = Cluster(gpus=8, gpus_per_node=8, intra=INTRA, inter=INTER, in_network_reduction=True)
    assert allreduce_s(MB100, one) == allreduce_s(MB100, Cluster(gpus=8, gpus_per_node=8, intra=INTRA, inter=INTER))


def test_in_network_reduction_is_a_checked_cluster_key() -> None:
    from tianfeng.cost.cluster import read_cluster

    spec = read_cluster("s.yaml", {"gpus": 64, "device": "a100", "in_network_reduction": True})
    assert spec.links().in_network_reduction is True
    with pytest.raises(ConfigError, match="cluster.in_network_reduction: must be true or false; got 'yes'"):
        read_cluster("s.yaml", {"in_network_reduction": "yes"})


def test_hierarchical_rings_share_the_nodes_adapters() -> None:
    c = Cluster(gpus=4, gpus_per_node=2, intra=INTRA, inter=INTER, adapters_per_node=1)
    reduce_scatter = 1 * (10e-6 + (MB100 / 2) / 10e9)  # inside the node
    # two concurrent rings (one per local rank) on 50 MB shards, 0.5 GB/s each through one adapter
    across = 2 * 1 * (100e-6 + (MB100 / 2 / 2) / 0.5e9)
    assert comm_seconds("hierarchical", MB100, c, bucket_bytes=ONE_BUCKET) == pytest.approx(2 * reduce_scatter + across)
    fp16_across = 2 * (100e-6 + (MB100 / 4 / 2) / 0.5e9)
    assert comm_seconds("hierarchical+fp16", MB100, c, bucket_bytes=ONE_BUCKET) == pytest.approx(
        2 * reduce_scatter + fp16_across)
    # an adapter per local rank: each ring gets its own adapter at full speed
    own = Cluster(gpus=4, gpus_per_node=2, intra=INTRA, inter=INTER, adapters_per_node=2)
    assert comm_seconds("hierarchical", MB100, own, bucket_bytes=ONE_BUCKET) == pytest.approx(
        2 * reduce_scatter + 2 * (100e-6 + (MB100 / 4) / 1e9))


def test_latency_is_paid_per_bucket_and_powersgd_exchanges_twice() -> None:
    c = Cluster(gpus=4, gpus_per_node=2, intra=INTRA, inter=INTER, adapters_per_node=1)
    one = comm_seconds("flat", MB100, c, bucket_bytes=ONE_BUCKET)
    four = comm_seconds("flat", MB100, c, bucket_bytes=MB100 / 4)
    assert four - one == pytest.approx(3 * 6 * 100e-6)  # the bandwidth term is the same
    # P then Q: two allreduces of half the compressed bytes each
    ps = comm_seconds("powersgd", MB100, c, bucket_bytes=ONE_BUCKET)
    assert ps == pytest.approx(2 * (6 * 100e-6 + 1.5 * MB100 * 0.05 / 2 / 1e9))


def test_one_node_and_one_gpu() -> None:
    assert comm_seconds("flat", MB100, Cluster(1, 8)) == 0
    c = Cluster(gpus=8, gpus_per_node=8, intra=INTRA, inter=INTER)
    assert comm_seconds("flat", MB100, c, bucket_bytes=ONE_BUCKET) == pytest.approx(
        14 * 10e-6 + 2 * 7 / 8 * MB100 / 10e9)


def test_every_exchange_overlaps_the_backward_pass_but_its_last_bucket() -> None:
    c = Cluster(gpus=4, gpus_per_node=2, intra=INTRA, inter=INTER, adapters_per_node=1)
    comm = 4 * 6 * 100e-6 + 0.15  # 4 buckets of 25 MB
    p = predict("flat", c, grad_bytes=MB100, compute_s=0.3, per_gpu_batch=32, bucket_bytes=MB100 / 4)
    assert p.comm_s == pytest.approx(comm)
    # 2/3 of 0.3 s of backward hides all but the last bucket's exchange
    assert p.step_s == pytest.approx(0.3 + max(comm - 0.2, comm / 4))
    assert p.efficiency == pytest.approx(0.3 / p.step_s)
    assert p.samples_per_s == pytest.approx(4 * 32 / p.step_s)
    # tianfeng's hooks run on a background thread: priced the same way
    hier = predict("hierarchical", c, grad_bytes=MB100, compute_s=0.3, per_gpu_batch=32, bucket_bytes=MB100 / 4)
    assert hier.step_s == pytest.approx(0.3 + max(hier.comm_s - 0.2, hier.comm_s / 4))


def test_every_phase_counts() -> None:
    c = Cluster(gpus=4, gpus_per_node=2, intra=INTRA, inter=INTER, adapters_per_node=1)
    phases = [Phase(steps=100, per_gpu_batch=64, compute_s=0.05), Phase(steps=10, per_gpu_batch=16, compute_s=0.2)]
    run = predict_run("hierarchical", c, grad_bytes=MB100, phases=phases, bucket_bytes=ONE_BUCKET)
    comm = comm_seconds("hierarchical", MB100, c, bucket_bytes=ONE_BUCKET)  # one bucket: nothing hidden
    assert run.run_s == pytest.approx(100 * (0.05 + comm) + 10 * (0.2 + comm))
    assert run.efficiency == pytest.approx((100 * 0.05 + 10 * 0.2) / run.run_s)
    assert run.samples_per_s == pytest.approx(4 * (100 * 64 + 10 * 16) / run.run_s)


def test_plan_prices_resnet50_on_128_v100_with_infiniband(tmp_path, capsys) -> None:
    """plan runs the search's wall-time model: every part, summed; the compute from the given
    throughput with the device's half-peak batch; the memory fit of each GPU count."""
    import json

    from tianfeng.cli import main

    config = tmp_path / "r50.yaml"
    config.write_text("model: {name: resnet50}\nprecision: {mode: fp16}\n"
                      "phases: [{epochs: 90, resolution: 224, batch_size: 4096}]\n")
    assert main(["plan", "--config", str(config), "--gpus", "128", "--gpus-per-node", "8", "--json",
                 "--gpu-images-per-s", "1250"]) == 0
    captured = capsys.readouterr()
    rows = {(r["gpus"], r["variant"]): r for r in json.loads(captured.out)}
    assert "DGX-1" in captured.err  # where the figures come from
    assert set(rows) >= {(g, v) for g in (1, 8, 128) for v in ("flat", "hierarchical", "hierarchical+fp16", "powersgd")}
    for r in rows.values():
        assert r["seconds"] == pytest.approx(sum(r["parts"].values()))
    assert rows[1, "flat"]["parts"]["exchange"] == 0 and rows[1, "flat"]["parts"]["startup"] > 0
    # 1,250 img/s at 256 per V100, half the peak at 45: 32 per GPU take (45 + 32) / (45 + 256) of 256 / 1250 s
    flat = rows[128, "flat"]
    steps = 90 * (1_281_167 // 4096)
    assert flat["parts"]["compute"] == pytest.approx(steps * 256 / 1250 * (45 + 32) / (45 + 256), rel=1e-9)
    assert 0.5 < flat["efficiency"] < 1.0
    assert rows[128, "hierarchical+fp16"]["parts"]["exchange"] < rows[128, "hierarchical"]["parts"]["exchange"]
    # 4,096 images on one 16 GB V100 do not fit; 32 per GPU do
    assert "at most" in rows[1, "flat"]["memory"] and rows[128, "flat"]["memory"] == "fits"
    assert rows[128, "flat"]["parts"]["startup"] > rows[8, "flat"]["parts"]["startup"]  # NCCL grows with ranks


def test_the_python_api_predicts_with_the_same_model_as_plan(tmp_path, capsys) -> None:
    import json

    import tianfeng
    from tianfeng.cli import main

    config = tmp_path / "r50.yaml"
    config.write_text("model: {name: resnet50}\nprecision: {mode: fp16}\n"
                      "phases: [{epochs: 90, resolution: 224, batch_size: 4096}]\n")
    w = tianfeng.predict(config, gpus=128, exchange="hierarchical")
    assert main(["plan", "--config", str(config), "--gpus", "128", "--json"]) == 0
    row = next(r for r in json.loads(capsys.readouterr().out) if r["gpus"] == 128 and r["variant"] == "hierarchical")
    assert w.seconds == pytest.approx(row["seconds"]) and w.parts == pytest.approx(row["parts"])
    with pytest.raises(ConfigError, match="does not fit|at most"):
        tianfeng.predict(config, gpus=8)  # 512 images per 16 GB V100
    with pytest.raises(ConfigError, match="unexpected keyword argument 'bogus'"):
        tianfeng.predict(config, gpus=128, bogus=1)
