"""`tianfeng export`: a study's trials as CSV, Parquet or JSON."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tianfeng.defaults import DEFAULT_STORAGE, STORAGE_HELP
from tianfeng.options import option
from tianfeng.verbs import Verb
from tianfeng.verbs._study import add_study_positional


@dataclass(frozen=True)
class ExportOptions:
    study: str | None = option(None, "study name (default: the only study)")
    storage: str = option(DEFAULT_STORAGE, STORAGE_HELP, show_default=False)
    format: str = option("csv", "file format", choices=("csv", "parquet", "json"))
    output: Path | None = option(None, "the file to write (default: stdout)", short="-o")


VERB = Verb(
    "export", "write a study's trials as CSV, Parquet or JSON",
    "One row per trial: its parameters, objective values (named), state and outcome, proxy score, predicted "
    "full-run time and GPU-hours, and the score of its completed promotion, if any. To stdout unless -o is given "
    "(Parquet needs -o).",
    "tianfeng.commands.export_command:run_export_command",
    (("tianfeng export --study large_batch > trials.csv", "every trial as CSV"),
     ("tianfeng export --study large_batch --format parquet -o trials.parquet", "as Parquet")),
    options=ExportOptions, arguments=add_study_positional)
