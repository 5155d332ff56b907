"""`tianfeng dashboard`: the curves saved where optuna-dashboard draws them, then the dashboard."""

from __future__ import annotations

import argparse
import logging

from tianfeng import api
from tianfeng.terminal.logs import quiet_optuna
from tianfeng.trainers.config import ConfigError

log = logging.getLogger("tianfeng.dashboard")


def run_dashboard_command(args: argparse.Namespace) -> int:
    try:
        import optuna_dashboard
    except ImportError:
        raise ConfigError("dashboard", "", "needs optuna-dashboard: pip install 'tianfeng[dashboard]'") from None
    quiet_optuna()
    for name in api.publish_curves(args.study, storage=args.storage):
        log.info("study %s: per-epoch curves saved for the dashboard", name)
    if args.no_serve:
        return 0
    log.info("optuna-dashboard on http://%s:%d (Ctrl-C stops it)", args.host, args.port)
    optuna_dashboard.run_server(args.storage, host=args.host, port=args.port)
    return 0
