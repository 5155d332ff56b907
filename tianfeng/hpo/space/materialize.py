"""From sampled parameter values and a fidelity rung to the RunConfig the engine runs."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import Any

from tianfeng.core.errors import ConfigError
from tianfeng.core.run_config import RunConfig, config_from_dict, config_to_dict, with_changes
from tianfeng.hpo.space.expressions import ExpressionError
from tianfeng.hpo.space.schema import (
    Fidelity,
    Parameter,
    PhasesTemplate,
    SearchSpace,
    round_resolution,
)


def is_active(param, values: dict[str, Any]) -> bool:
    """A conditional parameter is active when its `when` holds for the values sampled so far."""
    if param.when is None:
        return True
    try:
        return bool(param.when.evaluate(values))
    except ExpressionError:  # it reads a parameter that is itself inactive
        return False


def sample_active(space: SearchSpace, choose: Callable[[Parameter], Any]) -> dict[str, Any]:
    """Values for every active parameter, in file order (a condition reads those above it);
    fixed parameters take their value, the others whatever `choose` returns."""
    values: dict[str, Any] = {}
    for p in space.parameters:
        if is_active(p, values):
            values[p.name] = p.value if p.type == "fixed" else choose(p)
    return values


def _set_path(tree: dict[str, Any], key_path: str, value: Any) -> None:
    *parents, last = key_path.split(".")
    node = tree
    for part in parents:
        node = node[part]
    current = node.get(last)
    if isinstance(current, int) and not isinstance(current, bool) and isinstance(value, float) \
            and value.is_integer():
        value = int(value)  # `batch / 2` is a float; an integer field wants an int
    node[last] = value


def split_epochs(total: int, weights: list[float]) -> list[int]:
    """`total` epochs in proportion to `weights`, each part at least 1 (largest remainder)."""
    if total < len(weights):
        raise ConfigError("", "phases", f"{total} epochs cannot fill {len(weights)} phases")
    spare = total - len(weights)
    exact = [spare * w / sum(weights) for w in weights]
    parts = [int(x) for x in exact]
    by_remainder = sorted(range(len(weights)), key=lambda i: exact[i] - parts[i], reverse=True)
    for i in by_remainder[: spare - sum(parts)]:
        parts[i] += 1
    return [p + 1 for p in parts]


MAX_STAGES = 64


def _number(t: PhasesTemplate, key: str, env: dict[str, Any], *, low: float, high: float) -> float:
    """A phases: expression's value: a finite number in [low, high], else a one-line error."""
    value = getattr(t, key).evaluate(env)
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise ConfigError("", f"phases.{key}", f"must give a number in [{low:g}, {high:g}]; "
                          f"{getattr(t, key).text!r} gives {value!r}")
    return value


def table_phases(t: PhasesTemplate, env: dict[str, Any]) -> list[dict[str, int]] | None:
    """The phases a `table:` expression lists ([epochs, resolution, batch] each), or None for
    an empty list (the ramp applies)."""
    if t.table is None:
        return None
    rows = t.table.evaluate(env)
    if rows == []:
        return None
    ok = isinstance(rows, list) and 0 < len(rows) <= MAX_STAGES and all(
        isinstance(r, list) and len(r) == 3 and all(isinstance(v, int) and not isinstance(v, bool) for v in r)
        and r[0] >= 1 and r[1] >= 4 and r[2] >= 1 for r in rows)
    if not ok:
        raise ConfigError("", "phases.table", f"must give a list of [epochs >= 1, resolution >= 4, batch >= 1] "
                          f"integers (at most {MAX_STAGES}), or []; {t.table.text!r} gives {rows!r}")
    return [{"epochs": e, "resolution": r, "batch_size": b} for e, r, b in rows]


