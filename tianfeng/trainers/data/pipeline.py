"""What every batch pipeline shares (`cache`, `torch` and `dali` build on it): the batch type,
the protocol the engine iterates, normalisation statistics, augmentation parameters per step,
the rank's share of the validation split, and the side stream that prepares batches ahead on a
GPU."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from tianfeng.core.run_config import DataConfig
from tianfeng.trainers.data.augment import (
    AugmentSpec,
    batch_generator,
    normalise_and_augment,
    sample_theta,
)
from tianfeng.trainers.data.cache import DecodedSplit, decoded_split, default_cache_dir
from tianfeng.trainers.data.decode import decode_file, resize_array
from tianfeng.trainers.data.order import prefetch, rank_slice
from tianfeng.trainers.data.sources import ImageSource, Split
from tianfeng.trainers.stop_signals import held_while_forking, ignore_in_loader_worker

Batch = tuple[torch.Tensor, torch.Tensor]


class DataPipeline(Protocol):
    source: ImageSource
    train_indices: np.ndarray
    memory_format: torch.memory_format

    def train_batches(self, epoch: int, resolution: int, global_batch: int,
                      start_step: int = 0) -> Iterator[Batch]: ...

    def val_batches(self, resolution: int) -> Iterator[Batch]: ...

    def val_batches_on_every_rank(self) -> int: ...

    def prepare(self, resolutions: list[int]) -> None: ...


STATS_SAMPLE = 1024  # training images decoded for the normalisation statistics (streaming loaders)


class PipelineBase:
    def __init__(self, source: ImageSource, cfg: DataConfig, train_indices: np.ndarray, seed: int,
                 rank: int, world: int, device: torch.device, spec: AugmentSpec) -> None:
        self.source, self.cfg, self.train_indices = source, cfg, train_indices
        self.seed, self.rank, self.world, self.device, self.spec = seed, rank, world, device, spec
        self.cache_dir = Path(cfg.cache_dir) if cfg.cache_dir else default_cache_dir()
        self._stats: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._splits: dict[tuple[str, int], DecodedSplit] = {}
        # the batches' layout: the engine sets the run's once it has chosen it
        self.memory_format = torch.contiguous_format

    def _split(self, name: str, resolution: int) -> DecodedSplit:
        if (name, resolution) not in self._splits:
            self._splits[name, resolution] = decoded_split(self.source, name, resolution, self.cache_dir)
        return self._splits[name, resolution]

    def prepare(self, resolutions: list[int]) -> None:
        """Whatever the pipeline does before the first step (the cache decodes its splits)."""

    def _sample(self, resolution: int, picks: np.ndarray) -> np.ndarray:
        """Training images `picks` at `resolution`, decoded here (the cache pipeline reads them)."""
        dataset = DecodeDataset(self.source.train, resolution, self.source.channels)
        return np.stack([dataset[int(i)][0].numpy() for i in picks])

    def _channel_stats(self, resolution: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """Per-channel mean and std (0..255) of a fixed sample of the training images, the same
        for every loader (so they give the same batches) and no cache needed to compute it."""
        n = len(self.source.train)
        picks = np.linspace(0, n - 1, num=min(n, STATS_SAMPLE), dtype=np.int64)
        images = self._sample(resolution, picks).astype(np.float64)
        return tuple(images.mean(axis=(0, 1, 2))), tuple(images.std(axis=(0, 1, 2)) + 1e-3)

    def _norm(self, resolution: int) -> tuple[torch.Tensor, torch.Tensor]:
        if resolution not in self._stats:
            mean, std = self._channel_stats(resolution)
            self._stats[resolution] = (torch.tensor(mean, dtype=torch.float32, device=self.device),
                                       torch.tensor(std, dtype=torch.float32, device=self.device))
        return self._stats[resolution]

    def _theta(self, epoch: int, step: int, global_batch: int, resolution: int) -> torch.Tensor | None:
        if not self.spec.active:
            return None
        theta = sample_theta(self.spec, global_batch, resolution, batch_generator(self.seed, epoch, step))
        return theta[rank_slice(global_batch, self.rank, self.world)]

    def _finish(self, images: torch.Tensor, labels: torch.Tensor, theta: torch.Tensor | None,
                resolution: int) -> Batch:
        mean, std = self._norm(resolution)
        if self.device.type == "cuda" and images.device.type == "cpu":
            # from pinned memory a host-to-device copy is asynchronous; from pageable memory it is not
            images, labels = images.pin_memory(), labels.pin_memory()
        x = normalise_and_augment(images.to(self.device, non_blocking=True), mean, std, theta,
                                  resolution, self.memory_format)
        return x, labels.to(self.device, non_blocking=True)

    def _ahead(self, batches: Iterator[Batch]) -> Iterator[Batch]:
        # A background thread only pays when the compute is on a GPU: on a CPU it takes cores
        # from the training step itself (35% slower on 2 cores, benchmarks/engine/engine_overhead.py).
        return on_side_stream(batches, self.device) if self.device.type == "cuda" else batches

    def _steps(self, global_batch: int) -> int:
        return len(self.train_indices) // global_batch

    def _val_range(self) -> range:
        """This rank's share of the validation split, in batches of val_batch_size."""
        n = len(self.source.val)
        return range(n * self.rank // self.world, n * (self.rank + 1) // self.world, self.cfg.val_batch_size)

    def val_batches_on_every_rank(self) -> int:
        """How many validation batches every rank reads (the shares differ by a row at most)."""
        return -(-(len(self.source.val) // self.world) // self.cfg.val_batch_size)

    def val_batches(self, resolution: int) -> Iterator[Batch]:
        """Decoded as they are read, by the torch DataLoader (the cache pipeline reads its cache)."""
        rows = self._val_range()
        end = len(self.source.val) * (self.rank + 1) // self.world
        loader = torch.utils.data.DataLoader(
            DecodeDataset(self.source.val, resolution, self.source.channels),
            batch_sampler=[list(range(start, min(start + rows.step, end))) for start in rows],
            num_workers=self.cfg.workers, worker_init_fn=ignore_in_loader_worker, pin_memory=self.device.type == "cuda")
        with held_while_forking():
            batches = iter(loader)  # the workers start here
        return (self._finish(images, labels, None, resolution) for images, labels in batches)


def on_side_stream(batches: Iterator[Batch], device: torch.device) -> Iterator[Batch]:
    """Batches prepared ahead in a thread whose copies and augmentation run on a CUDA stream of
    their own, so they overlap the training step instead of queueing behind it; each batch is
    handed over once its work is done (an event), and marked as used by the compute stream."""
    stream = torch.cuda.Stream(device)

    def produce() -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.cuda.Event]]:
        with torch.cuda.stream(stream):  # this thread's current stream
            for x, y in batches:
                ready = torch.cuda.Event()
                ready.record(stream)
                yield x, y, ready

    for x, y, ready in prefetch(produce()):
        compute = torch.cuda.current_stream(device)
        compute.wait_event(ready)
        x.record_stream(compute)  # the caching allocator must not reuse it before the step ends
        y.record_stream(compute)
        yield x, y


class DecodeDataset(torch.utils.data.Dataset):
    def __init__(self, split: Split, resolution: int, channels: int) -> None:
        self.split, self.resolution, self.channels = split, resolution, channels

    def __len__(self) -> int:
        return len(self.split)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if self.split.files is not None:
            image = decode_file(self.split.files[i], self.resolution, self.channels)
        else:
            image = resize_array(self.split.images[i], self.resolution)
        return torch.from_numpy(image), int(self.split.labels[i])
