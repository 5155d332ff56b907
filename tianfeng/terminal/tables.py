"""Terminal tables whose every cell and title is plain text: study names, parameter values and
paths come from users and databases, and rich would read `[/red]` in them as markup. A cell
too wide for the terminal folds onto more lines rather than losing its end, and a table sent to
a pipe or file keeps its rows whole for the programs that read them."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable

from rich.console import Console
from rich.table import Table
from rich.text import Text

PIPE_WIDTH = 1000  # rich would cut every table to 80 columns where it sees no terminal; rows stay whole


def output_width(stream=None) -> int | None:
    """COLUMNS when set; the terminal's width for a terminal (None: rich asks it); PIPE_WIDTH for
    a pipe or file."""
    if os.environ.get("COLUMNS", "").isdigit():
        return int(os.environ["COLUMNS"])
    return None if (stream or sys.stdout).isatty() else PIPE_WIDTH


def table_console(stderr: bool = False) -> Console:
    """Where a command prints its tables: stdout, or stderr beside the logs."""
    return Console(width=output_width(sys.stderr if stderr else sys.stdout), stderr=stderr)


def plain_table(title: str, columns: Iterable[str]) -> Table:
    table = Table(title=Text(title), title_justify="left")
    for column in columns:
        table.add_column(Text(column), overflow="fold")
    return table


def add_plain_row(table: Table, *cells: object) -> None:
    table.add_row(*(Text(str(c)) for c in cells))