def build_phases(t: PhasesTemplate, env: dict[str, Any], total_epochs: int) -> list[dict[str, int]]:
    """Progressive resizing: `stages` phases from start to end resolution; the last phase gets
    `final_stage_fraction` of the epochs; batch optionally grows as resolution shrinks (same
    pixels per batch at every stage). A `table:` that lists phases replaces all of it."""
    listed = table_phases(t, env)
    if listed is not None:
        return listed
    stages = int(_number(t, "stages", env, low=1, high=min(MAX_STAGES, total_epochs)))
    start = _number(t, "start_resolution", env, low=4, high=4096)
    end = _number(t, "end_resolution", env, low=4, high=4096)
    batch = int(_number(t, "batch_size", env, low=1, high=2**31))
    if stages == 1:
        return [{"epochs": total_epochs, "resolution": round_resolution(end), "batch_size": batch}]
    final = _number(t, "final_stage_fraction", env, low=0, high=1)
    if not 0 < final < 1:
        raise ConfigError("", "phases.final_stage_fraction", f"must be between 0 and 1, got {final:g}")
    weights = [(1 - final) / (stages - 1)] * (stages - 1) + [final]
    epochs = split_epochs(total_epochs, weights)
    scale_batch = bool(t.scale_batch_with_resolution.evaluate(env))
    phases: list[dict[str, int]] = []
    for i, e in enumerate(epochs):
        res = round_resolution(start + (end - start) * i / (stages - 1))
        b = max(8, int(8 * round(batch * (end / res) ** 2 / 8))) if scale_batch else batch
        if phases and (phases[-1]["resolution"], phases[-1]["batch_size"]) == (res, b):
            phases[-1]["epochs"] += e  # a stage like the one before (start = end): one phase
        else:
            phases.append({"epochs": e, "resolution": res, "batch_size": b})
    return phases


def rung_epochs_of(f: Fidelity, target_epochs: int) -> int:
    """A rung's epochs for a run whose target trains `target_epochs`."""
    if f.epoch_fraction is not None:
        return max(1, round(f.epoch_fraction * target_epochs))
    return f.epochs if f.epochs is not None else target_epochs


