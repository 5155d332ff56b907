"""Gradient accumulation: micro-batches whose weighted gradients add up to the whole batch's, a
noise-scale step measured over them, and the engine's BatchNorm groups of one GPU's micro-batch."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from tests.conftest import make_config
from tianfeng.core.errors import ConfigError
from tianfeng.core.run_config import PrecisionConfig
from tianfeng.trainers.engine import train
from tianfeng.trainers.noise_scale import EpochNoise, accumulated_backward, measured_backward
from tianfeng.trainers.precision import build_precision


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 5))


@pytest.mark.parametrize("chunks", [2, 3, 7])
def test_micro_batches_add_up_to_the_whole_batchs_gradient(chunks: int) -> None:
    x, y = torch.randn(20, 3, 2, 2), torch.randint(0, 5, (20,))
    precision = build_precision(PrecisionConfig(mode="fp32"), torch.device("cpu"))
    whole, parts = _net(), _net()
    nn.functional.cross_entropy(whole(x), y).backward()
    loss = accumulated_backward(parts, nn.functional.cross_entropy, x, y, precision, chunks)
    assert loss.item() == pytest.approx(nn.functional.cross_entropy(whole(x), y).item(), rel=1e-6)
    for a, b in zip(whole.parameters(), parts.parameters(), strict=True):
        assert torch.allclose(a.grad, b.grad, atol=1e-6)


def test_a_noise_scale_step_over_micro_batches_keeps_the_gradient_and_measures_half_the_batch() -> None:
    x, y = torch.randn(20, 3, 2, 2), torch.randint(0, 5, (20,))
    precision = build_precision(PrecisionConfig(mode="fp32"), torch.device("cpu"))
    whole, parts = _net(), _net()
    nn.functional.cross_entropy(whole(x), y).backward()
    noise = EpochNoise(torch.device("cpu"))
    measured_backward(parts, nn.functional.cross_entropy, x, y, precision, list(parts.parameters()), noise, 1,
                      chunks=4)
    for a, b in zip(whole.parameters(), parts.parameters(), strict=True):
        assert torch.allclose(a.grad, b.grad, atol=1e-6)
    # the small batch: the first two of four micro-batches, 10 images; its gradient alone
    half = _net()
    nn.functional.cross_entropy(half(x[:10]), y[:10]).backward()
    small_sq = sum(p.grad.square().sum() for p in half.parameters())
    big_sq = sum(p.grad.square().sum() for p in whole.parameters())
    expected_g2 = (20 * big_sq - 10 * small_sq) / 10
    assert noise.sums[2].item() == 1 and noise.sums[0].item() == pytest.approx(expected_g2.item(), rel=1e-4)


def test_the_engine_accumulates_with_batchnorm_over_a_gpus_micro_batch(tmp_path, caplog) -> None:
    phases = [{"epochs": 1, "resolution": 8, "batch_size": 64}]
    with caplog.at_level("INFO", logger="tianfeng.engine"):
        accumulated = train(make_config(tmp_path / "a", phases=phases, accumulate_steps=2,
                                        distributed={"emulate_gpus": 4}))
    assert "BatchNorm per GPU of 4: groups of 8 images (micro-batches of 2 accumulated)" in caplog.text
    whole = train(make_config(tmp_path / "w", phases=phases, distributed={"emulate_gpus": 4}))
    assert accumulated.status == whole.status == "completed"
    # the same images and steps; BatchNorm over 8 images per GPU instead of 16 changes the training
    assert accumulated.epochs[-1].train_loss != pytest.approx(whole.epochs[-1].train_loss, rel=1e-4)
    with pytest.raises(ConfigError, match=r"phases.0.batch_size: must be at least distributed.emulate_gpus \(16\) "
                                          r"x accumulate_steps \(8\) = 128"):
        train(make_config(tmp_path / "x", phases=phases, accumulate_steps=8, distributed={"emulate_gpus": 16}))


def test_accumulation_without_batchnorm_trains_as_the_whole_batch(tmp_path) -> None:
    """With no per-GPU statistics to change, accumulating is the same optimisation."""
    phases = [{"epochs": 1, "resolution": 8, "batch_size": 64}]
    runs = [train(make_config(tmp_path / str(k), phases=phases, accumulate_steps=k, noise_scale_every=0,
                              data={"augment": "none"}, model={"name": "tests.trainers.test_accumulation:no_norm_net"}))
            for k in (1, 4)]
    assert runs[0].epochs[-1].train_loss == pytest.approx(runs[1].epochs[-1].train_loss, rel=1e-3)  # summation order differs: any CPU, any thread count
    assert runs[0].epochs[-1].val_loss == pytest.approx(runs[1].epochs[-1].val_loss, rel=1e-3)  # summation order differs: any CPU, any thread count


def no_norm_net(num_classes: int, in_channels: int) -> nn.Module:
    torch.manual_seed(1)
    return nn.Sequential(nn.Conv2d(in_channels, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(8, num_classes))




def test_accumulation_is_priced_and_lets_a_batch_beyond_memory_fit(tmp_path) -> None:
    """ResNet-50 at 224 px, 512 per V100 (16 GiB holds 314 mixed): refused whole, fits in two
    micro-batches of 256, and costs a second fixed part per step and an exchange that hides
    behind one micro-batch's backward pass only."""
    from tianfeng.cost.cluster import ClusterSpec
    from tianfeng.cost.walltime import check_memory, predict_wall_time

    phases = [{"epochs": 1, "resolution": 224, "batch_size": 512 * 8}]
    spec = ClusterSpec(gpus=8, gpus_per_node=8, device="v100")

    def cfg(k: int):
        return make_config(tmp_path, model={"name": "resnet50"}, phases=phases, precision={"mode": "bf16"},
                           accumulate_steps=k, noise_scale_every=0)

    with pytest.raises(ConfigError, match=r"phases.0.batch_size: 4096 is 512 images per GPU on 8 GPUs"):
        check_memory(cfg(1), spec, in_channels=3, classes=1000)
    with pytest.raises(ConfigError, match=r"512 images per GPU in 2 micro-batches of 256 on 8 GPUs"):
        check_memory(cfg(2), dataclasses.replace(spec, memory_gib=8), in_channels=3, classes=1000)
    check_memory(cfg(2), spec, in_channels=3, classes=1000)  # fits
    whole, split = (predict_wall_time(cfg(k), spec, train_images=100_000, val_images=1000, classes=1000)
                    for k in (1, 2))
    from tianfeng.cost.walltime import _step_models

    steps = 100_000 // 4096
    model = _step_models(cfg(1), spec, 3, 1000)[224]
    assert split.parts["compute"] - whole.parts["compute"] == pytest.approx(steps * model.fixed_s, rel=1e-9)
    assert split.parts["exchange"] >= whole.parts["exchange"]


