"""Batch pipelines the engine iterates: `cache` (pre-decoded memmap), `torch` (DataLoader + PIL,
decoding every epoch) and `dali` (see dali.py). All follow order.py and augment.py, so they
differ only in how pixels are decoded."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from tianfeng.core.run_config import DataConfig
from tianfeng.trainers.data.augment import (
    AugmentSpec,
)
from tianfeng.trainers.data.cache import default_cache_dir
from tianfeng.trainers.data.order import epoch_order, rank_slice
from tianfeng.trainers.data.pipeline import Batch, DataPipeline, DecodeDataset, PipelineBase
from tianfeng.trainers.data.sources import ImageSource
from tianfeng.trainers.stop_signals import held_while_forking, ignore_in_loader_worker

# Batches gathered and augmented together, up to this many bytes of float pixels: each op then
# runs once for several small batches (its fixed cost once), and the results are the same. Larger
# chunks leave the caches and cost page faults: in the engine at 8 px, 1 thread, data wait was
# 5.4-5.8% one batch at a time, 3.8-4.0% at 2 MiB, 4.4-5.4% at 8 MiB.
CHUNK_BYTES = 2 << 20


def chunk_steps(batch: int, resolution: int, channels: int) -> int:
    """How many steps' batches of `batch` images one chunk holds."""
    return max(1, CHUNK_BYTES // (batch * resolution * resolution * channels * 4))


class CachePipeline(PipelineBase):
    """Batches gathered from the pre-decoded memmap, several small ones at a time (CHUNK_BYTES);
    on a GPU the gather and augmentation run ahead in a background thread."""

    def prepare(self, resolutions: list[int]) -> None:
        """Decode every split the run will need up front, so no epoch pays for it."""
        for resolution in sorted(set(resolutions)):
            for name in ("train", "val"):
                self._split(name, resolution)

    def _sample(self, resolution: int, picks: np.ndarray) -> np.ndarray:
        return np.asarray(self._split("train", resolution).images[picks])

    def val_batches(self, resolution: int) -> Iterator[Batch]:
        split = self._split("val", resolution)
        rows = self._val_range()
        end = len(split) * (self.rank + 1) // self.world

        def produce() -> Iterator[Batch]:
            for start in rows:
                stop = min(start + rows.step, end)
                images = torch.from_numpy(np.array(split.images[start:stop]))
                yield self._finish(images, torch.from_numpy(split.labels[start:stop]), None, resolution)

        return self._ahead(produce())

    def train_batches(self, epoch: int, resolution: int, global_batch: int,
                      start_step: int = 0) -> Iterator[Batch]:
        split = self._split("train", resolution)
        order = epoch_order(self.train_indices, self.seed, epoch)
        mine = rank_slice(global_batch, self.rank, self.world)

        per_chunk = chunk_steps(global_batch // self.world, resolution, self.source.channels)

        def produce() -> Iterator[Batch]:
            steps = range(start_step, self._steps(global_batch))
            for first in range(steps.start, steps.stop, per_chunk):
                chunk = range(first, min(first + per_chunk, steps.stop))
                picks = [order[s * global_batch:(s + 1) * global_batch][mine] for s in chunk]
                idx = np.concatenate(picks)
                thetas = [self._theta(epoch, s, global_batch, resolution) for s in chunk]
                x, y = self._finish(torch.from_numpy(split.images[idx]), torch.from_numpy(split.labels[idx]),
                                    None if thetas[0] is None else torch.cat(thetas), resolution)
                sizes = [len(p) for p in picks]
                yield from zip(x.split(sizes), y.split(sizes), strict=True)

        return self._ahead(produce())


class TorchPipeline(PipelineBase):
    """The conventional path: a DataLoader whose workers decode every image with PIL every epoch."""

    def train_batches(self, epoch: int, resolution: int, global_batch: int,
                      start_step: int = 0) -> Iterator[Batch]:
        order = epoch_order(self.train_indices, self.seed, epoch)
        mine = rank_slice(global_batch, self.rank, self.world)
        steps = range(start_step, self._steps(global_batch))
        sampler = [order[s * global_batch:(s + 1) * global_batch][mine].tolist() for s in steps]
        loader = torch.utils.data.DataLoader(
            DecodeDataset(self.source.train, resolution, self.source.channels),
            batch_sampler=sampler, num_workers=self.cfg.workers, worker_init_fn=ignore_in_loader_worker,
            pin_memory=self.device.type == "cuda")
        with held_while_forking():
            batches = iter(loader)  # the workers start here
        for step, (images, labels) in zip(steps, batches, strict=True):
            yield self._finish(images, labels, self._theta(epoch, step, global_batch, resolution),
                               resolution)


def choose_loader(requested: str, source: ImageSource, cache_dir: Path, resolution: int) -> tuple[str, str]:
    """The loader for `auto`, with the reason: the cache unless it would not fit on disk."""
    if requested != "auto":
        return requested, f"data.loader is {requested}"
    if source.train.files is None:
        return "cache", "the source is in memory"
    need = (len(source.train) + len(source.val)) * resolution**2 * source.channels
    cache_dir.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(cache_dir).free
    if need < 0.8 * free:
        return "cache", f"pre-decoded cache needs {need / 2**30:.2f} GiB at {resolution}px"
    try:
        import nvidia.dali  # noqa: F401
    except ImportError:
        return "torch", f"the cache would need {need / 2**30:.1f} GiB of {free / 2**30:.1f} free and DALI is not installed"
    return "dali", f"the cache would need {need / 2**30:.1f} GiB of {free / 2**30:.1f} GiB free"


def augment_spec(cfg: DataConfig, source: ImageSource, resolution: int) -> AugmentSpec:
    kind = cfg.augment
    if kind == "auto":
        # small images (CIFAR, digits) lose too much to random crops: shift them instead
        kind = "pad_crop" if resolution <= 64 else "random_resized_crop"
    flip = cfg.flip if cfg.flip is not None else not source.key.startswith("digits")
    return AugmentSpec(kind, flip, cfg.min_crop_scale)


def build_pipeline(source: ImageSource, cfg: DataConfig, *, seed: int, train_indices: np.ndarray,
                   resolution: int, rank: int = 0, world: int = 1,
                   device: torch.device | None = None) -> tuple[DataPipeline, str]:
    """The pipeline for `cfg.loader` (resolving `auto`), and a line saying which and why."""
    cache_dir = Path(cfg.cache_dir) if cfg.cache_dir else default_cache_dir()
    kind, reason = choose_loader(cfg.loader, source, cache_dir, resolution)
    args = (source, cfg, train_indices, seed, rank, world, device or torch.device("cpu"),
            augment_spec(cfg, source, resolution))
    if kind == "dali":
        from tianfeng.trainers.data.dali import DaliPipeline

        return DaliPipeline(*args), f"loader dali: {reason}"
    pipeline = CachePipeline(*args) if kind == "cache" else TorchPipeline(*args)
    return pipeline, f"loader {kind}: {reason}"
