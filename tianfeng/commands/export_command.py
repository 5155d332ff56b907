"""`tianfeng export`: a study's trials as CSV, Parquet or JSON."""

from __future__ import annotations

import argparse
import logging
import sys

from tianfeng import api
from tianfeng.terminal.logs import quiet_optuna

log = logging.getLogger("tianfeng.export")


def run_export_command(args: argparse.Namespace) -> int:
    quiet_optuna()
    table, text = api.export(args.study, storage=args.storage, output=args.output, format=args.format)
    if text is not None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    else:
        log.info("%d trials of study %s written to %s", len(table), table.attrs["study"], args.output)
    return 0
