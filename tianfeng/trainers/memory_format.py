"""Which memory format the model and batches use: channels_last where it is faster.

On GPUs channels_last is the rule (tensor cores want NHWC). On a CPU it depends on the shapes:
measured here, it made a width-16 ResNet at 16 px 1.3-1.4x faster and a width-8 one at 8-12 px
0.83-0.95x as fast. So `auto` on a CPU times a few training steps in each format, once per model,
resolution, per-process batch, precision, thread count and torch version, and keeps the answer
in $TIANFENG_CACHE/memory_format.json for every later run and process.
"""

from __future__ import annotations

import copy
import logging
import time
from pathlib import Path

import torch
from torch import nn

from tianfeng.trainers import per_gpu_bn
from tianfeng.trainers.shared_files import read_json, update_json

log = logging.getLogger("tianfeng.engine")

FORMATS = {"channels_last": torch.channels_last, "contiguous": torch.contiguous_format}
TIMED_STEPS = 3
MAX_TIMED_BATCH = 256  # enough to tell the formats apart; larger batches only take longer


def cache_file(cache_dir: Path) -> Path:
    return cache_dir / "memory_format.json"


def choose(setting: str, model: nn.Module, *, device: torch.device, channels: int, resolution: int, batch: int,
           classes: int, autocast, cache_dir: Path, key_parts: tuple, bn_groups: int = 0) -> tuple[str, str]:
    """(format name, why) for `setting` auto | channels_last | contiguous. `bn_groups`: the GPUs
    the model's per-GPU BatchNorm deals `batch` to (its cost differs between the layouts)."""
    if device.type == "cpu" and setting != "contiguous" and (unsafe := unsafe_channels_last_conv(model)):
        if setting == "channels_last":
            log.warning("memory_format channels_last is not used on this CPU: %s", unsafe)
        return "contiguous", unsafe
    if setting != "auto":
        return setting, "as configured"
    if device.type == "cuda":
        return "channels_last", "GPU: channels_last (NHWC) suits its convolution kernels"
    timed_batch, timed_groups = min(batch, MAX_TIMED_BATCH), 0
    if bn_groups > 1:  # fewer GPUs, each with the run's images, when the batch is cut for timing
        per_gpu = max(1, batch // bn_groups)
        timed_groups = max(1, min(bn_groups, timed_batch // per_gpu))
        timed_batch = timed_groups * per_gpu
        key_parts = (*key_parts, f"bn{per_gpu}")
    key = ":".join(map(str, (device.type, *key_parts, resolution, timed_batch,
                             torch.get_num_threads(), torch.__version__)))
    path = cache_file(cache_dir)
    known = read_json(path)
    if key in known:
        name = known[key]["format"]
        return name, f"measured before on this machine ({known[key]['speedup']:.2f}x for channels_last)"
    timed = {name: _time_steps(model, FORMATS[name], channels, resolution, timed_batch, classes, autocast,
                               timed_groups) for name in ("contiguous", "channels_last")}
    speedup = timed["contiguous"] / timed["channels_last"]
    name = "channels_last" if speedup > 1.0 else "contiguous"
    _write(path, key, {"format": name, "speedup": round(speedup, 3)})
    return name, f"measured now: channels_last {speedup:.2f}x the speed of contiguous on this CPU"


SAFE_SHORTCUT_CHANNELS = 16  # the fewest input channels of a strided 1x1 convolution seen to train safely


def unsafe_channels_last_conv(model: nn.Module) -> str:
    """Why channels_last must not train `model` on a CPU, or "". oneDNN's weight-gradient kernel
    for a strided 1x1 convolution of few input channels in channels_last corrupts the heap
    ("double free or corruption", then SIGABRT), e.g. a narrow ResNet's first downsampling
    shortcut. Seen with torch 2.13.0 and 2.14.1: on an AMD EPYC with AVX2 (Zen 3) at one thread
    for 2 to 6 channels; on one with AVX512 at two threads for 2, 6, 8, 12 and 15 channels with an
    odd batch (77 or 231 images at 16 or 32 px), 3 and 4 passing by chance. 16 to 64 channels
    passed at batches of 17 to 231 and 8 to 32 px, so every such convolution of fewer than 16
    is kept contiguous."""
    for name, m in model.named_modules():
        if (isinstance(m, nn.Conv2d) and m.kernel_size == (1, 1) and max(m.stride) > 1
                and m.in_channels < SAFE_SHORTCUT_CHANNELS):
            return (f"{name or 'the model'} is a strided 1x1 convolution of {m.in_channels} input channels, which "
                    "oneDNN's CPU kernel cannot train in channels_last without corrupting memory")
    return ""


def _time_steps(model: nn.Module, fmt: torch.memory_format, channels: int, resolution: int, batch: int,
                classes: int, autocast, bn_groups: int = 0) -> float:
    """Median seconds of a forward and backward pass on a copy of the model (the run's own model
    and its BatchNorm statistics are not touched)."""
    probe = copy.deepcopy(model).to(memory_format=fmt).train()
    if bn_groups:
        per_gpu_bn.set_groups(probe, bn_groups)
    x = torch.randn(batch, channels, resolution, resolution).contiguous(memory_format=fmt)
    y = torch.randint(0, classes, (batch,))
    times = []
    for i in range(TIMED_STEPS + 1):
        start = time.perf_counter()
        with autocast():
            loss = nn.functional.cross_entropy(probe(x), y)
        loss.backward()
        probe.zero_grad(set_to_none=True)
        if i:  # the first step warms caches and kernels up
            times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]




def _write(path: Path, key: str, value: dict) -> None:
    """Merge one answer into the shared file under a lock (several trials may measure at once)."""
    try:
        update_json(path, lambda known: known.__setitem__(key, value))
    except OSError as exc:  # a read-only cache: measure again next time
        log.warning("cannot keep the memory-format choice in %s: %s", path, exc)
