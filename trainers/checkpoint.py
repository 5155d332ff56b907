"""Checkpoints: model, optimizer, loss scaler, RNG states and the exact data position, written
atomically (a kill during a save leaves the previous checkpoint intact)."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

LAST = "last.pt"


def rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save(directory: Path, payload: dict[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / LAST
    tmp = directory / f".{LAST}.tmp{os.getpid()}"
    torch.save(payload, tmp)
    os.replace(tmp, path)
    return path


def load(directory: Path, device: torch.device) -> dict[str, Any] | None:
    path = directory / LAST
    if not path.exists():
        return None
    return torch.load(path, map_location=device, weights_only=False)


# Fields that may change between a run and its resumption: where things go and how often.
_RESUMABLE_CHANGES = {"name", "run_dir", "log_every_steps", "checkpoint", "data.cache_dir",
                      "data.workers", "data.loader", "data.val_batch_size", "device"}


def config_changes(saved: dict[str, Any], current: dict[str, Any], prefix: str = "") -> list[str]:
    """Key paths whose values differ between a checkpoint's config and the run resuming it."""
    changed = []
    for key in sorted(set(saved) | set(current)):
        path = f"{prefix}{key}"
        if path in _RESUMABLE_CHANGES:
            continue
        a, b = saved.get(key), current.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            changed += config_changes(a, b, f"{path}.")
        elif a != b:
            changed.append(path)
    return changed
