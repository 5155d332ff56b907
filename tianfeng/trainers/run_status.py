"""How a run ended, in a module of its own: the words the platform's trial statuses reuse, read
without importing torch."""

from enum import StrEnum


class RunStatus(StrEnum):
    """How a run ended."""
    COMPLETED = "completed"
    DIVERGED = "diverged"  # a non-finite loss on any rank, or collapsed to a uniform guess (collapse.py)
    PRUNED = "pruned"  # stopped by its epoch callback (a pruner)
    STOPPED = "stopped"  # max_steps or engine.stop_after_epochs reached, or stopped by the callback
