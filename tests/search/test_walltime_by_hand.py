"""The predicted wall time of a two-node run, every term computed here by hand from the figures
the model cites or states as its assumptions (V100 throughput and its half-peak batch, memory
bandwidth, NVLink and InfiniBand links, DALI's CPU time, start-up and checkpoint figures) and
the model's counted FLOPs, layers and parameters: start-up, compute with its fixed part, the
optimizer's extra passes, the noise-scale steps, the exchange bucket by bucket (NCCL's ring or
tree, whichever is faster) with what overlaps the backward pass, SyncBN's collectives, data-bound
steps, evaluation, checkpoints and GPU-hours. The literals are the model's documented figures:
a change to any of them must show here."""

from __future__ import annotations

import math

import pytest

from tests.conftest import make_config
from tianfeng.core.errors import ConfigError
from tianfeng.cost.cluster import ClusterSpec, checked
from tianfeng.cost.step_time import reference_cost, step_cost
from tianfeng.cost.walltime import loader_images_per_s, predict_wall_time

MIB = 2**20


def _allreduce(nbytes: float, gpus: int, local: int, nodes: int) -> float:
    """NCCL's faster of ring and tree between DGX-1 V100 nodes: NVLink 1,200 Gbit/s and 5 us a hop
    inside, four 100 Gbit/s adapters and 10 us a hop between nodes."""
    intra, network = 1200e9 / 8, 4 * 100e9 / 8
    if nodes == 1:
        ring = 2 * (gpus - 1) * (5e-6 + nbytes / gpus / intra)
        tree = 2 * ((local - 1) * 5e-6 + nbytes / intra)
    else:
        speed = min(intra, network)
        ring = 2 * (gpus - 1) * (10e-6 + nbytes / gpus / speed)
        tree = 2 * ((local - 1) * 5e-6 + math.ceil(math.log2(nodes)) * 10e-6 + nbytes / speed)
    return min(ring, tree)


