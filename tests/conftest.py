"""Shared fixtures: an isolated decode cache, the real cifar5-dev images, small config helpers."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import tarfile
import tempfile
from pathlib import Path

import pytest

from tianfeng.trainers.config import RunConfig, config_from_dict, config_to_dict

SHARED_ARCHIVE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "cifar5-dev.tar.gz"
ARCHIVE_SHA256 = "df41a7f26a209c3bf063f3cbd6d6e5f07be0277c52d6850e1eebe5590e12cf99"


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


def _shared_archive() -> Path:
    if not SHARED_ARCHIVE.exists():
        raise FileNotFoundError(
            f"{SHARED_ARCHIVE} is missing: the data tests need the shared development set "
            "beside the checkout")
    digest = hashlib.sha256(SHARED_ARCHIVE.read_bytes()).hexdigest()
    assert digest == ARCHIVE_SHA256, f"{SHARED_ARCHIVE} has sha256 {digest}"
    return SHARED_ARCHIVE


@pytest.fixture(scope="session")
def small_imagefolder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real cifar5-dev JPEGs in ImageNet layout, the first 40 train and 10 val images of each
    class, read straight out of the shared archive (extracting all 30,000 files is slow I/O)."""
    out = tmp_path_factory.mktemp("small") / "cifar5-small"
    keep = {"train": 40, "val": 10}
    taken: dict[tuple[str, str], int] = {}
    with tarfile.open(_shared_archive(), mode="r|gz") as tar:  # one sequential pass, no seeking
        for m in tar:
            if not (m.isfile() and m.name.endswith(".jpg")):
                continue
            split, cls = Path(m.name).parts[-3:-1]
            if taken.get((split, cls), 0) >= keep[split]:
                continue
            taken[split, cls] = taken.get((split, cls), 0) + 1
            dest = out / split / cls
            dest.mkdir(parents=True, exist_ok=True)
            (dest / Path(m.name).name).write_bytes(tar.extractfile(m).read())
    assert len(taken) == 10 and all(n == keep[s] for (s, _), n in taken.items()), taken
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
