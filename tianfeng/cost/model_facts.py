"""What the cost model knows of a model at a resolution (training FLOPs, layers, parameters,
BatchNorm channels, activation bytes per image), measured once per machine and kept in the cache
folder, so that reading a space, planning or pricing a trial builds no model (and imports no
torch) once a fact is known. A fact is keyed by the model, the resolution, the input channels
and classes, the installed torch, torchvision and timm, and the source of tianfeng's model
builders: a change to any of them measures it again. A model of the user's own code
(`package.module:function`) is measured in each process instead, as its code may change."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import asdict
from importlib import metadata
from pathlib import Path
from typing import Any

from tianfeng.core.run_config import ModelConfig

FILE = "model_facts.json"
_BUILDERS = ("models.py", "model_zoo.py")  # tianfeng/trainers/: what builds the named models


@functools.cache
def _versions() -> str:
    out = []
    for package in ("torch", "torchvision", "timm"):
        try:
            out.append(f"{package}={metadata.version(package)}")
        except metadata.PackageNotFoundError:
            out.append(f"{package}=-")
    trainers = Path(__file__).resolve().parents[1] / "trainers"
    digest = hashlib.sha256(b"".join((trainers / name).read_bytes() for name in _BUILDERS)).hexdigest()[:16]
    return ",".join(out) + f",builders={digest}"


def _path() -> Path:
    from tianfeng.trainers.data.sources import default_cache_dir

    return Path(default_cache_dir()) / FILE


def _read(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):  # none yet, or cut short: measured again
        return {}


def known(kind: str, model: ModelConfig, resolution: int, in_channels: int, classes: int,
          measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The `kind` facts of `model` at `resolution`: from the cache file, else `measure()`d and
    kept (written whole to a temporary file and renamed, so concurrent workers never read half)."""
    if ":" in model.name and not model.name.startswith(("torchvision:", "timm:")):
        return measure()
    key = json.dumps([kind, asdict(model), resolution, in_channels, classes, _versions()], sort_keys=True, default=str)
    path = _path()
    facts = _read(path)
    if key in facts:
        return facts[key]
    value = measure()
    with contextlib.suppress(OSError):  # a read-only cache folder: measured each time instead
        path.parent.mkdir(parents=True, exist_ok=True)
        facts = {**_read(path), key: value}
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".model_facts.")
        with os.fdopen(fd, "w") as f:
            json.dump(facts, f)
        os.chmod(tmp, 0o644)  # as the other cache files: readable by whoever shares the folder
        os.replace(tmp, path)
    return value
