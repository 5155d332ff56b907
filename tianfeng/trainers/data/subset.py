"""Stratified, seeded subsets of the training set, for cheap proxy runs."""

from __future__ import annotations

import numpy as np


def stratified_subset(labels: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """Sorted indices of `fraction` of each class (at least one image per class)."""
    if fraction >= 1.0:
        return np.arange(len(labels))
    rng = np.random.default_rng(seed)
    keep = []
    for c in np.unique(labels):
        idx = np.flatnonzero(labels == c)
        keep.append(rng.choice(idx, size=max(1, round(len(idx) * fraction)), replace=False))
    return np.sort(np.concatenate(keep))
