"""The report templates: package data of `tianfeng.reporting` (the `jinja/` folder), loaded through
importlib by jinja's PackageLoader, so a wheel, an editable install and a checkout find them
alike, and a `reports/` folder of generated reports in the working directory never shadows them."""

from __future__ import annotations

import jinja2


def environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.PackageLoader("tianfeng.reporting", "jinja"), autoescape=True)


def script_json(fig) -> str:
    """Figure JSON safe inside <script>: no `</script>` or `<!--` can close or comment it out."""
    return fig.to_json().replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
