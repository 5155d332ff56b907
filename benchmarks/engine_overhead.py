"""Engine step overhead: the engine's training loop against a bare PyTorch loop on the same
model, the same batches already in memory, the same optimizer. Target: ratio <= 1.05."""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np
import torch
from common import interleaved, print_table

from trainers.config import RunConfig, config_from_dict, config_to_dict
from trainers.data.loaders import build_pipeline
from trainers.data.sources import open_source
from trainers.engine import train
from trainers.models import build_model
from trainers.optim import build_optimizer


def make_config(tmp: str, steps_epochs: int, batch: int, resolution: int, width: int) -> RunConfig:
    raw = config_to_dict(RunConfig())
    raw.update(run_dir=tmp, device="cpu")
    raw["data"].update(source="synthetic", synthetic_images=batch * 24, augment="none", flip=False)
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
    batches = list(pipe.train_batches(0, phase.resolution, phase.batch_size))
    model = build_model(cfg.model, 3, cfg.data.synthetic_classes)
    opt = build_optimizer(model, cfg.optimizer)
    loss_fn = torch.nn.CrossEntropyLoss()
    steps = len(batches)
    best = 0.0
    for _ in range(cfg.phases[0].epochs):
        start = time.perf_counter()
        for x, y in batches:
            loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        best = max(best, steps * phase.batch_size / (time.perf_counter() - start))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--resolution", type=int, default=16)
    parser.add_argument("--width", type=int, default=16)
    args = parser.parse_args()
    import logging

    logging.getLogger("tianfeng").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = make_config(tmp, 3, args.batch, args.resolution, args.width)
        rates = interleaved({"bare PyTorch loop": lambda: bare_samples_per_s(cfg),
                             "tianfeng engine": lambda: engine_samples_per_s(cfg)}, args.repeats)
    base = rates["bare PyTorch loop"]
    print_table(f"engine step overhead (resnet_small width {args.width}, {args.resolution}px, "
                f"batch {args.batch}, fp32, CPU; median of {args.repeats})",
                [(name, f"{r:,.0f} img/s", f"{base / r:.3f}") for name, r in rates.items()],
                headers=("loop", "throughput", "time ratio vs bare"))


if __name__ == "__main__":
    main()
