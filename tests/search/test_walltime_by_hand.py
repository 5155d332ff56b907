"""The predicted wall time of a two-node run, every term computed here by hand from the published
figures the model cites (V100 throughput and its half-peak batch, NVLink and InfiniBand links)
and the model's counted FLOPs, layers and parameters: compute with its fixed part, the exchange
bucket by bucket with what overlaps the backward pass, evaluation, GPU-hours."""

from __future__ import annotations

import math

import pytest

from tests.conftest import make_config
from tianfeng.search.cluster import ClusterSpec
from tianfeng.search.walltime import predict_wall_time
from tianfeng.throughput import reference_cost, step_cost


def test_a_two_node_prediction_equals_the_hand_calculation(tmp_path) -> None:
    cfg = make_config(tmp_path, phases=[{"epochs": 2, "resolution": 8, "batch_size": 256},
                                        {"epochs": 1, "resolution": 16, "batch_size": 512}],
                      precision={"mode": "bf16"}, distributed={"bucket_mb": 0.01},
                      data={"val_batch_size": 50})
    spec = ClusterSpec(gpus=16, gpus_per_node=8, device="v100", exchange="flat", overlap=2 / 3)
    got = predict_wall_time(cfg, spec, train_images=10_000, val_images=2_000, classes=10)

    # one V100, mixed precision: 1,200 img/s at 256 per GPU, half the peak at 45 per GPU
    step_256 = 256 / 1200
    image_s = step_256 / (45 + 256)  # step(b) = fixed + b * image_s, with fixed = 45 * image_s
    fixed_s = 45 * image_s
    ref = reference_cost()  # ResNet-50 at 224 px: the figures' model
    cost = {r: step_cost(cfg.model, r, 3, 10) for r in (8, 16)}
    fixed = {r: fixed_s * cost[r].layers / ref.layers for r in cost}  # launch costs go with layers
    per_image = {r: image_s * cost[r].flops / ref.flops for r in cost}  # work goes with FLOPs

    # the exchange: fp32 gradients in buckets of 0.01 MiB, a flat ring over all 16 GPUs, as fast
    # as the slower of NVLink (1,200 Gbit/s) and the node's four 100 Gbit/s adapters, 10 us a hop
    grad_bytes = 4 * cost[16].params
    buckets = math.ceil(grad_bytes / (0.01 * 2**20))
    bucket = grad_bytes / buckets
    speed = min(1200e9 / 8, 4 * 100e9 / 8)
    one_bucket = 2 * 15 * (10e-6 + bucket / 16 / speed)
    comm = buckets * one_bucket

    train = compute_total = 0.0
    evaluation = 0.0
    val_per_gpu = math.ceil(2000 / 16)
    for epochs, r, batch in ((2, 8, 256), (1, 16, 512)):
        steps = epochs * (10_000 // batch)
        compute = fixed[r] + batch // 16 * per_image[r]
        exposed = max(comm - 2 / 3 * compute, one_bucket)  # all but the last bucket can hide
        train += steps * (compute + exposed)
        compute_total += steps * compute
        # evaluation: a forward pass, a third of a training step's work, in batches of 50
        evaluation += epochs * (math.ceil(val_per_gpu / 50) * fixed[r] + val_per_gpu * per_image[r]) / 3

    assert got.steps == 2 * 39 + 19
    assert got.train_s == pytest.approx(train, rel=1e-9)
    assert got.eval_s == pytest.approx(evaluation, rel=1e-9)
    assert got.seconds == pytest.approx(train + evaluation, rel=1e-9)
    assert got.gpu_hours == pytest.approx((train + evaluation) * 16 / 3600, rel=1e-9)
    assert got.efficiency == pytest.approx(compute_total / train, rel=1e-9)
    # a case where the overlap matters: the backward pass hides every bucket but the last
    assert comm < 2 / 3 * (fixed[8] + 16 * per_image[8]) and buckets > 1
