"""How many training images a trial at a rung sees (the largest batch a curve may ask for)."""

from __future__ import annotations


def training_set_size(space, rung: str) -> tuple[int, str]:
    """Training images a trial at `rung` sees, and a description for errors."""
    import numpy as np

    from tianfeng.trainers.data.sources import open_source
    from tianfeng.trainers.data.subset import stratified_subset

    base = space.base
    fraction = base.data.fraction * space.fidelities[rung].data_fraction
    source = open_source(base.data.source, synthetic_images=base.data.synthetic_images,
                         synthetic_classes=base.data.synthetic_classes)
    n = len(stratified_subset(np.asarray(source.train.labels), fraction, base.seed))
    return n, f"{base.data.source} at data fraction {fraction:g}"
