"""A pytest plugin that times the suite: with TIANFENG_SUITE_RESULTS=DIR set, each pytest run
writes DIR/<name>.json (its selection, outcome counts and wall time), which
`scripts/suite_results.py` gathers into the results file the README quotes. Loaded by
tests/conftest.py; it writes nothing when the variable is unset."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
_STARTED = pytest.StashKey[float]()


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_STARTED] = time.monotonic()


def pytest_sessionfinish(session: pytest.Session) -> None:
    folder = os.environ.get("TIANFENG_SUITE_RESULTS")
    if not folder or hasattr(session.config, "workerinput"):  # an xdist worker: its controller writes
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    stats = reporter.stats if reporter else {}
    counts = {k: len({r.nodeid for r in stats.get(k, []) if hasattr(r, "nodeid")}) for k in OUTCOMES}
    part = {"markers": session.config.option.markexpr or "", "counts": counts, "tests": sum(counts.values()),
            "seconds": round(time.monotonic() - session.config.stash[_STARTED], 2),
            "processes": getattr(session.config.option, "numprocesses", None) or 1}
    name = os.environ.get("TIANFENG_SUITE_PART", "suite")
    Path(folder).mkdir(parents=True, exist_ok=True)
    (Path(folder) / f"{name}.json").write_text(json.dumps(part, indent=1) + "\n")
