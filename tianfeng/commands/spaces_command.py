"""`tianfeng spaces`: the shipped search spaces, their descriptions and how to use them."""

from __future__ import annotations

import argparse

from tianfeng import api
from tianfeng.terminal.tables import add_plain_row, plain_table


def run_spaces_command(args: argparse.Namespace) -> int:
    from rich.console import Console

    table = plain_table(title="Shipped search spaces (use as --space NAME)",
                        columns=("name", "description", "parameters", "objective", "cluster", "file"))
    for row in api.spaces():
        add_plain_row(table, row["name"], row["description"], str(row["parameters"]), row["objective"],
                      row["cluster"], row["file"])
    Console(width=200, soft_wrap=True).print(table)
    return 0
