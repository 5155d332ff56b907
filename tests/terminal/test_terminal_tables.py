"""Tables that fit where they go: whole rows in a pipe or file (rich would cut them at 80
columns), folded cells, not cut ones, in a narrow terminal."""

from __future__ import annotations

import io

from rich.console import Console

from tianfeng.promotion.run import print_changes
from tianfeng.promotion.transfer import Change
from tianfeng.terminal.tables import add_plain_row, plain_table, table_console

LONG_RULE = "the target rung's epochs, with warm-up and every phase scaled by the same factor as the run"


def test_the_transfer_table_keeps_whole_rows_when_stderr_is_not_a_terminal(capsys, monkeypatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    print_changes([Change("phases.0.resolution_schedule", "6 ep @16 px", "18 ep @16 px", LONG_RULE)],
                  table_console(stderr=True))
    err = capsys.readouterr().err
    assert "phases.0.resolution_schedule" in err and LONG_RULE in err.replace("\n", " ")
    assert max(len(line) for line in err.splitlines()) > 80


def test_a_narrow_terminal_folds_a_cell_instead_of_cutting_it() -> None:
    table = plain_table("t", ("key", "rule"))
    add_plain_row(table, "phases.0.resolution_schedule", LONG_RULE)
    out = io.StringIO()
    Console(file=out, width=50).print(table)
    text = out.getvalue()
    assert "…" not in text and all(len(line) <= 50 for line in text.splitlines())
    key_column = [line.split("│")[1].strip() for line in text.splitlines() if line.startswith("│")]
    assert "".join(key_column) == "phases.0.resolution_schedule"  # the whole key, over lines