def test_accumulation_hides_the_exchange_behind_the_last_micro_batch_only(tmp_path) -> None:
    """Over a slow network (1 Gbit/s between two nodes) the exchange outlasts any backward pass,
    so what it hides is visible: behind one micro-batch of 256 images, not behind both (the
    whole step) and not behind the whole batch of 512 as without accumulation."""
    from tianfeng.cost.cluster import ClusterSpec
    from tianfeng.cost.walltime import _step_models, predict_wall_time

    phases = [{"epochs": 1, "resolution": 224, "batch_size": 512 * 16}]
    spec = ClusterSpec(gpus=16, gpus_per_node=8, device="v100", inter_gbps=1.0)

    def cfg(k: int):
        return make_config(tmp_path, model={"name": "resnet50"}, phases=phases, precision={"mode": "bf16"},
                           accumulate_steps=k, noise_scale_every=0)

    whole, split = (predict_wall_time(cfg(k), spec, train_images=100_000, val_images=1000, classes=1000)
                    for k in (1, 2))
    steps = 100_000 // (512 * 16)
    model = _step_models(cfg(1), spec, 3, 1000)[224]
    # each exposed exchange is the exchange less what the overlapped backward share hides
    hidden_whole, hidden_split = spec.overlap * model.step_s(512), spec.overlap * model.step_s(256)
    assert split.parts["exchange"] - whole.parts["exchange"] == pytest.approx(
        steps * (hidden_whole - hidden_split), rel=1e-9)
    assert split.parts["exchange"] > whole.parts["exchange"] > 0