def optimizer_steps(phases: list[dict[str, int]], images: int) -> int:
    """Optimizer steps of a run over `images` training images (the engine drops the last
    partial batch, and takes at least one step an epoch)."""
    return sum(p["epochs"] * max(1, images // p["batch_size"]) for p in phases)


def apply_fidelity(raw: dict[str, Any], f: Fidelity, *, train_images: int | None = None,
                   min_steps: int = 0) -> None:
    """Shrink a run to rung `f`. With `train_images` (the whole training set) and `min_steps`,
    a rung that would leave fewer optimizer steps than min_steps (or than the full run has, if
    fewer) trains more instead: on more of the full run's data (the least that is enough), then,
    on all of it, on more epochs, up to the full run's. A large-batch trial at a few-epoch rung otherwise takes a handful of steps, and
    nothing about its recipe can be read from them."""
    full = copy.deepcopy(raw)
    _shrink(raw, f)
    if not train_images or not min_steps:
        return
    want = min(min_steps, optimizer_steps(full["phases"], int(train_images * full["data"]["fraction"])))

    def shrunk(rung: Fidelity) -> tuple[dict[str, Any], int]:
        out = copy.deepcopy(full)
        _shrink(out, rung)
        return out, optimizer_steps(out["phases"], int(train_images * out["data"]["fraction"]))

    if optimizer_steps(raw["phases"], int(train_images * raw["data"]["fraction"])) >= want:
        return
    rung = dataclasses.replace(f, epochs=sum(p["epochs"] for p in raw["phases"]), epoch_fraction=None)
    stretched, steps = shrunk(dataclasses.replace(rung, data_fraction=1.0))
    if steps >= want:  # the least data that gives enough steps at the rung's epochs
        low, high = f.data_fraction, 1.0
        for _ in range(30):
            middle = (low + high) / 2
            low, high = (low, middle) if shrunk(dataclasses.replace(rung, data_fraction=middle))[1] >= want else (middle, high)
        stretched = shrunk(dataclasses.replace(rung, data_fraction=high))[0]
    else:  # all the data, and the fewest more epochs
        for epochs in range(rung.epochs + 1, sum(p["epochs"] for p in full["phases"]) + 1):
            stretched, steps = shrunk(dataclasses.replace(rung, epochs=epochs, data_fraction=1.0))
            if steps >= want:
                break
    raw.clear()
    raw.update(stretched)


def _shrink(raw: dict[str, Any], f: Fidelity) -> None:
    """Fewer epochs (the schedule compressed in proportion), lower resolution, a data subset,
    a narrower model, a cheaper precision."""
    total = sum(p["epochs"] for p in raw["phases"])
    epochs = rung_epochs_of(f, total)
    if f.epoch_fraction is not None:
        epochs = max(epochs, len(raw["phases"]))  # every phase keeps an epoch
    if epochs != total:
        ratio = epochs / total
        for p, e in zip(raw["phases"], split_epochs(epochs, [p["epochs"] for p in raw["phases"]]),
                        strict=True):
            p["epochs"] = e
        raw["schedule"]["warmup_epochs"] = raw["schedule"]["warmup_epochs"] * ratio
        raw["schedule"]["step_milestones"] = [m * ratio for m in raw["schedule"]["step_milestones"]]
        raw["schedule"]["piecewise_epochs"] = [m * ratio for m in raw["schedule"]["piecewise_epochs"]]
    for p in raw["phases"]:
        p["resolution"] = round_resolution(p["resolution"] * f.resolution_scale)
    raw["data"]["fraction"] = raw["data"]["fraction"] * f.data_fraction
    if raw["model"]["name"] == "resnet_small":
        raw["model"]["width"] = max(2, round(raw["model"]["width"] * f.width_scale))
    if f.precision != "auto" or raw["precision"]["mode"] == "auto":
        raw["precision"]["mode"] = f.precision


def build_config(space: SearchSpace, values: dict[str, Any], rung: str, *, name: str | None = None,
                 run_dir: str | None = None, target: RunConfig | None = None) -> RunConfig:
    """The run of `values` at `rung`. A per-GPU batch beyond the target GPU's memory trains in
    micro-batches (gradient accumulation, priced by the wall-time model), as many as the target
    rung needs; a proxy uses the same count, so its BatchNorm sees what a GPU's would. `target`:
    the same values' target-rung config, where the caller has built it already."""
    cfg = config_from_dict(_raw_config(space, values, rung, name, run_dir), f"{space.path} [{rung}]")
    if cfg.accumulate_steps > 1 or space.cluster.device_memory_gib is None:
        return cfg  # the space chose, or nothing limits the batch
    from tianfeng.cost.memory import accumulation_needed

    if rung == "target":
        target = cfg
    elif target is None:
        target = config_from_dict(_raw_config(space, values, "target", None, None), f"{space.path} [target]")
    k = accumulation_needed(target, space.cluster.gpus, space.cluster.device_memory_gib,
                            in_channels=space.constants.get("channels", 3), classes=space.constants.get("classes", 1000))
    return cfg if k == 1 else with_changes(cfg, accumulate_steps=k)


def _raw_config(space: SearchSpace, values: dict[str, Any], rung: str, name: str | None,
                run_dir: str | None) -> dict[str, Any]:
    raw = config_to_dict(space.base)
    env = {**space.constants, **values}
    for key, expr in space.assignments.items():
        try:
            value = expr.evaluate(env)
        except ExpressionError:
            if expr.names <= env.keys():
                raise
            continue  # it reads an inactive parameter: the base value stays
        _set_path(raw, key, value)
    if space.phases is not None:
        total = sum(p.epochs for p in space.base.phases)
        if space.phases.epochs is not None:
            total = int(_number(space.phases, "epochs", env, low=1, high=100_000))
        raw["phases"] = build_phases(space.phases, env, total)
    if rung == "target":
        apply_fidelity(raw, space.target)
    else:
        apply_fidelity(raw, space.fidelities[rung], train_images=space.constants.get("all_train_images"),
                       min_steps=space.min_steps)
    if not raw["distributed"].get("emulate_gpus"):  # BatchNorm as each GPU of the target computes it
        raw["distributed"]["emulate_gpus"] = space.cluster.gpus if space.cluster.gpus > 1 else 0
        raw["distributed"]["emulate_gpus_per_node"] = space.cluster.gpus_per_node if space.cluster.gpus > 1 else 0
    if name is not None:
        raw["name"] = name
    if run_dir is not None:
        raw["run_dir"] = run_dir
    return raw


def max_rung_epochs(space: SearchSpace, rung: str) -> int:
    """The most epochs a trial at `rung` trains: the rung's own count, or with an epoch fraction
    the larger of the space's two corners (epochs grow with the searched epoch budget)."""
    import functools

    f = space.fidelities[rung]
    if f.epoch_fraction is None and not space.min_steps:
        most = f.epochs or space.base.total_epochs
    else:
        from tianfeng.hpo.space.schema import corner_value

        most = max(build_config(space, sample_active(space, functools.partial(corner_value, low=low)), rung).total_epochs
                   for low in (True, False))
    return most
