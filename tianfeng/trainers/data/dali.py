"""DALI pipeline for imagefolder sources: DALI's file reader (sharded by rank) and image decoder
(on the GPU where CUDA exists, `device_id=None` CPU-only otherwise), then the same batch
augmentation as the other loaders.

DALI's reader keeps its own shuffled stream, so a resumed epoch skips the batches already seen
rather than replaying the same order: resume is approximate with this loader.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import torch

from tianfeng.core.cores import usable_cores
from tianfeng.core.errors import ConfigError
from tianfeng.trainers.data.pipeline import Batch, PipelineBase


def dali_threads() -> int:
    """This rank's share of the machine's cores: every rank of a node runs its own pipeline."""
    ranks_here = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    return max(1, usable_cores() // ranks_here)


def _build(files: list[str], labels: list[int], batch: int, resolution: int, channels: int,
           rank: int, world: int, seed: int, device: torch.device):
    from nvidia.dali import fn, pipeline_def, types

    gpu = device.type == "cuda"

    @pipeline_def(batch_size=batch, num_threads=dali_threads(),
                  device_id=(device.index or 0) if gpu else None, seed=seed)
    def pipe():
        encoded, label = fn.readers.file(files=files, labels=labels, shard_id=rank,
                                         num_shards=world, random_shuffle=True,
                                         pad_last_batch=True, name="Reader")
        image = fn.decoders.image(encoded, device="mixed" if gpu else "cpu",
                                  output_type=types.RGB if channels == 3 else types.GRAY)
        image = fn.resize(image, resize_shorter=resolution)
        image = fn.crop(image, crop=(resolution, resolution))
        return image, label

    pipeline = pipe()
    pipeline.build()
    return pipeline


class DaliPipeline(PipelineBase):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.source.train.files is None:
            raise ConfigError("", "data.loader", "dali needs an imagefolder:DIR source")
        self._pipes: dict[tuple[int, int], object] = {}

    def _iterator(self, resolution: int, local_batch: int):
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

        key = (resolution, local_batch)
        if key not in self._pipes:
            files = [self.source.train.files[i] for i in self.train_indices]
            labels = self.source.train.labels[self.train_indices].tolist()
            pipe = _build(files, labels, local_batch, resolution, self.source.channels,
                          self.rank, self.world, self.seed, self.device)
            self._pipes[key] = DALIGenericIterator([pipe], ["images", "labels"],
                                                   reader_name="Reader", auto_reset=True,
                                                   last_batch_policy=LastBatchPolicy.DROP)
        return self._pipes[key]

    def _next(self, iterator) -> tuple[torch.Tensor, torch.Tensor]:
        try:
            out = next(iterator)
        except StopIteration:  # the reader's epoch ended; auto_reset started the next one
            out = next(iterator)
        return out[0]["images"], out[0]["labels"].view(-1).long()

    def train_batches(self, epoch: int, resolution: int, global_batch: int,
                      start_step: int = 0) -> Iterator[Batch]:
        iterator = self._iterator(resolution, global_batch // self.world)
        for step in range(self._steps(global_batch)):
            images, labels = self._next(iterator)
            if step < start_step:
                continue
            yield self._finish(images, labels, self._theta(epoch, step, global_batch, resolution),
                               resolution)
