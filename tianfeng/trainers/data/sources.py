"""Data sources: where images and labels come from, before any decoding or caching.

`digits` (scikit-learn's bundled set) is the embedded default: it needs no download and no files.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tianfeng.core.errors import ConfigError
from tianfeng.trainers.shared_files import file_lock

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png"}


class DataSourceError(ConfigError):
    """A data source that cannot be used; the message names the path and what was expected."""

    def __init__(self, message: str) -> None:
        super().__init__("", "data.source", message)


@dataclass
class Split:
    labels: np.ndarray  # int64, one per image
    files: list[str] | None = None  # encoded image files (imagefolder)
    images: np.ndarray | None = None  # uint8 NHWC at native resolution (digits)

    def __len__(self) -> int:
        return len(self.labels)


@dataclass
class ImageSource:
    key: str  # identifies the source's content, for cache keys
    channels: int
    class_names: list[str]
    train: Split
    val: Split
    synthetic: bool = False

    @property
    def num_classes(self) -> int:
        return len(self.class_names)


def _stratified_split(labels: np.ndarray, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    train, val = [], []
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        n_val = round(len(idx) * val_fraction)
        val.append(idx[:n_val])
        train.append(idx[n_val:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(val))


def _digits_table() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits file read directly: importing sklearn.datasets costs ~2 s in every
    process (each search worker opens the data)."""
    spec = importlib.util.find_spec("sklearn")
    table = Path(spec.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz" if spec else None
    if table is None or not table.is_file():  # a layout other than the one read here
        from sklearn.datasets import load_digits

        bunch = load_digits()
        return bunch.data, bunch.target.astype(np.int64)
    rows = np.loadtxt(table, delimiter=",")
    return rows[:, :-1], rows[:, -1].astype(np.int64)


@functools.cache
def digits_source() -> ImageSource:
    """8x8 grey digits shipped inside scikit-learn; a fixed stratified 80/20 train/val split."""
    pixels, labels = _digits_table()
    images = np.clip(pixels.reshape(-1, 8, 8) * 16, 0, 255).astype(np.uint8)[..., None]  # 0..16 -> 0..255
    train_idx, val_idx = _stratified_split(labels, 0.2, seed=0)
    return ImageSource(
        key="digits-v1", channels=1, class_names=[str(d) for d in range(10)],
        train=Split(labels[train_idx], images=images[train_idx]),
        val=Split(labels[val_idx], images=images[val_idx]),
    )


def synthetic_source(num_images: int, num_classes: int, resolution: int) -> ImageSource:
    """Random images for throughput measurements; nothing can be learned from them."""
    rng = np.random.default_rng(0)
    n_val = max(num_images // 10, num_classes)

    def split(n: int) -> Split:
        return Split(rng.integers(0, num_classes, n, dtype=np.int64),
                     images=rng.integers(0, 256, (n, resolution, resolution, 3), dtype=np.uint8))

    return ImageSource(key=f"synthetic-{num_images}-{num_classes}-{resolution}", channels=3,
                       class_names=[f"class{i}" for i in range(num_classes)],
                       train=split(num_images), val=split(n_val), synthetic=True)


def _scan_split(root: Path, class_names: list[str] | None) -> tuple[list[str], Split, list[str]]:
    """Class names, the split, and each file's path:size:mtime for the fingerprint (one pass)."""
    if not root.is_dir():
        raise DataSourceError(f"{root}: not a directory (imagefolder needs train/ and val/ "
                              "folders of class folders of JPEG or PNG files)")
    with os.scandir(root) as entries:
        found = sorted(e.name for e in entries if e.is_dir())
    names = class_names if class_names is not None else found
    if not names:
        raise DataSourceError(f"{root}: no class folders")
    extra = sorted(set(found) - set(names))
    if extra:
        raise DataSourceError(f"{root}: class folders not in train/: {', '.join(extra[:5])}")
    files: list[str] = []
    labels: list[int] = []
    stamps: list[str] = []
    for label, name in enumerate(names):
        folder = root / name
        if not folder.is_dir():
            continue
        with os.scandir(folder) as it:
            entries = sorted((e for e in it if os.path.splitext(e.name)[1].lower() in IMAGE_SUFFIXES),
                             key=lambda e: e.name)
        for entry in entries:
            st = entry.stat()
            files.append(entry.path)
            labels.append(label)
            stamps.append(f"{entry.path}:{st.st_size}:{st.st_mtime_ns}")
    if not files:
        raise DataSourceError(f"{root}: no .jpg, .jpeg or .png files in its class folders")
    return names, Split(np.asarray(labels, dtype=np.int64), files=files), stamps


def _folder_stamp(root: Path) -> tuple:
    """Modification times of the split and class folders: adding, removing or renaming an image
    changes one of them. (Rewriting a file in place does not; a new process rescans.)"""
    stamp = []
    for split in ("train", "val"):
        folder = root / split
        if not folder.is_dir():
            return ()
        stamp.append((split, folder.stat().st_mtime_ns))
        with os.scandir(folder) as entries:
            stamp += sorted((e.name, e.stat().st_mtime_ns) for e in entries if e.is_dir())
    return tuple(stamp)


_OPENED: dict[tuple, ImageSource] = {}  # a search opens the same folder for every trial


def imagefolder_source(directory: str) -> ImageSource:
    """ImageNet layout: DIR/train/<class>/*.jpg and DIR/val/<class>/*.jpg. The scan (a stat of
    every file, for the content key) is done once per folder state and shared through an index
    in the cache directory: the ranks of a node, and later processes, read it instead."""
    root = Path(directory).expanduser()
    if not root.is_dir():
        raise DataSourceError(f"{root}: no such directory")
    memo_key = (str(root.resolve()), _folder_stamp(root))
    if memo_key[1] and memo_key in _OPENED:
        return _OPENED[memo_key]
    if not memo_key[1]:
        return _scan(root)  # not the layout: _scan says what is wrong
    with _scan_lock(root):  # the ranks of a node wait for one scan instead of each making it
        source = _read_index(root, memo_key[1])
        if source is None:
            source = _scan(root)
            _write_index(root, memo_key[1], source)
    _OPENED[memo_key] = source
    return source


@contextlib.contextmanager
def _scan_lock(root: Path) -> Iterator[None]:
    with contextlib.ExitStack() as held:
        with contextlib.suppress(OSError):  # an unwritable cache: scan without sharing
            held.enter_context(file_lock(_index_path(root)))
        yield


def _scan(root: Path) -> ImageSource:
    class_names, train, train_stamps = _scan_split(root / "train", None)
    _, val, val_stamps = _scan_split(root / "val", class_names)
    digest = hashlib.sha256(str(root.resolve()).encode())
    for stamp in train_stamps + val_stamps:
        digest.update(stamp.encode())
    key = f"imagefolder-{root.name}-{digest.hexdigest()[:16]}"
    return ImageSource(key=key, channels=3, class_names=class_names, train=train, val=val)


def default_cache_dir() -> Path:
    return Path(os.environ.get("TIANFENG_CACHE", Path.home() / ".cache" / "tianfeng"))


def _index_path(root: Path) -> Path:
    name = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]
    return default_cache_dir() / "scans" / f"{name}.json"


def _read_index(root: Path, stamp: tuple) -> ImageSource | None:
    """The scan saved for this folder state, or None (none, another state, unreadable)."""
    try:
        saved = json.loads(_index_path(root).read_text())
    except (OSError, ValueError):
        return None
    if saved.get("root") != str(root.resolve()) or saved.get("stamp") != json.loads(json.dumps(stamp)):
        return None

    def split(part: dict) -> Split:
        return Split(np.asarray(part["labels"], dtype=np.int64), files=part["files"])

    return ImageSource(key=saved["key"], channels=3, class_names=saved["class_names"],
                       train=split(saved["train"]), val=split(saved["val"]))


def _write_index(root: Path, stamp: tuple, source: ImageSource) -> None:
    """Best effort: a cache directory that cannot be written only means the next process scans."""
    path = _index_path(root)
    payload = {"root": str(root.resolve()), "stamp": stamp, "key": source.key, "class_names": source.class_names,
               **{name: {"files": split.files, "labels": split.labels.tolist()}
                  for name, split in (("train", source.train), ("val", source.val))}}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(payload))
        os.replace(tmp, path)
    except OSError:
        pass


