"""Which images each rank sees at each step: one seeded permutation per epoch, cut into global
batches, each dealt to the ranks in turn (image i of a global batch to rank i mod W). Every loader
follows it, so a world of W ranks sees exactly the batches that one process with the same global
batch would, and one process that emulates W GPUs' BatchNorm (`per_gpu_bn`, which deals the same
way) normalises exactly the images each rank would."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import TypeVar

import numpy as np

T = TypeVar("T")


def epoch_order(indices: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch]).permutation(indices)


def rank_slice(global_batch: int, rank: int, world: int) -> slice:
    """Rank `rank`'s images of a global batch: every `world`-th from its own; a remainder of
    fewer than `world` images is dropped."""
    return slice(rank, world * (global_batch // world), world)


def prefetch(items: Iterator[T], depth: int = 2) -> Iterator[T]:
    """Run `items` in a background thread, `depth` ahead; errors re-raise in the consumer."""
    out: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def produce() -> None:
        try:
            for item in items:
                while not stop.is_set():
                    try:
                        out.put((None, item), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            out.put((None, done))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            out.put((exc, None))

    thread = threading.Thread(target=produce, daemon=True, name="tianfeng-prefetch")
    thread.start()
    try:
        while True:
            error, item = out.get()
            if error is not None:
                raise error
            if item is done:
                return
            yield item
    finally:
        stop.set()
        thread.join(timeout=5)
