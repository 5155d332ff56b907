"""Reading a YAML file a user (or anyone) hands us: bounded in size and in the nodes it expands
to (aliases may not multiply a small file into gigabytes), text only, every problem one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tianfeng.core.errors import ConfigError

MAX_BYTES = 1 << 20  # 1 MiB: a run config or space file is a few kB
MAX_NODES = 100_000  # values after alias expansion


def read_yaml(path: str | Path, source: str | None = None) -> Any:
    source = source or str(path)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ConfigError(source, "", f"cannot read: {exc.strerror}") from None
    if len(data) > MAX_BYTES:
        raise ConfigError(source, "", f"is larger than {MAX_BYTES >> 20} MiB; a config or space file is a few kB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(source, "", "is not a UTF-8 text file (a YAML config or space file was expected)") from None
    return parse_yaml(text, source)


def parse_yaml(text: str, source: str) -> Any:
    if len(text) > MAX_BYTES:
        raise ConfigError(source, "", f"is larger than {MAX_BYTES >> 20} MiB; a config or space file is a few kB")
    if "\x00" in text:
        raise ConfigError(source, "", "is not a text file (it holds NUL bytes)")
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ConfigError(source, "", f"{f'line {mark.line + 1}: ' if mark else ''}not valid YAML") from None
    except RecursionError:
        raise ConfigError(source, "", "is nested too deeply") from None
    _check_size(value, source)
    return value


def _check_size(value: Any, source: str) -> None:
    """Counts values as a reader of the loaded tree would meet them (an alias counts every time)."""
    seen, stack = 0, [value]
    while stack:
        node = stack.pop()
        seen += 1
        if seen > MAX_NODES:
            raise ConfigError(source, "", f"expands to more than {MAX_NODES:,} values (YAML aliases?); "
                              "a config or space file holds a few hundred")
        if isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, str) and len(node) > 10_000:
            raise ConfigError(source, "", "holds a string longer than 10,000 characters")
