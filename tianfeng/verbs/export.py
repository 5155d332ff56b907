"""`tianfeng export`: a study's trials as CSV, Parquet or JSON."""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tianfeng.defaults import DEFAULT_STORAGE, STORAGE_HELP
from tianfeng.options import option
from tianfeng.verbs import Verb
from tianfeng.verbs._study import add_study_positional

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger("tianfeng.export")


@dataclass(frozen=True)
class ExportOptions:
    study: str | None = option(None, "study name (default: the only study)")
    storage: str = option(DEFAULT_STORAGE, STORAGE_HELP, show_default=False)
    format: str = option("csv", "file format", choices=("csv", "parquet", "json"))
    output: Path | None = option(None, "the file to write (default: stdout)", short="-o")


def export(study: str | None = None, *, storage: str = DEFAULT_STORAGE, output: str | Path | None = None,
           format: str = "csv") -> tuple[pd.DataFrame, str | None]:
    """A study's trials as a table (one row per trial: parameters, objective values, state,
    outcome, predicted full run, promotion result) written to `output` as `format` (csv, parquet
    or json); with no `output`, the text is returned for printing (parquet needs a file). As
    `tianfeng export`. Returns (the table, its study's name in `table.attrs["study"]`; the text
    or None)."""
    from tianfeng.export.table import trials_table, write_table
    from tianfeng.promotion.run import load_study

    chosen = load_study(storage, study, flag="--study")
    table = trials_table(chosen, storage)
    table.attrs["study"] = chosen.study_name
    return table, write_table(table, None if output is None else Path(output), format)


def command(args: argparse.Namespace) -> int:
    from tianfeng.terminal.logs import quiet_optuna

    quiet_optuna()
    table, text = export(args.study, storage=args.storage, output=args.output, format=args.format)
    if text is not None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    else:
        log.info("%d trials of study %s written to %s", len(table), table.attrs["study"], args.output)
    return 0


VERB = Verb(
    "export", "write a study's trials as CSV, Parquet or JSON",
    "One row per trial: its parameters, objective values (named), state and outcome, proxy score, predicted "
    "full-run time and GPU-hours, and the score of its completed promotion, if any. To stdout unless -o is given "
    "(Parquet needs -o).",
    command,
    (("tianfeng export --study large_batch > trials.csv", "every trial as CSV"),
     ("tianfeng export --study large_batch --format parquet -o trials.parquet", "as Parquet")),
    options=(ExportOptions,), arguments=add_study_positional)
