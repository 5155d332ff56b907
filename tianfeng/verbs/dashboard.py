"""`tianfeng dashboard`: optuna-dashboard on the study database, with every study's curves."""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass

from tianfeng.core.errors import ConfigError
from tianfeng.defaults import DEFAULT_STORAGE, STORAGE_HELP
from tianfeng.options import option
from tianfeng.verbs import Verb
from tianfeng.verbs._study import add_study_positional

log = logging.getLogger("tianfeng.dashboard")


@dataclass(frozen=True)
class DashboardOptions:
    study: str | None = option(None, "refresh this study only (default: all)")
    storage: str = option(DEFAULT_STORAGE, STORAGE_HELP, show_default=False)
    host: str = option("127.0.0.1", "address to listen on")
    port: int = option(8080, "port")
    no_serve: bool = option(False, "save the curves and exit")


def publish_curves(study: str | None = None, *, storage: str = DEFAULT_STORAGE) -> list[str]:
    """Save every trial's per-epoch curves where optuna-dashboard draws them, for one study or
    (`study` None) all of `storage`'s; returns the studies done. Needs optuna-dashboard."""
    import optuna

    from tianfeng.hpo.results.dashboard import publish_curves as publish
    from tianfeng.promotion.run import load_study

    chosen = [load_study(storage, study, flag="--study")] if study else \
        [optuna.load_study(study_name=name, storage=storage) for name in optuna.get_all_study_names(storage)]
    for one in chosen:
        if not publish(one):
            raise ConfigError("dashboard", "", "needs optuna-dashboard: pip install 'tianfeng[dashboard]'")
    return [one.study_name for one in chosen]


def command(args: argparse.Namespace) -> int:
    from tianfeng.terminal.logs import quiet_optuna

    try:
        import optuna_dashboard
    except ImportError:
        raise ConfigError("dashboard", "", "needs optuna-dashboard: pip install 'tianfeng[dashboard]'") from None
    quiet_optuna()
    for name in publish_curves(args.study, storage=args.storage):
        log.info("study %s: per-epoch curves saved for the dashboard", name)
    if args.no_serve:
        return 0
    log.info("optuna-dashboard on http://%s:%d (Ctrl-C stops it)", args.host, args.port)
    optuna_dashboard.run_server(args.storage, host=args.host, port=args.port)
    return 0


VERB = Verb(
    "dashboard", "serve optuna-dashboard on the study database",
    "Save every study's per-epoch curves where optuna-dashboard draws them (pareto and time-to-target studies "
    "cannot report them to Optuna), then serve optuna-dashboard on the database until Ctrl-C. Needs the "
    "[dashboard] extra.",
    command,
    (("tianfeng dashboard", "serve optuna-dashboard on tianfeng.db"),
     ("tianfeng dashboard --study large_batch --no-serve", "refresh one study's curves and exit")),
    options=(DashboardOptions,), arguments=add_study_positional)
