"""What `--promote auto` stands for in a search: each new leader trained whole at once (`leader`)
where the objective picks one best trial and the workers run here, else none. Replayed on two
recorded pools of cifar5-dev recipes, on seeds held out from every earlier choice, promoting
leaders at once reached the pools' top-5% scores as soon as `balanced` did, seed by seed, and had a
whole run's score earlier in the budget (docs/results.md, "Replayed searches on a recorded pool")."""

from __future__ import annotations

from tianfeng.defaults import AUTO_PROMOTION, ObjectiveMode
from tianfeng.hpo.options import SearchOptions
from tianfeng.hpo.space.read import SearchSpace


def resolve_promotion(options: SearchOptions, space: SearchSpace, rung: str) -> tuple[str, str]:
    """The promotion mode `options.promote` stands for at `rung`, and why, as the search's first
    log line says it."""
    if options.promote != "auto":
        return options.promote, "as asked"
    if space.objective.mode == ObjectiveMode.PARETO:
        return "none", ("auto: a Pareto front has no one best trial to train whole; promote from it with "
                        "tianfeng promote --fastest-to LEVEL")
    if options.backend != "optuna" or options.launcher != "local":
        where = "--backend ray" if options.backend != "optuna" else f"--launcher {options.launcher}"
        return "none", f"auto: with {where} no worker here can pause while a full run trains"
    if rung == "target":
        return "none", "auto: the target rung's trials are whole runs already"
    return AUTO_PROMOTION, (f"auto: {space.objective.mode} picks one best trial, so each new leader trains whole "
                            "at once while the other workers wait")
