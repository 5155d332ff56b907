"""`tianfeng report`: a study's self-contained HTML report."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tianfeng.defaults import DEFAULT_STORAGE, STORAGE_HELP
from tianfeng.options import option
from tianfeng.verbs import Verb
from tianfeng.verbs._study import add_study_positional


@dataclass(frozen=True)
class ReportOptions:
    study: str | None = option(None, "study name (default: the only study)")
    storage: str = option(DEFAULT_STORAGE, STORAGE_HELP, show_default=False)
    output: Path | None = option(None, "default reports/<study>.html", short="-o")
    scale: str | None = option(None, "write the report of a batch-scaling study (tianfeng scale) instead",
                               metavar="NAME")


VERB = Verb(
    "report", "write a study's self-contained HTML report",
    "Write one HTML file (plotly.js embedded, opens offline) with what was searched, what won and why, proxy "
    "against full scores and the promoted runs.",
    "tianfeng.reporting.build:run_report_command",
    (("tianfeng report --study large_batch", "reports/large_batch.html"),
     ("tianfeng report --study large_batch -o /tmp/lb.html --json", "elsewhere, its path as JSON")),
    options=ReportOptions, arguments=add_study_positional, json=True)