def open_source(spec: str, *, synthetic_images: int = 2048, synthetic_classes: int = 10,
                resolution: int = 32) -> ImageSource:
    if spec == "digits":
        return digits_source()
    if spec == "synthetic":
        return synthetic_source(synthetic_images, synthetic_classes, resolution)
    if spec.startswith("imagefolder:"):
        return imagefolder_source(spec.removeprefix("imagefolder:"))
    from tianfeng.core.names import is_reference

    if is_reference(spec):
        return user_source(spec)
    raise DataSourceError(f"unknown data source {spec!r}; allowed: digits, synthetic, imagefolder:DIR, "
                          f"package.module:function")


@functools.cache
def user_source(spec: str) -> ImageSource:
    """The user's data set: `package.module:function` returns an ImageSource, or the four arrays
    (train_images, train_labels, val_images, val_labels): images uint8, N x H x W x C (or N x H x W
    for one channel), labels integers from 0."""
    from tianfeng.trainers.user_code import load_callable

    made = load_callable(spec, "data.source")()
    if isinstance(made, ImageSource):
        return made
    if not (isinstance(made, tuple | list) and len(made) == 4):
        raise DataSourceError(f"{spec} must return an ImageSource or (train_images, train_labels, val_images, "
                              f"val_labels); got {type(made).__name__}")
    arrays = []
    for images, labels, split in ((made[0], made[1], "train"), (made[2], made[3], "val")):
        images, labels = np.asarray(images), np.asarray(labels)
        if images.ndim == 3:
            images = images[..., None]
        if images.dtype != np.uint8 or images.ndim != 4 or len(images) != len(labels) or len(labels) == 0:
            raise DataSourceError(f"{spec}: {split} images must be uint8 N x H x W x C with one label each; got "
                                  f"{images.dtype} {images.shape} and {len(labels)} labels")
        if not np.issubdtype(labels.dtype, np.integer) or labels.min() < 0:
            raise DataSourceError(f"{spec}: {split} labels must be integers >= 0")
        arrays.append((np.ascontiguousarray(images), labels.astype(np.int64)))
    (train_x, train_y), (val_x, val_y) = arrays
    if train_x.shape[1:] != val_x.shape[1:]:
        raise DataSourceError(f"{spec}: train and val images differ in shape: {train_x.shape[1:]} and {val_x.shape[1:]}")
    digest = hashlib.sha256()
    for a in (train_x, train_y, val_x, val_y):
        digest.update(a.tobytes())
    classes = int(max(train_y.max(), val_y.max())) + 1
    return ImageSource(key=f"user-{digest.hexdigest()[:16]}", channels=train_x.shape[3],
                       class_names=[str(c) for c in range(classes)],
                       train=Split(train_y, images=train_x), val=Split(val_y, images=val_x))
