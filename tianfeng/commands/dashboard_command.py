"""`tianfeng dashboard`: the curves saved where optuna-dashboard draws them, then the dashboard."""

from __future__ import annotations

import argparse
import logging

import optuna

from tianfeng.hpo.dashboard import publish_curves
from tianfeng.logs import quiet_optuna
from tianfeng.trainers.config import ConfigError

log = logging.getLogger("tianfeng.dashboard")


def run_dashboard_command(args: argparse.Namespace) -> int:
    try:
        import optuna_dashboard
    except ImportError:
        raise ConfigError("dashboard", "", "needs optuna-dashboard: pip install 'tianfeng[dashboard]'") from None
    quiet_optuna()
    names = optuna.get_all_study_names(args.storage)
    if args.study is not None and args.study not in names:
        raise ConfigError("STUDY", args.study, f"no such study in {args.storage}; it holds: {', '.join(names) or 'none'}")
    for name in [args.study] if args.study else names:
        publish_curves(optuna.load_study(study_name=name, storage=args.storage))
        log.info("study %s: per-epoch curves saved for the dashboard", name)
    if args.no_serve:
        return 0
    log.info("optuna-dashboard on http://%s:%d (Ctrl-C stops it)", args.host, args.port)
    optuna_dashboard.run_server(args.storage, host=args.host, port=args.port)
    return 0
