"""Files in the cache that several processes (trials, ranks of a node) read and write: an
exclusive lock beside the file, and a JSON file merged under it and replaced atomically."""

from __future__ import annotations

import contextlib
import fcntl
import json
from collections.abc import Callable, Iterator
from pathlib import Path

from tianfeng.core.files import write_whole


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold the exclusive lock `path.lock` for the block (OSError if it cannot be made)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def read_json(path: Path) -> dict:
    """The file's object; {} when it is missing or not JSON."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def update_json(path: Path, change: Callable[[dict], None]) -> None:
    """Read, `change` in place and write back, all under the file's lock."""
    with file_lock(path):
        known = read_json(path)
        change(known)
        write_whole(path, json.dumps(known, indent=1, sort_keys=True))
