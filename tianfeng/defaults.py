"""Names and defaults shared by the library and the command line; light, so `--help` does not
import optuna and torch (search/registry.py checks they match the registries)."""

SAMPLER_NAMES = ("tpe", "cmaes", "random", "grid", "qmc")
PRUNER_NAMES = ("asha", "sh", "hyperband", "median", "none")
DEFAULT_STORAGE = "sqlite:///tianfeng.db"
OBJECTIVE_MODES = ("accuracy", "pareto", "time-to-target")
