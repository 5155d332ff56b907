"""Logging set-up: everything human-readable goes to stderr; results go to stdout or files."""

from __future__ import annotations

import logging
import sys


def setup_logging(debug: bool = False) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", datefmt="%H:%M:%S"))
    root = logging.getLogger("tianfeng")
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if debug else logging.INFO)
    root.propagate = False
    # a search quiets the engine's epoch lines for its trials; a new command starts from scratch
    # (matters when commands run in one process: the Python API, tests)
    logging.getLogger("tianfeng.engine").setLevel(logging.NOTSET)


def quiet_optuna() -> None:
    """Optuna's own log lines ("A new study created", "There are no complete trials") are for
    --debug: tianfeng says what matters in its own words. Errors still show."""
    import optuna

    debug = logging.getLogger("tianfeng").isEnabledFor(logging.DEBUG)
    optuna.logging.set_verbosity(optuna.logging.WARNING if debug else optuna.logging.ERROR)
