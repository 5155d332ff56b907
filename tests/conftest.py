"""Shared fixtures: an isolated decode cache, a small folder of real JPEG files, small config helpers."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

import pytest

from tianfeng.core.run_config import RunConfig, config_from_dict, config_to_dict

pytest_plugins = ["tests.suite_timing"]

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
# the benchmark scripts import each other by name, as they do when run from their family's folder
sys.path[:0] = [str(BENCHMARKS), *(str(p) for p in sorted(BENCHMARKS.glob("*/")) if any(p.glob("*.py")))]

SMALL_CLASSES = ("digit0", "digit1", "digit2", "digit3", "digit4")


MEMORY_FOLDER = Path("/dev/shm")


@pytest.hookimpl(tryfirst=True)  # before pytest's tmp_path plugin reads --basetemp
def pytest_configure(config: pytest.Config) -> None:
    """Temporary folders in memory where the machine has room (unless --basetemp is given): the
    tests commit to SQLite thousands of times, and on a disk every commit waits for it (1.3 ms a
    commit on the development VM's disk, 0.1 ms in memory)."""
    if config.option.basetemp is None and MEMORY_FOLDER.is_dir() and os.access(MEMORY_FOLDER, os.W_OK) \
            and shutil.disk_usage(MEMORY_FOLDER).free > 8 * 2**30:
        config.option.basetemp = tempfile.mkdtemp(prefix="tianfeng-tests-", dir=MEMORY_FOLDER)
        config.stash[_IN_MEMORY] = config.option.basetemp


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Ctrl-C reaches the commands the tests start, however the suite was launched (a shell starts
    a background job with SIGINT ignored, and its children would inherit that). In one of several
    parallel test processes (pytest-xdist), torch takes its share of the cores: two processes each
    spinning two OpenMP threads on two cores slow each other many times. The commands a test
    starts inherit the same share (OMP_NUM_THREADS), unless they set their own."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        import torch

        share = max(1, len(os.sched_getaffinity(0)) // workers)
        torch.set_num_threads(share)
        os.environ.setdefault("OMP_NUM_THREADS", str(share))


def pytest_unconfigure(config: pytest.Config) -> None:
    if _IN_MEMORY in config.stash:  # memory is not given back until the folder goes
        shutil.rmtree(config.stash[_IN_MEMORY], ignore_errors=True)


_IN_MEMORY = pytest.StashKey[str]()


@pytest.fixture(autouse=True, scope="session")
def isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every test decodes into a fresh cache, never the user's ~/.cache/tianfeng."""
    path = tmp_path_factory.mktemp("tianfeng-cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("TIANFENG_CACHE", str(path))
    yield path
    mp.undo()


@pytest.fixture(scope="session")
def small_imagefolder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small ImageNet-layout folder of real JPEG files: scikit-learn's bundled digits 0-4, 40
    train and 10 val images of each, grown to 32x32 RGB (a colour of each channel per pixel, a
    little seeded noise so the encoder has detail to keep) and written by PIL."""
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits

    out = tmp_path_factory.mktemp("small") / "digits5-small"
    digits = load_digits()
    rng = np.random.default_rng(0)
    keep = {"train": 40, "val": 10}
    for label, name in enumerate(SMALL_CLASSES):
        images = digits.images[digits.target == label][: sum(keep.values())]
        splits = ["train"] * keep["train"] + ["val"] * keep["val"]
        for i, (split, image) in enumerate(zip(splits, images, strict=True)):
            v = np.kron(image / 16.0, np.ones((4, 4))) * 255.0  # 8x8 -> 32x32
            rgb = np.stack([v, 0.6 * v + 60.0, 255.0 - 0.8 * v], axis=-1) + rng.normal(0, 8, (32, 32, 3))
            dest = out / split / name
            dest.mkdir(parents=True, exist_ok=True)
            Image.fromarray(np.clip(rgb, 0, 255).astype(np.uint8)).save(dest / f"{i:04d}.jpg", quality=90)
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
