"""Flags several commands share, defined once."""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any, TypeVar

from tianfeng.defaults import DEFAULT_STORAGE

T = TypeVar("T")


def add_storage(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--storage", default=DEFAULT_STORAGE,
                        help=f"the study database: a SQLAlchemy URL or a SQLite file path (default {DEFAULT_STORAGE}); "
                             "postgresql://... for many workers or machines")


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the result as JSON (for programs)")


def emit(args: argparse.Namespace, result: object, lines: list[str]) -> None:
    """The result on stdout: `lines` for a person, or the whole result as JSON with --json."""
    if getattr(args, "json", False):
        print(json.dumps(result, indent=2, default=str))
    else:
        print("\n".join(lines))


def options_from_flags(args: argparse.Namespace, cls: type[T], **given: Any) -> T:
    """A verb's options object from its parsed flags, a field per flag of the same name; `given`
    holds the fields whose flags are parsed into another form (a duration, a budget)."""
    return cls().changed(**{f.name: given[f.name] if f.name in given else getattr(args, f.name)
                            for f in dataclasses.fields(cls) if f.name in given or hasattr(args, f.name)})
