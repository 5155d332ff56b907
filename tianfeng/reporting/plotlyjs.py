"""Which plotly.js a report embeds. Reports draw only scatter and bar traces, so when setup.sh
has installed plotly.js's basic bundle (npm `plotly.js-basic-dist-min`, the same version the
plotly package ships) a report embeds that: a quarter of the size, and it opens in about half
the time. Otherwise, or if a figure needs another trace type, the full bundle from the plotly
package is embedded; either way the file opens offline."""

from __future__ import annotations

import functools
import logging
import os
import re
import sys
from pathlib import Path

from plotly.offline import get_plotlyjs, get_plotlyjs_version

log = logging.getLogger("tianfeng.report")

BASIC_PACKAGE = "plotly.js-basic-dist-min"
BASIC_TRACES = frozenset({"scatter", "bar", "pie"})


def basic_bundle_path() -> Path:
    override = os.environ.get("TIANFENG_PLOTLYJS_BASIC")
    if override:
        return Path(override)
    return Path(sys.prefix) / "share" / "tianfeng" / "node_modules" / BASIC_PACKAGE / "plotly-basic.min.js"


@functools.cache
def _basic_bundle() -> str | None:
    path = basic_bundle_path()
    if not path.is_file():
        log.info("reports embed the full plotly.js: %s is not installed (scripts/setup.sh installs it)",
                 BASIC_PACKAGE)
        return None
    text = path.read_text()
    header = re.search(r"plotly\.js[^\n]*? v(\d+\.\d+\.\d+)", text[:400])
    if header is None or header.group(1) != get_plotlyjs_version():
        log.warning("%s is not plotly.js v%s, the version the plotly package draws for; "
                    "embedding the full bundle", path, get_plotlyjs_version())
        return None
    return text


def bundle_for(figures: list) -> str:
    """The smallest plotly.js that draws every one of `figures` (plotly Figures or None)."""
    traces = {trace.type or "scatter" for fig in figures if fig is not None for trace in fig.data}
    basic = _basic_bundle() if traces <= BASIC_TRACES else None
    return basic if basic is not None else get_plotlyjs()
