"""A search space pinned to one global batch size (and, for the naive baseline, to linear LR
scaling): the batch parameter becomes fixed, priors lose their batch value."""

from __future__ import annotations

import dataclasses

from tianfeng.core.errors import ConfigError
from tianfeng.core.run_config import derived
from tianfeng.defaults import ObjectiveMode
from tianfeng.hpo.space.expressions import Expression, ExpressionError
from tianfeng.hpo.space.read import Parameter, Prior, SearchSpace


def batch_parameter(space: SearchSpace) -> str | None:
    """The parameter the phases template reads its batch size from, if it reads exactly one."""
    if space.phases is None:
        return None
    from tianfeng.hpo.space.read import CONSTANTS

    names = space.phases.batch_size.names - set(CONSTANTS)  # `gpus * round(batch_size / gpus)` reads one
    return next(iter(names)) if len(names) == 1 else None


def _pinned_value(space: SearchSpace, name: str, batch: int) -> int:
    """The value of the batch parameter that gives the global `batch`: the batch itself, or its
    share per GPU when the template multiplies a per-GPU parameter (`gpus * per_gpu_batch`)."""
    expr = space.phases.batch_size
    env = dict(space.constants)
    try:
        one, two = (expr.evaluate({**env, name: v}) for v in (1, 2))
    except ExpressionError:
        return batch
    if one != 1 and two == 2 * one and batch % one == 0:
        return batch // int(one)
    return batch


def at_batch(space: SearchSpace, batch: int | None, *, assignments: dict[str, str] | None = None,
             priors: bool = True) -> SearchSpace:
    """`space` with every run's last-phase global batch equal to `batch` (None: unchanged).
    `assignments` adds or replaces `set:` entries (config key path -> expression text)."""
    if batch is not None and batch < 1:
        raise ConfigError("--batch-sizes", "", f"batch sizes must be >= 1, got {batch}")
    pinned = batch_parameter(space) if batch is not None else None
    value = _pinned_value(space, pinned, batch) if pinned is not None else None
    parameters = tuple(Parameter(p.name, "fixed", value=value, when=p.when) if p.name == pinned else p
                       for p in space.parameters)
    phases, base = space.phases, space.base
    if batch is None:
        pass
    elif phases is not None:
        phases = dataclasses.replace(phases, batch_size=Expression(str(batch)))
    else:  # no template: scale the base phases so the last one has `batch`
        base = derived(base, space.path, last_batch=batch)
    sets = dict(space.assignments)
    for key, text in (assignments or {}).items():
        sets[key] = Expression(text)
    kept: list[Prior] = []
    if priors:
        seen: set[str] = set()
        for prior in space.priors:
            params = {k: v for k, v in prior.params.items() if k != pinned}
            key = repr(sorted(params.items()))
            if key not in seen:  # priors that differed only in batch size are one trial now
                seen.add(key)
                kept.append(Prior(prior.name, params))
    # a batch-scaling study measures the metric at each batch: accuracy, whatever the space says
    objective = dataclasses.replace(space.objective, mode=ObjectiveMode.ACCURACY)
    return dataclasses.replace(space, base=base, parameters=parameters, phases=phases,
                               assignments=sets, priors=tuple(kept), objective=objective)
