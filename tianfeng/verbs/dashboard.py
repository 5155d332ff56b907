"""`tianfeng dashboard`: optuna-dashboard on the study database, with every study's curves."""

from __future__ import annotations

from dataclasses import dataclass

from tianfeng.defaults import DEFAULT_STORAGE, STORAGE_HELP
from tianfeng.options import option
from tianfeng.verbs import Verb
from tianfeng.verbs._study import add_study_positional


@dataclass(frozen=True)
class DashboardOptions:
    study: str | None = option(None, "refresh this study only (default: all)")
    storage: str = option(DEFAULT_STORAGE, STORAGE_HELP, show_default=False)
    host: str = option("127.0.0.1", "address to listen on")
    port: int = option(8080, "port")
    no_serve: bool = option(False, "save the curves and exit")


VERB = Verb(
    "dashboard", "serve optuna-dashboard on the study database",
    "Save every study's per-epoch curves where optuna-dashboard draws them (pareto and time-to-target studies "
    "cannot report them to Optuna), then serve optuna-dashboard on the database until Ctrl-C. Needs the "
    "[dashboard] extra.",
    "tianfeng.commands.dashboard_command:run_dashboard_command",
    (("tianfeng dashboard", "serve optuna-dashboard on tianfeng.db"),
     ("tianfeng dashboard --study large_batch --no-serve", "refresh one study's curves and exit")),
    options=DashboardOptions, arguments=add_study_positional)
