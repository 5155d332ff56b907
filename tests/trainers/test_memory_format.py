"""channels_last or contiguous: the same training either way, and `auto` measures once per shape
on a CPU and keeps the answer for later runs."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
import torch

from tianfeng.core.run_config import ModelConfig, load_config
from tianfeng.recipes import DEFAULT_RECIPE
from tianfeng.trainers import memory_format
from tianfeng.trainers.engine import train
from tianfeng.trainers.models import build_model


def test_both_layouts_give_the_same_loss_after_a_few_steps() -> None:
    losses = {}
    for name, fmt in memory_format.FORMATS.items():
        torch.manual_seed(0)
        model = build_model(ModelConfig(width=16), 3, 5).to(memory_format=fmt)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        g = torch.Generator().manual_seed(1)
        losses[name] = []
        for _ in range(5):
            x = torch.randn(32, 3, 16, 16, generator=g).contiguous(memory_format=fmt)
            y = torch.randint(0, 5, (32,), generator=g)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses[name].append(loss.item())
    # the layouts run different convolution kernels: equal to float32 rounding, whatever the CPU
    assert losses["channels_last"] == pytest.approx(losses["contiguous"], rel=1e-3)


def test_the_engine_trains_in_either_layout_and_says_which(tmp_path: Path, caplog) -> None:
    train_losses = {}
    for layout in ("contiguous", "channels_last"):
        cfg = load_config(DEFAULT_RECIPE, [f"run_dir={tmp_path / layout}", "phases.0.epochs=1", "precision.mode=fp32",
                                           f"memory_format={layout}", "noise_scale_every=0"])
        with caplog.at_level("INFO", logger="tianfeng.engine"):
            train_losses[layout] = train(cfg).final.train_loss
        assert f"memory format {layout} (as configured)" in caplog.text
    assert train_losses["channels_last"] == pytest.approx(train_losses["contiguous"], rel=1e-3)


def test_auto_measures_once_per_shape_and_reuses_the_answer(tmp_path: Path, monkeypatch) -> None:
    model = build_model(ModelConfig(width=16, stages=2), 3, 5)
    args = dict(device=torch.device("cpu"), channels=3, resolution=8, batch=16, classes=5,
                autocast=contextlib.nullcontext, cache_dir=tmp_path, key_parts=("resnet_small", 16, 1, 2, "fp32"))
    name, why = memory_format.choose("auto", model, **args)
    assert name in memory_format.FORMATS and why.startswith("measured now")
    cached = json.loads(memory_format.cache_file(tmp_path).read_text())
    assert len(cached) == 1 and next(iter(cached.values()))["format"] == name

    def no_timing(*a, **k):
        raise AssertionError("measured again")

    monkeypatch.setattr(memory_format, "_time_steps", no_timing)
    assert memory_format.choose("auto", model, **args)[0] == name  # from the cache
    assert memory_format.choose("contiguous", model, **args) == ("contiguous", "as configured")
    assert memory_format.choose("auto", model, **{**args, "device": torch.device("cuda")})[0] == "channels_last"
    with pytest.raises(AssertionError, match="measured again"):  # another shape is measured
        memory_format.choose("auto", model, **{**args, "resolution": 12})
    for p in model.parameters():  # the run's own model was only copied
        assert p.is_contiguous()


def test_a_model_whose_shortcut_the_cpu_kernel_cannot_train_in_channels_last_stays_contiguous(
        tmp_path: Path, caplog) -> None:
    """A width-4 ResNet's first downsampling shortcut is a strided 1x1 convolution of 4 input
    channels: oneDNN's weight gradient for it in channels_last corrupts the heap. auto and an
    explicit channels_last both train it contiguous, and say why. Widths 8 and 12 (the proxies of
    widths 16 and 24) are held back too; width 16 is not."""
    narrow = build_model(ModelConfig(width=4, depth=1, stages=2), 1, 10)
    assert "strided 1x1 convolution of 4 input channels" in memory_format.unsafe_channels_last_conv(narrow)
    for width in (8, 12):
        assert f"of {width} input channels" in memory_format.unsafe_channels_last_conv(
            build_model(ModelConfig(width=width, depth=1, stages=3), 3, 10))
    assert memory_format.unsafe_channels_last_conv(build_model(ModelConfig(width=16, depth=1, stages=3), 3, 10)) == ""
    common = dict(device=torch.device("cpu"), channels=1, resolution=8, batch=16, classes=10,
                  autocast=contextlib.nullcontext, cache_dir=tmp_path, key_parts=("narrow",))
    with caplog.at_level("WARNING", logger="tianfeng.engine"):
        for setting in ("auto", "channels_last"):
            name, why = memory_format.choose(setting, narrow, **common)
            assert name == "contiguous" and "oneDNN" in why, (setting, why)
    assert "memory_format channels_last is not used on this CPU" in caplog.text
    assert memory_format.choose("contiguous", narrow, **common)[0] == "contiguous"
    assert not memory_format.cache_file(tmp_path).exists()  # nothing was timed, nothing cached


def test_auto_times_batchnorm_per_emulated_gpu_with_each_gpus_images(tmp_path: Path, monkeypatch) -> None:
    """A model that deals its batch to 512 GPUs of 2 images each is timed on fewer GPUs of 2 images
    (the batch is cut for timing), not on 512 GPUs sharing a cut batch of fewer than one image each."""
    from tianfeng.trainers import per_gpu_bn

    model = per_gpu_bn.convert(build_model(ModelConfig(width=16, stages=2), 3, 5))
    per_gpu_bn.set_groups(model, 512)
    seen = []
    real = memory_format._time_steps

    def recording(probe, fmt, channels, resolution, batch, classes, autocast, bn_groups=0):
        seen.append((batch, bn_groups))
        return real(probe, fmt, channels, resolution, batch, classes, autocast, bn_groups)

    monkeypatch.setattr(memory_format, "_time_steps", recording)
    name, _ = memory_format.choose("auto", model, device=torch.device("cpu"), channels=3, resolution=4, batch=1024,
                                   classes=5, autocast=contextlib.nullcontext, cache_dir=tmp_path,
                                   key_parts=("resnet_small", 16, 1, 2, "fp32"), bn_groups=512)
    assert name in memory_format.FORMATS
    assert seen == [(memory_format.MAX_TIMED_BATCH, memory_format.MAX_TIMED_BATCH // 2)] * 2
    assert next(iter(json.loads(memory_format.cache_file(tmp_path).read_text()))).count(":bn2:") == 1
    assert per_gpu_bn.set_groups(model, 0) > 0  # the run's own model kept its 512 until now


def test_the_narrowest_shortcut_kept_in_channels_last_trains_there_without_corrupting_memory() -> None:
    """The guard's boundary on this CPU: a strided 1x1 convolution of SAFE_SHORTCUT_CHANNELS
    input channels trains in channels_last at two threads and an odd batch (the shape at which 8,
    12 and 15 channels abort), in a process of its own so that a heap corruption fails this test
    and not the suite."""
    import subprocess
    import sys

    code = f"""
import torch
torch.set_num_threads(2)
conv = torch.nn.Conv2d({memory_format.SAFE_SHORTCUT_CHANNELS}, 32, 1, stride=2, bias=False)
conv = conv.to(memory_format=torch.channels_last)
for batch in (77, 231):
    x = torch.randn(batch, {memory_format.SAFE_SHORTCUT_CHANNELS}, 16, 16).contiguous(memory_format=torch.channels_last)
    for _ in range(3):
        conv(x.requires_grad_()).sum().backward()
print("trained")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "trained" in done.stdout, done.stderr[-500:]
