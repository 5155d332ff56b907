"""What the verbs reading a study share: the study itself, and the study as a positional argument,
which `report`, `export` and `dashboard` took before they took `--study` as every command does
(accepted one more release, with a deprecation line)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from tianfeng.defaults import DEFAULT_STORAGE

if TYPE_CHECKING:
    import optuna


def load(study: str | None = None, *, storage: str = DEFAULT_STORAGE) -> optuna.Study:
    """A study of `storage`; with `study` None, its only study (ConfigError naming the studies
    when there are several or none)."""
    from tianfeng.promotion.run import load_study

    return load_study(storage, study)


def add_study_positional(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("study_positional", nargs="?", default=None, metavar="STUDY",
                        help="deprecated: the same as --study, accepted until the next release")
