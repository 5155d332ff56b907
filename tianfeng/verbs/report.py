"""`tianfeng report`: a study's self-contained HTML report."""

from __future__ import annotations

import argparse
import json
import logging
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


def report(study: str, *, storage: str = DEFAULT_STORAGE) -> Path:
    """Write the study's HTML report (reports/<study>.html) and return its path."""
    from tianfeng.reporting.build import build_report

    path = build_report(storage, study)
    logging.getLogger("tianfeng").info("report written to %s", path)
    return path


def command(args: argparse.Namespace) -> int:
    if args.scale is not None:
        from tianfeng.reporting.scale_study import build_scale_report

        path = build_scale_report(args.storage, args.scale, args.output)
    else:
        from tianfeng.reporting.build import build_report

        path = build_report(args.storage, args.study, args.output, flag=getattr(args, "study_flag", "--study"))
    if args.json:
        print(json.dumps({"report": str(path)}))
    else:
        print(f"report: {path}")
    return 0


VERB = Verb(
    "report", "write a study's self-contained HTML report",
    "Write one HTML file (plotly.js embedded, opens offline) with what was searched, what won and why, proxy "
    "against full scores and the promoted runs.",
    command,
    (("tianfeng report --study large_batch", "reports/large_batch.html"),
     ("tianfeng report --study large_batch -o /tmp/lb.html --json", "elsewhere, its path as JSON")),
    options=(ReportOptions,), arguments=add_study_positional, json=True)
