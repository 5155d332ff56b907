"""Shared fixtures: an isolated decode cache, the real cifar5-dev images, small config helpers."""

from __future__ import annotations

import hashlib
import shutil
import tarfile
from pathlib import Path

import pytest

from trainers.config import RunConfig, config_from_dict, config_to_dict

SHARED_ARCHIVE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "cifar5-dev.tar.gz"
ARCHIVE_SHA256 = "df41a7f26a209c3bf063f3cbd6d6e5f07be0277c52d6850e1eebe5590e12cf99"


@pytest.fixture(autouse=True, scope="session")
def isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every test decodes into a fresh cache, never the user's ~/.cache/tianfeng."""
    path = tmp_path_factory.mktemp("tianfeng-cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("TIANFENG_CACHE", str(path))
    yield path
    mp.undo()


@pytest.fixture(scope="session")
def cifar5_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real development set (CIFAR-10 JPEGs, 5 classes) extracted from ../shared."""
    if not SHARED_ARCHIVE.exists():
        raise FileNotFoundError(
            f"{SHARED_ARCHIVE} is missing: the data tests need the shared development set "
            "beside the checkout (see ../shared/README.md)")
    digest = hashlib.sha256(SHARED_ARCHIVE.read_bytes()).hexdigest()
    assert digest == ARCHIVE_SHA256, f"{SHARED_ARCHIVE} has sha256 {digest}"
    out = tmp_path_factory.mktemp("datasets")
    with tarfile.open(SHARED_ARCHIVE) as tar:
        tar.extractall(out, filter="data")
    return out / "cifar5-dev"


@pytest.fixture(scope="session")
def small_imagefolder(cifar5_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A few real JPEGs per class (40 train, 10 val) in ImageNet layout, for fast tests."""
    out = tmp_path_factory.mktemp("small") / "cifar5-small"
    for split, count in (("train", 40), ("val", 10)):
        for class_dir in sorted((cifar5_dir / split).iterdir()):
            dest = out / split / class_dir.name
            dest.mkdir(parents=True)
            for f in sorted(class_dir.iterdir())[:count]:
                shutil.copy(f, dest / f.name)
    return out


def make_config(tmp_path: Path, **sections) -> RunConfig:
    """A small fast run config rooted in tmp_path; keyword args replace whole sections."""
    raw = config_to_dict(RunConfig())
    raw.update(name="test", run_dir=str(tmp_path / "run"), device="cpu")
    raw["model"].update(width=8, depth=1, stages=2)
    raw["phases"] = [{"epochs": 2, "resolution": 8, "batch_size": 64}]
    raw["optimizer"].update(lr=0.4)
    raw["precision"]["mode"] = "fp32"
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(raw.get(key), dict):
            raw[key].update(value)
        else:
            raw[key] = value
    return config_from_dict(raw, "test")
