"""The pre-decoded cache: each split decoded once to uint8 at a resolution into a memory-mapped
file, keyed by source content and resolution, shared by every epoch, trial and process."""

from __future__ import annotations

import fcntl
import json
import os
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.progress import Progress

from tianfeng.core.cores import usable_cores
from tianfeng.trainers.data.decode import decode_file, resize_array
from tianfeng.trainers.data.sources import ImageSource, Split, default_cache_dir


@dataclass
class DecodedSplit:
    images: np.ndarray  # uint8 (N, R, R, C), usually a read-only memmap
    labels: np.ndarray
    mean: tuple[float, ...]  # per-channel, 0..255, from the training split
    std: tuple[float, ...]

    def __len__(self) -> int:
        return len(self.labels)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _channel_stats(images: np.ndarray) -> tuple[list[float], list[float]]:
    sample = images[:: max(1, len(images) // 5000)].astype(np.float64)
    return sample.mean(axis=(0, 1, 2)).tolist(), (sample.std(axis=(0, 1, 2)) + 1e-3).tolist()


def _decode_into(out: np.ndarray, split: Split, resolution: int, channels: int, label: str) -> None:
    n = len(split)
    show = n >= 2000 and sys.stderr.isatty()
    with Progress(transient=True, disable=not show) as progress:
        task = progress.add_task(f"decoding {label}", total=n)
        if split.images is not None:
            for i in range(n):
                out[i] = resize_array(split.images[i], resolution)
            progress.advance(task, n)
            return
        chunk = 256
        # PIL releases the GIL while decoding, so threads use every core without pickling
        with ThreadPoolExecutor(max_workers=usable_cores()) as pool:
            def work(start: int) -> int:
                for i in range(start, min(start + chunk, n)):
                    out[i] = decode_file(split.files[i], resolution, channels)
                return min(chunk, n - start)

            for done in pool.map(work, range(0, n, chunk)):
                progress.advance(task, done)


def decoded_split(source: ImageSource, split_name: str, resolution: int,
                  cache_dir: Path | None = None) -> DecodedSplit:
    """The split at `resolution`, decoding it into the cache the first time it is asked for."""
    split: Split = getattr(source, split_name)
    if source.synthetic:  # generated in memory; caching random bytes would only cost disk
        images = np.stack([resize_array(im, resolution) for im in split.images])
        mean, std = _channel_stats(images)
        return DecodedSplit(images, split.labels, tuple(mean), tuple(std))
    folder = (cache_dir or default_cache_dir()) / "decoded" / source.key
    stem = folder / f"{split_name}-{resolution}px"
    data_path, meta_path = stem.with_suffix(".u8"), stem.with_suffix(".json")
    with _locked(stem.with_suffix(".lock")):
        if not meta_path.exists():
            shape = (len(split), resolution, resolution, source.channels)
            tmp = stem.with_suffix(f".u8.tmp{os.getpid()}")
            out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.uint8, shape=shape)
            _decode_into(out, split, resolution, source.channels, f"{source.key} {split_name}")
            out.flush()
            mean, std = _channel_stats(out)
            del out
            np.save(stem.with_suffix(".labels.npy"), split.labels)
            os.replace(tmp, data_path)
            meta = {"shape": list(shape), "mean": mean, "std": std, "source": source.key}
            meta_tmp = meta_path.with_suffix(f".json.tmp{os.getpid()}")
            meta_tmp.write_text(json.dumps(meta))
            os.replace(meta_tmp, meta_path)  # the meta file appears last: it marks a complete cache
    meta = json.loads(meta_path.read_text())
    images = np.load(data_path, mmap_mode="r")
    labels = np.load(stem.with_suffix(".labels.npy"))
    return DecodedSplit(images, labels, tuple(meta["mean"]), tuple(meta["std"]))
