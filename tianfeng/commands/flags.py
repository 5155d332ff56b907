"""Flags several commands share, defined once."""

from __future__ import annotations

import argparse

from tianfeng.defaults import DEFAULT_STORAGE


def add_storage(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--storage", default=DEFAULT_STORAGE,
                        help=f"the study database: a SQLAlchemy URL or a SQLite file path (default {DEFAULT_STORAGE}); "
                             "postgresql://... for many workers or machines")
