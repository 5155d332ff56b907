"""Who stops a spec's trials early, decided once: an Optuna pruner (past each trial's warm-up),
the peer rule, or nobody; the search's start line names the same decision."""

from __future__ import annotations

from dataclasses import dataclass

import optuna

from tianfeng.defaults import ObjectiveMode
from tianfeng.hpo.judge.past_warmup import PastWarmup
from tianfeng.hpo.judge.peers import PeerPruner
from tianfeng.hpo.sampling.registry import PRUNERS
from tianfeng.hpo.space.materialize import max_rung_epochs
from tianfeng.hpo.space.read import SearchSpace


@dataclass(frozen=True)
class Judging:
    pruner: optuna.pruners.BasePruner  # the study's: an Optuna pruner, the peer rule, or NopPruner
    label: str  # what stops trials early, in the search's start line

    @property
    def name(self) -> str:
        """The rule's one name, as the start line, the summary and the report show it."""
        return self.label.split(" (")[0]


def judging(space: SearchSpace, rung: str, pruner: str) -> Judging:
    """Optuna's pruners compare one objective, so pareto and time-to-target trials are judged by
    their peers (`PeerPruner`)."""
    nobody = optuna.pruners.NopPruner()
    if pruner == "none":
        return Judging(nobody, "none")
    if space.objective.mode != ObjectiveMode.ACCURACY:
        return Judging(PeerPruner(maximize=space.objective.direction == "maximize"),
                       "peers (the median of trials as fast or faster)")
    return Judging(PastWarmup(PRUNERS[pruner](max_rung_epochs(space, rung))), pruner)
