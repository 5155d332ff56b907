"""The study as a positional argument, which `report`, `export` and `dashboard` took before they
took `--study` as every command does: accepted one more release, with a deprecation line."""

from __future__ import annotations

import argparse


def add_study_positional(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("study_positional", nargs="?", default=None, metavar="STUDY",
                        help="deprecated: the same as --study, accepted until the next release")
