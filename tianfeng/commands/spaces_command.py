"""`tianfeng spaces`: the shipped search spaces, their descriptions and how to use them."""

from __future__ import annotations

import argparse

from tianfeng.shipped_spaces import shipped_spaces
from tianfeng.tables import add_plain_row, plain_table
from trainers.yaml_input import read_yaml


def run_spaces_command(args: argparse.Namespace) -> int:
    from rich.console import Console

    table = plain_table(title="Shipped search spaces (use as --space NAME)",
                        columns=("name", "description", "parameters", "objective", "file"))
    for path in shipped_spaces():
        raw = read_yaml(path)
        objective = (raw.get("objective") or {}).get("mode", "accuracy")
        add_plain_row(table, path.name, str(raw.get("description", "")), str(len(raw.get("parameters") or {})),
                      objective, str(path))
    Console(width=200, soft_wrap=True).print(table)
    return 0
