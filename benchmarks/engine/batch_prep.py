"""Batch preparation from the pre-decoded cache (gather, normalise, pad-crop and flip, layout):
the pipeline as it was before (one batch at a time, grid_sample, then the conversion to the run's
memory format) against today's (small batches in chunks, a whole-pixel gather into channels_last),
on the same images and draws, at the proxy's shapes, with 1 and 2 threads. Prints microseconds per
image and the speed-up. The engine's data-wait share is what this buys: see search_speed.py."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # common.py, one folder up

import numpy as np
import torch
from common import interleaved, print_table, timed

from tianfeng.core.run_config import DataConfig
from tianfeng.trainers.data import loaders
from tianfeng.trainers.data.augment import augment, to_normalised
from tianfeng.trainers.data.loaders import build_pipeline
from tianfeng.trainers.data.order import epoch_order
from tianfeng.trainers.data.sources import synthetic_source

CASES = ((8, 256), (8, 2048), (16, 256), (16, 1024))  # (resolution, batch)


def epoch_before(pipe, epoch: int, resolution: int, batch: int, layout: torch.memory_format) -> int:
    """The cache pipeline's epoch before chunks and the gather (its code kept here)."""
    split = pipe._split("train", resolution)
    order = epoch_order(pipe.train_indices, pipe.seed, epoch)
    mean, std = pipe._norm(resolution)
    for step in range(pipe._steps(batch)):
        idx = order[step * batch:(step + 1) * batch]
        images = torch.from_numpy(split.images[idx])
        x = augment(to_normalised(images, mean, std), pipe._theta(epoch, step, batch, resolution), resolution)
        x.contiguous(memory_format=layout)
    return pipe._steps(batch)


def epoch_now(pipe, epoch: int, resolution: int, batch: int, layout: torch.memory_format) -> int:
    pipe.memory_format = layout
    return sum(1 for _ in pipe.train_batches(epoch, resolution, batch))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=12288, help="training images per epoch")
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    largest = max(batch for _, batch in CASES)
    if args.images < largest:
        parser.error(f"--images must be at least the largest batch timed ({largest}): an epoch is whole batches; "
                     f"got {args.images}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            for resolution, batch in CASES:
                source = synthetic_source(args.images, 10, resolution)
                cfg = DataConfig(source="synthetic", loader="cache", cache_dir=str(Path(tmp) / "cache"))
                pipe, _ = build_pipeline(source, cfg, seed=0, train_indices=np.arange(args.images),
                                         resolution=resolution)
                pipe.prepare([resolution])
                images = pipe._steps(batch) * batch
                for name, layout in (("channels_last", torch.channels_last), ("contiguous", torch.contiguous_format)):
                    run = (pipe, 1, resolution, batch, layout)
                    variants = {
                        "before": lambda run=run: timed(lambda: epoch_before(*run)),
                        "now": lambda run=run: timed(lambda: epoch_now(*run)),
                    }
                    t = interleaved(variants, args.repeats)
                    chunk = loaders.chunk_steps(batch, resolution, 3)
                    rows.append((f"{threads}", f"{resolution} px", f"{batch}", name, f"{chunk}",
                                 f"{1e6 * t['before'] / images:.2f}", f"{1e6 * t['now'] / images:.2f}",
                                 f"{t['before'] / t['now']:.2f}x"))
    print_table("batch preparation, microseconds per image (median of interleaved epochs; speed-up of today's "
                "pipeline over the one before)", rows,
                headers=("threads", "res", "batch", "layout", "steps/chunk", "before", "now", "speed-up"))


if __name__ == "__main__":
    main()
