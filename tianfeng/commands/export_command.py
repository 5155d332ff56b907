"""`tianfeng export`: a study's trials as CSV, Parquet or JSON."""

from __future__ import annotations

import argparse
import logging
import sys

from tianfeng.export import trials_table, write_table
from tianfeng.logs import quiet_optuna
from tianfeng.promotion.run import load_study

log = logging.getLogger("tianfeng.export")


def run_export_command(args: argparse.Namespace) -> int:
    quiet_optuna()
    study = load_study(args.storage, args.study, flag="STUDY")
    table = trials_table(study, args.storage)
    text = write_table(table, args.output, args.format)
    if text is not None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    else:
        log.info("%d trials of study %s written to %s", len(table), study.study_name, args.output)
    return 0
