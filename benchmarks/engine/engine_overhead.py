"""Engine step overhead: the engine's training loop against a bare PyTorch loop on the same
model, the same batches already in memory, the same optimizer, the same memory format and the
same compile setting (the layout is the one the engine's `auto` picks for this shape, unless
--memory-format says). Target: ratio <= 1.05. The engine is timed as configured by default
(a noise-scale step every 8 steps) and without those steps, which a bare loop does not do."""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # common.py, one folder up

import numpy as np
import torch
from common import interleaved, print_table

from tianfeng.core.run_config import ModelConfig, RunConfig, config_from_dict, config_to_dict
from tianfeng.trainers import memory_format
from tianfeng.trainers.data.loaders import build_pipeline
from tianfeng.trainers.data.sources import default_cache_dir, open_source
from tianfeng.trainers.engine import train
from tianfeng.trainers.models import build_model
from tianfeng.trainers.optim import build_optimizer


def make_config(tmp: str, steps_epochs: int, batch: int, resolution: int, width: int, layout: str,
                compile_setting: str, noise_scale_every: int = 8, steps: int = 96) -> RunConfig:
    raw = config_to_dict(RunConfig())
    raw.update(run_dir=tmp, device="cpu", memory_format=layout, noise_scale_every=noise_scale_every)
    raw["engine"]["compile"] = compile_setting
    raw["data"].update(source="synthetic", synthetic_images=batch * steps, augment="none", flip=False)
    raw["model"].update(width=width, depth=1, stages=3)
    raw["precision"]["mode"] = "fp32"
    raw["checkpoint"].update(every_epochs=0, resume=False)
    raw["phases"] = [{"epochs": steps_epochs, "resolution": resolution, "batch_size": batch}]
    return config_from_dict(raw, "benchmark")


def engine_samples_per_s(cfg: RunConfig) -> float:
    result = train(cfg)
    return max(m.samples_per_s for m in result.epochs[1:] or result.epochs)  # skip warm-up epoch


def bare_samples_per_s(cfg: RunConfig) -> float:
    """The same model and optimizer fed the very tensors the engine's pipeline yields, made
    beforehand: what is left is forward, backward and step."""
    torch.manual_seed(0)
    phase = cfg.phases[0]
    source = open_source("synthetic", synthetic_images=cfg.data.synthetic_images,
                         synthetic_classes=cfg.data.synthetic_classes, resolution=phase.resolution)
    pipe, _ = build_pipeline(source, cfg.data, seed=0, resolution=phase.resolution,
                             train_indices=np.arange(len(source.train)))
    fmt = memory_format.FORMATS[cfg.memory_format]
    batches = [(x.contiguous(memory_format=fmt), y) for x, y in pipe.train_batches(0, phase.resolution, phase.batch_size)]
    model = build_model(cfg.model, 3, cfg.data.synthetic_classes).to(memory_format=fmt)
    opt = build_optimizer(model, cfg.optimizer)
    forward = torch.compile(model) if cfg.engine.compile == "on" else model
    loss_fn = torch.nn.CrossEntropyLoss()
    steps = len(batches)
    best = 0.0
    for _ in range(cfg.phases[0].epochs):
        start = time.perf_counter()
        for x, y in batches:
            loss = loss_fn(forward(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        best = max(best, steps * phase.batch_size / (time.perf_counter() - start))
    return best


def engine_layout(batch: int, resolution: int, width: int) -> str:
    """The layout the engine's `auto` picks for this shape (measured once, then cached)."""
    model = build_model(ModelConfig(width=width, depth=1, stages=3), 3, 10)
    name, _ = memory_format.choose("auto", model, device=torch.device("cpu"), channels=3, resolution=resolution,
                                   batch=batch, classes=10, autocast=contextlib.nullcontext,
                                   cache_dir=default_cache_dir(), key_parts=("resnet_small", width, 1, 3, "fp32"))
    return name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=96, help="steps per epoch (3 epochs, the first not counted)")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--resolution", type=int, default=16)
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--memory-format", choices=("auto", "channels_last", "contiguous"), default="auto")
    parser.add_argument("--noise-scale-every", type=int, default=RunConfig().noise_scale_every,
                        help="the engine's noise-scale step interval (default: the run config's)")
    parser.add_argument("--compile", choices=("on", "off"), default="off",
                        help="torch.compile in both loops (compiled once, before the timed epochs)")
    args = parser.parse_args()
    import logging

    logging.getLogger("tianfeng").setLevel(logging.WARNING)
    layout = engine_layout(args.batch, args.resolution, args.width) if args.memory_format == "auto" else args.memory_format
    with tempfile.TemporaryDirectory() as tmp:
        shape = (args.batch, args.resolution, args.width, layout, args.compile)
        cfg = make_config(tmp, 3, *shape, noise_scale_every=args.noise_scale_every, steps=args.steps)
        quiet = make_config(tmp, 3, *shape, noise_scale_every=0, steps=args.steps)
        rates = interleaved({"bare PyTorch loop": lambda: bare_samples_per_s(cfg),
                             f"tianfeng engine (noise scale every {args.noise_scale_every} steps)":
                                 lambda: engine_samples_per_s(cfg),
                             "tianfeng engine, no noise-scale steps": lambda: engine_samples_per_s(quiet)},
                            args.repeats)
    base = rates["bare PyTorch loop"]
    print_table(f"engine step overhead (resnet_small width {args.width}, {args.resolution}px, batch {args.batch}, "
                f"fp32, {layout}, compile {args.compile}, CPU; median of {args.repeats})",
                [(name, f"{r:,.0f} img/s", f"{base / r:.3f}") for name, r in rates.items()],
                headers=("loop", "throughput", "time ratio vs bare"))


if __name__ == "__main__":
    main()