# 0.01 MiB buckets: the exchange hides behind a third of the backward pass; 0.001 MiB: it needs
# more than a third and less than two, so the noise-scale steps (whose first half keeps its
# gradients local) expose more of it than a plain step does
@pytest.mark.parametrize("bucket_mb", [0.01, 0.001])
def test_a_two_node_prediction_equals_the_hand_calculation(tmp_path, bucket_mb: float) -> None:
    cfg = make_config(tmp_path, phases=[{"epochs": 2, "resolution": 8, "batch_size": 256},
                                        {"epochs": 1, "resolution": 16, "batch_size": 512}],
                      precision={"mode": "bf16"}, distributed={"bucket_mb": bucket_mb, "sync_bn": True},
                      optimizer={"name": "lars", "lr": 0.4}, data={"val_batch_size": 50},
                      checkpoint={"every_epochs": 1, "every_steps": 20}, noise_scale_every=8)
    spec = ClusterSpec(gpus=16, gpus_per_node=8, device="v100", exchange="flat", overlap=2 / 3,
                       cpu_cores_per_gpu=8)
    got = predict_wall_time(cfg, spec, train_images=10_000, val_images=2_000, classes=10)

    # one V100, mixed precision: 1,200 img/s at 256 per GPU, half the peak at 45 per GPU
    image_s = 256 / 1200 / (45 + 256)  # step(b) = fixed + b * image_s, with fixed = 45 * image_s
    fixed_s = 45 * image_s
    ref = reference_cost()  # ResNet-50 at 224 px: the figures' model
    cost = {r: step_cost(cfg.model, r, 3, 10) for r in (8, 16)}
    fixed = {r: fixed_s * cost[r].layers / ref.layers for r in cost}  # launch costs go with layers
    per_image = {r: image_s * cost[r].flops / ref.flops for r in cost}  # work goes with FLOPs
    params = cost[16].params

    # the exchange: fp32 gradients in buckets of bucket_mb over all 16 GPUs; the tree's few hops
    # beat the ring's 15 at these sizes
    grad_bytes = 4 * params
    buckets = math.ceil(grad_bytes / (bucket_mb * MIB))
    one_bucket = _allreduce(grad_bytes / buckets, 16, 8, 2)
    ring_bucket = 2 * 15 * (10e-6 + grad_bytes / buckets / 16 / 50e9)
    assert one_bucket < ring_bucket  # the case exercises NCCL's choice
    comm = buckets * one_bucket
    # LARS streams 7 fp32 passes over the weights where the throughput's SGD streams 5; V100 900 GB/s
    weight_pass = 4 * params / 900e9
    optimizer = 2 * weight_pass
    # SyncBN over the world: per BN layer, mean/var/count forward and two gradients backward
    sync_bn = sum(_allreduce(4 * (2 * c + 1), 16, 8, 2) + _allreduce(4 * 2 * c, 16, 8, 2)
                  for c in cost[16].norm_channels)
    assert len(cost[16].norm_channels) > 2 and sync_bn > 0

    compute_s = optimizer_s = noise_s = exposed_s = sync_s = wait_s = evaluation = 0.0
    val_per_gpu = math.ceil(2000 / 16)
    data_bound = 0
    for epochs, r, batch in ((2, 8, 256), (1, 16, 512)):
        per_epoch = 10_000 // batch
        steps = epochs * per_epoch
        per_gpu = batch // 16
        compute = fixed[r] + per_gpu * per_image[r]
        exposed = max(comm - 2 / 3 * compute, one_bucket)  # all but the last bucket can hide
        busy = compute + optimizer + sync_bn + exposed
        # DALI's CPU part on a V100 (no hardware JPEG decoder): reading and decoding, 6 / 3,293.2 s
        # an image and core (NVIDIA's 6 DALI threads a GPU kept up with 3,293 img/s), 8 cores here
        data = per_gpu * (6 / 3293.2) / 8
        wait = max(0.0, data - busy)
        data_bound += wait > 0
        # every 8th step of each epoch runs in two halves: a second fixed part, two gradient
        # norms, and only the second half's backward (a third of the compute) hides the exchange
        measured = epochs * math.ceil(per_epoch / 8)
        noise = fixed[r] + 2 * weight_pass + (max(comm - 1 / 3 * compute, one_bucket) - exposed)
        compute_s += steps * compute
        optimizer_s += steps * optimizer
        noise_s += measured * noise
        exposed_s += steps * exposed
        sync_s += steps * sync_bn
        wait_s += steps * wait
        # evaluation: a forward pass, a third of a training step's work, in batches of 50
        evaluation += epochs * (math.ceil(val_per_gpu / 50) * fixed[r] + val_per_gpu * per_image[r]) / 3
    # the second phase, twice the images per GPU, waits for data; the first does not
    assert data_bound == 1

    # start-up: 20 s launch, NCCL 2 s + 5 ms per rank, a 5 s autotune per distinct shape (two
    # training shapes, two evaluation shapes)
    startup = 20 + (2 + 0.005 * 16) + 5 * 4
    # checkpoints: 3 epoch ends and every 20th of 97 steps; weights and LARS momentum at 1 GB/s
    checkpoints = (3 + 97 // 20) * 4 * params * 2 / 1e9

    train = compute_s + optimizer_s + noise_s + exposed_s + sync_s + wait_s
    total = startup + train + evaluation + checkpoints
    assert got.steps == 2 * 39 + 19
    expected = {"startup": startup, "compute": compute_s, "optimizer": optimizer_s, "noise_scale": noise_s,
                "exchange": exposed_s, "sync_bn": sync_s, "data_wait": wait_s, "evaluation": evaluation,
                "checkpoints": checkpoints}
    assert got.parts == pytest.approx(expected, rel=1e-9)
    assert got.train_s == pytest.approx(train, rel=1e-9)
    assert got.eval_s == pytest.approx(evaluation, rel=1e-9)
    assert got.seconds == pytest.approx(total, rel=1e-9)
    assert got.gpu_hours == pytest.approx(total * 16 / 3600, rel=1e-9)
    assert got.efficiency == pytest.approx(compute_s / train, rel=1e-9)
    assert len(got.notes) == 1 and "phase 1 is data-bound" in got.notes[0]
    # cases where the overlap matters: the backward pass hides every bucket but the last; or it
    # hides all of it in a plain step and not in a noise-scale step
    compute_16 = fixed[16] + 32 * per_image[16]
    if bucket_mb == 0.01:
        assert comm < 1 / 3 * compute_16 and buckets > 1
    else:
        assert 1 / 3 * compute_16 < comm < 2 / 3 * compute_16
    # and without start-up (a benchmark timed from its first step)
    bare = predict_wall_time(cfg, spec, train_images=10_000, val_images=2_000, classes=10, startup=False)
    assert bare.seconds == pytest.approx(total - startup, rel=1e-9)


def test_a_batchnorm_group_pays_small_allreduces_inside_its_node_only(tmp_path) -> None:
    """sync_bn_group 2 on 16 GPUs (MLPerf's BN_GROUP): per BN layer, the forward statistics and
    the backward gradients, each an allreduce over 2 GPUs on NVLink, never the network. Bug
    caught: the group priced over the world (network hops) or over the node (8 GPUs)."""
    cfg = make_config(tmp_path, phases=[{"epochs": 1, "resolution": 16, "batch_size": 512}],
                      distributed={"sync_bn": True, "sync_bn_group": 2}, noise_scale_every=0)
    spec = ClusterSpec(gpus=16, gpus_per_node=8, device="v100", exchange="flat")
    got = predict_wall_time(cfg, spec, train_images=10_000, val_images=2_000, classes=10)
    channels = step_cost(cfg.model, 16, 3, 10).norm_channels
    per_step = sum(_allreduce(4 * (2 * c + 1), 2, 2, 1) + _allreduce(4 * 2 * c, 2, 2, 1) for c in channels)
    steps = 10_000 // 512  # whole batches: the last partial one is dropped
    assert got.parts["sync_bn"] == pytest.approx(steps * per_step, rel=1e-9)
    world = sum(_allreduce(4 * (2 * c + 1), 16, 8, 2) + _allreduce(4 * 2 * c, 16, 8, 2) for c in channels)
    assert world > 3 * per_step  # what a group saves over the world's statistics


def test_dali_leaves_the_cpu_what_the_hardware_jpeg_decoder_does_not_take(tmp_path) -> None:
    """DALI's CPU time per image and core: reading, plus the share of the decoding the GPU's
    hardware decoder does not take. Both parts from NVIDIA's one-node MLPerf runs at 6 DALI
    threads a GPU: 3,293.2 img/s a GPU with the decoder off (A100), 7,054.7 with 99% on it
    (H100). Bugs caught: the share ignored (H100's MLPerf runs priced as data-bound), DALI's
    default share not applied on a device with a decoder, or applied on one without."""
    decode = (6 / 3293.2 - 6 / 7054.7) / 0.99  # the part a hardware decoder can take
    read = 6 / 7054.7 - 0.01 * decode

    def rate(**kw) -> float:
        return loader_images_per_s(checked(ClusterSpec(gpus=8, cpu_cores_per_gpu=4, **kw), "space.yaml"), 224)

    assert rate(device="v100") == pytest.approx(4 / (read + decode), rel=1e-12)  # no decoder: all on the CPU
    assert rate(device="a100") == pytest.approx(4 / (read + 0.35 * decode), rel=1e-12)  # DALI's default 0.65
    assert rate(device="a100", hw_decoder_load=0.0) == pytest.approx(4 * 3293.2 / 6, rel=1e-12)
    assert rate(device="h100", hw_decoder_load=0.99) == pytest.approx(4 * 7054.7 / 6, rel=1e-12)

    # an 8-GPU H100 run on 6 loader cores a GPU, as NVIDIA's: data-bound with the decoder off
    # (3,293 img/s for the GPU's ~4,900), not at 0.99 (7,055)
    cfg = make_config(tmp_path, phases=[{"epochs": 1, "resolution": 224, "batch_size": 3200}], model={"name": "resnet50"},
                      precision={"mode": "bf16"}, data={"val_batch_size": 250})
    waits = [predict_wall_time(cfg, checked(ClusterSpec(gpus=8, device="h100", cpu_cores_per_gpu=6,
                                                        hw_decoder_load=h), "space.yaml"),
                               train_images=64_000, val_images=1_000, classes=1000).parts["data_wait"]
             for h in (0.0, 0.99)]
    assert waits[0] > 0 and waits[1] == 0

    for bad, says in ((dict(device="v100", hw_decoder_load=0.5), "v100 has no hardware JPEG decoder"),
                      (dict(device="a100", hw_decoder_load=1.5), "must be a number >= 0 and <= 1")):
        with pytest.raises(ConfigError) as err:
            checked(ClusterSpec(**bad), "space.yaml")
        assert err.value.key_path == "cluster.hw_decoder_load" and says in err.value.message