def test_a_memory_split_trains_as_the_unsplit_run_with_each_gpus_batchnorm(tmp_path, caplog) -> None:
    """Bug: the parts of a micro-batch that this device's memory needs change what BatchNorm sees
    (each part dealt to every emulated GPU, so a GPU's statistics come from half its images):
    split in two, the run trains as the unsplit one, step for step."""
    phases = [{"epochs": 1, "resolution": 8, "batch_size": 64}]
    common = dict(phases=phases, accumulate_steps=2, distributed={"emulate_gpus": 4}, data={"augment": "none"})
    with caplog.at_level("INFO", logger="tianfeng.engine"):
        split = train(make_config(tmp_path / "s", memory_split=2, **common))
    assert "each micro-batch in 2 parts of 2 GPUs' images" in caplog.text
    whole = train(make_config(tmp_path / "w", **common))
    assert split.status == whole.status == "completed"
    for a, b in zip(split.epochs, whole.epochs, strict=True):  # summation order differs: not bit for bit
        assert a.train_loss == pytest.approx(b.train_loss, rel=1e-4)
        assert a.val_loss == pytest.approx(b.val_loss, rel=1e-4)
    with pytest.raises(ConfigError, match=r"memory_split: must divide the GPUs .* \(4\)"):
        train(make_config(tmp_path / "x", memory_split=3, **common))
    with pytest.raises(ConfigError, match=r"memory_split: must divide .* \(1\).*raise accumulate_steps"):
        train(make_config(tmp_path / "y", phases=phases, memory_split=2))


def test_a_split_noise_scale_step_keeps_whole_gpus_in_its_parts_at_an_odd_per_gpu_batch(monkeypatch) -> None:
    """Bug: a measured step re-cut into halves first, so at 15 images per GPU (MLPerf's 540-node
    batch) its parts fell back to plain slices that split GPUs and each updated the running
    statistics. Split in two over 4 GPUs, the parts are GPUs 0-1 and 2-3, the first keeping the
    statistics, and the gradient is still the whole batch's."""
    from tianfeng.trainers.noise_scale import micro_batches

    x, y = torch.randn(60, 3, 2, 2), torch.arange(60) % 5
    parts = micro_batches(x, torch.arange(60), 1, split=2, groups=4)
    assert [p.first for p in parts] == [True, False]
    assert sorted(parts[0].y.tolist()) == [i for i in range(60) if i % 4 in (0, 1)]  # dealt in turn: GPUs 0, 1
    precision = build_precision(PrecisionConfig(mode="fp32"), torch.device("cpu"))
    whole, split = _net(), _net()
    nn.functional.cross_entropy(whole(x), y).backward()
    from tianfeng.trainers import noise_scale

    seen, real = [], noise_scale._chunk_backward
    monkeypatch.setattr(noise_scale, "_chunk_backward",
                        lambda model, loss_fn, parts, *a, **k: seen.extend((len(p.y), p.first) for p in parts)
                        or real(model, loss_fn, parts, *a, **k))
    measured_backward(split, nn.functional.cross_entropy, x, y, precision, list(split.parameters()),
                      EpochNoise(torch.device("cpu")), 1, chunks=1, split=2, groups=4)
    assert seen == [(30, True), (30, False)]  # the parts the step trains: whole GPUs, one keeping statistics
    for a, b in zip(whole.parameters(), split.parameters(), strict=True):
        assert torch.allclose(a.grad, b.grad, atol=1e-6)
