"""What the typed options objects of the verbs (search, promote, scale) share."""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any, TypeVar

from tianfeng.trainers.config import ConfigError

T = TypeVar("T")


def with_changes(options: T, verb: str, changes: dict[str, Any]) -> T:
    """A copy of the frozen dataclass `options` with `changes` (lists become tuples); an unknown
    name is one line naming `verb` and the closest known name."""
    known = [f.name for f in dataclasses.fields(options)]
    for name in changes:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {close[0]}?" if close else f"; known: {', '.join(known)}"
            raise ConfigError(verb, name, f"unknown option{hint}")
    return dataclasses.replace(options, **{k: tuple(v) if isinstance(v, list) else v for k, v in changes.items()})
