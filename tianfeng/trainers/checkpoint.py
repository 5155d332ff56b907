"""Checkpoints: model, optimizer, loss scaler, RNG states and the exact data position, written
atomically (a kill during a save leaves the previous checkpoint intact) and read back with
`weights_only=True`: a checkpoint holds tensors and plain values only, so loading one can never
run code, whoever wrote the file."""

from __future__ import annotations

import os
import pickle
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tianfeng.core.errors import ConfigError

LAST = "last.pt"


def rng_state() -> dict[str, Any]:
    """Every generator's state as tensors and plain values (numpy's array becomes a tensor)."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss = random.getstate()
    state = {"torch": torch.get_rng_state(),
             "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                       "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
             "python": {"version": version, "internal": list(internal), "gauss": gauss}}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    # RNG states must be CPU ByteTensors whatever device the run uses (they are loaded to CPU)
    torch.set_rng_state(state["torch"].cpu())
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                         n["cached_gaussian"]))
    p = state["python"]
    random.setstate((p["version"], tuple(p["internal"]), p["gauss"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])


def _write_atomically(path: Path, payload: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp{os.getpid()}"
    torch.save(payload, tmp)
    os.replace(tmp, path)
    return path


def _load_safely(path: Path, what: str) -> Any:
    """`path` read with weights_only=True onto the CPU; anything else is one line naming it."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, OSError) as exc:
        reason = _reason(exc)
        raise ConfigError(str(path), "", f"cannot load {what} (only tensors and plain values are accepted): "
                          f"{reason}; delete it, or set checkpoint.resume: false") from None


def _reason(exc: BaseException) -> str:
    """Why torch refused the file, in our words: its safe unpickler's own finding (the object it
    met), not its advice on loading the file unsafely, which tianfeng never does."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    found = next((line for line in lines if line.startswith("WeightsUnpickler error:")), "")
    named = re.search(r"GLOBAL (\S+)", found)
    if named:
        return f"it holds a Python object of type {named.group(1)[:120]}"
    if isinstance(exc, pickle.UnpicklingError) or (lines and lines[0].startswith("Weights only load failed")):
        return "it holds objects other than tensors and plain values"
    return lines[0][:200] if lines else type(exc).__name__


def save(directory: Path, payload: dict[str, Any]) -> Path:
    return _write_atomically(directory / LAST, payload)


def copy_files(source: Path, target: Path) -> None:
    """Copy every checkpoint file of `source` (rank 0's last one and the ranks' own states) into
    `target`, which is created if missing."""
    target.mkdir(parents=True, exist_ok=True)
    for path in source.iterdir():
        if path.is_file() and path.suffix == ".pt":
            shutil.copy2(path, target / path.name)


def load(directory: Path) -> dict[str, Any] | None:
    """The last checkpoint in `directory`, on the CPU (the model and optimizer move it to their
    device as they load it), or None. Anything but tensors and plain values is refused."""
    path = directory / LAST
    if not path.exists():
        return None
    payload = _load_safely(path, "this checkpoint")
    if not isinstance(payload, dict) or not {"model", "optimizer", "rng", "position", "config"} <= payload.keys():
        raise ConfigError(str(path), "", "is not a tianfeng checkpoint (model, optimizer, rng, position "
                          "and config expected); delete it, or set checkpoint.resume: false")
    return payload


def _rank_files(directory: Path, rank: int, world: int) -> dict[int, Path]:
    """This rank's state files by global step: `rank<r>-of-<world>-step<n>.pt`."""
    prefix = f"rank{rank}-of-{world}-step"
    return {int(p.stem.removeprefix(prefix)): p for p in directory.glob(f"{prefix}*.pt")
            if p.stem.removeprefix(prefix).isdigit()}


def save_rank_state(directory: Path, rank: int, world: int, global_step: int, payload: dict[str, Any]) -> None:
    """What only this rank knows (a comm hook's error feedback), saved beside `last.pt` under
    the step it belongs to; the two newest are kept, so a kill while rank 0 writes `last.pt`
    still leaves the state of the step `last.pt` holds."""
    _write_atomically(directory / f"rank{rank}-of-{world}-step{global_step}.pt", payload)
    for _step, old in sorted(_rank_files(directory, rank, world).items())[:-2]:
        old.unlink(missing_ok=True)


def load_rank_state(directory: Path, rank: int, world: int, global_step: int) -> dict[str, Any] | None:
    """This rank's state of `global_step`, or None (another world size, or never saved)."""
    path = _rank_files(directory, rank, world).get(global_step)
    return None if path is None else _load_safely(path, "this rank's state")


# Fields that may change between a run and its resumption: where things go and how often.
_RESUMABLE_CHANGES = {"name", "run_dir", "log_every_steps", "noise_scale_every", "memory_format", "engine", "checkpoint",
                      "data.cache_dir",
                      "data.workers", "data.loader", "data.val_batch_size", "device"}


def config_changes(saved: dict[str, Any], current: dict[str, Any], prefix: str = "") -> list[str]:
    """Key paths whose values differ between a checkpoint's config and the run resuming it."""
    changed = []
    for key in sorted(set(saved) | set(current)):
        path = f"{prefix}{key}"
        if path in _RESUMABLE_CHANGES or key not in saved:  # not in saved: an option newer than the checkpoint
            continue
        a, b = saved.get(key), current.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            changed += config_changes(a, b, f"{path}.")
        elif a != b:
            changed.append(path)
    return changed
