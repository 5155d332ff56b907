"""A file written whole or not at all: the text goes to a temporary file beside it, which then
replaces it in one rename, so a reader (a browser, another worker, another rank) never meets half
a file, and writers at the same moment leave one of their files whole."""

from __future__ import annotations

import os
import threading
from pathlib import Path


def write_whole(path: Path, text: str) -> Path:
    """Write `text` to `path` whole; returns `path`. The temporary name is this writer's own
    (process and thread), so writers at once never share one; its permissions are a plain new
    file's."""
    partial = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.partial")
    try:
        partial.write_text(text)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path
