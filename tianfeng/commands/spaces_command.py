"""`tianfeng spaces`: the shipped search spaces, their descriptions and how to use them."""

from __future__ import annotations

import argparse
import json

from tianfeng import api
from tianfeng.terminal.tables import add_plain_row, plain_table, table_console


def run_spaces_command(args: argparse.Namespace) -> int:
    if args.json:
        print(json.dumps(api.spaces(), indent=2, default=str))
        return 0
    table = plain_table(title="Shipped search spaces (use as --space NAME)",
                        columns=("name", "description", "parameters", "objective", "cluster", "file"))
    for row in api.spaces():
        add_plain_row(table, row["name"], row["description"], str(row["parameters"]), row["objective"],
                      row["cluster"], row["file"])
    table_console().print(table)
    return 0
