"""The `tianfeng` commands a page of the docs shows in its fenced shell blocks, in order, as a
reader pastes them: line continuations joined, comments and `VAR=value` prefixes dropped, each
part of an `&&` or `;` chain on its own. Synopsis lines (with `[optional]` parts) are not commands."""

from __future__ import annotations

import re
from collections.abc import Iterator

SHELL = {"bash", "sh", "console", ""}


def blocks(text: str) -> Iterator[tuple[str, str]]:
    """(language, body) of each fenced block, openers and closers paired in order."""
    lang, lines = None, []
    for line in text.splitlines():
        if line.startswith("```"):
            if lang is None:
                lang, lines = line[3:].strip(), []
            else:
                yield lang, "\n".join(lines)
                lang = None
        elif lang is not None:
            lines.append(line)


def commands(text: str) -> list[str]:
    """The arguments of each `tianfeng` (or `.venv/bin/tianfeng`) command in the shell blocks."""
    found = []
    for lang, body in blocks(text):
        if lang not in SHELL:
            continue
        for line in body.replace("\\\n", " ").splitlines():
            line = line.split(" #")[0].strip()
            for part in re.split(r"&&|\|\||;", line):
                m = re.match(r"(?:[A-Z_]+=\S+ )*(?:\S*/)?tianfeng (.*)$", part.strip())  # after VAR=value
                if m and "[" not in m.group(1):
                    found.append(m.group(1))
    return found
