"""Terminal tables whose every cell and title is plain text: study names, parameter values and
paths come from users and databases, and rich would read `[/red]` in them as markup."""

from __future__ import annotations

from collections.abc import Iterable

from rich.table import Table
from rich.text import Text


def plain_table(title: str, columns: Iterable[str]) -> Table:
    table = Table(title=Text(title), title_justify="left")
    for column in columns:
        table.add_column(Text(column))
    return table


def add_plain_row(table: Table, *cells: object) -> None:
    table.add_row(*(Text(str(c)) for c in cells))
