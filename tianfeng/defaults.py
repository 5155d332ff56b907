"""Names and defaults shared by the library and the command line; light, so `--help` does not
import optuna and torch (tests/search/test_space.py checks the names match the registries)."""

from enum import StrEnum

SAMPLER_NAMES = ("tpe", "cmaes", "random", "grid", "qmc")
PRUNER_NAMES = ("asha", "sh", "hyperband", "median", "none")
# search --promote: none, each new proxy leader at full fidelity, or so with full runs at most half
# the time; auto: leader where the objective picks one best trial (level with balanced on time in
# the replays, ahead of it early in the budget), else none
PROMOTION_MODES = ("auto", "none", "leader", "balanced")
AUTO_PROMOTION = "leader"
DEFAULT_STORAGE = "sqlite:///tianfeng.db"
STORAGE_HELP = (f"the study database: a SQLAlchemy URL or a SQLite file path (default {DEFAULT_STORAGE}); "
                "postgresql://... for many workers or machines")
FAILURE_LIMIT = 3  # consecutive failures with one error that stop a search
DEFAULT_TRIALS = 30  # a search's trial budget
HEARTBEAT_S = 10  # seconds between a running trial's heartbeats ...
GRACE_S = 60  # ... and without one before the trial counts as dead
LEADER_AFTER = 3  # complete proxy trials before --promote leader's first promotion: the default pruner's reduction factor


class ObjectiveMode(StrEnum):
    """What a search optimises: the metric alone, the metric against the predicted wall time (a
    Pareto front), or the least predicted wall time that reaches a target metric."""
    ACCURACY = "accuracy"
    PARETO = "pareto"
    TIME_TO_TARGET = "time-to-target"


OBJECTIVE_MODES = tuple(m.value for m in ObjectiveMode)
