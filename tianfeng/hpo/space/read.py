"""Search spaces: the YAML file that says what a study searches and how cheaply.

A space has a `base` run config, sampled `parameters` (float, int, categorical, fixed; optionally
conditional with `when`), `set` (config key paths filled from parameters by safe expressions),
an optional `phases` template (schedule-valued parameters: stages, resolutions, batch sizes),
`fidelities` (the proxy ladder and the full-fidelity `target`), the `objective`, and `priors`
(published recipes enqueued as the first trials). Everything is checked at load time.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tianfeng.core.errors import ConfigError
from tianfeng.core.names import STUDY_MAX_LENGTH, check_name
from tianfeng.core.run_config import RunConfig, config_from_dict, config_to_dict
from tianfeng.core.yaml_input import parse_yaml, read_yaml
from tianfeng.cost.cluster import ClusterSpec, read_cluster, with_overrides
from tianfeng.cost.space_constants import space_constants
from tianfeng.defaults import OBJECTIVE_MODES, ObjectiveMode
from tianfeng.hpo.space.expressions import Expression, ExpressionError
from tianfeng.hpo.space.schema import (
    ACCURACY_METRICS,
    CLUSTER_CONSTANTS,
    CONSTANTS,
    DEFAULT_MIN_STEPS,
    METRICS,
    PARAMETER_TYPES,
    PRECISIONS,
    Fidelity,
    Objective,
    Parameter,
    PhasesTemplate,
    Prior,
    SearchSpace,
    corner_value,
    round_resolution,
)

__all__ = ["ACCURACY_METRICS", "CONSTANTS", "METRICS", "OBJECTIVE_MODES", "Fidelity", "Objective", "Parameter",
           "PhasesTemplate", "Prior", "SearchSpace", "corner_value", "load_space", "parse_space", "per_gpu_range",
           "round_resolution"]

log = logging.getLogger("tianfeng.search")
PRIORS_TOLD_ENV = "TIANFENG_PRIORS_TOLD"  # priors left out, said once per command: its worker processes inherit it


def _first_telling(key: str) -> bool:
    """Whether `key` is new to this command (this process or the one that started it); it is
    then recorded for both."""
    told = os.environ.get(PRIORS_TOLD_ENV, "").split("\n")
    if key in told:
        return False
    os.environ[PRIORS_TOLD_ENV] = "\n".join([*filter(None, told), key])
    return True

# ---------------------------------------------------------------------------------------------
# Loading


class _Reader:
    """Reads one mapping of the file, turning every problem into a ConfigError with its key path."""

    def __init__(self, source: str, path: str, raw: Any, allowed: tuple[str, ...]) -> None:
        if not isinstance(raw, dict):
            raise ConfigError(source, path or "(top level)", f"must be a mapping with keys {', '.join(allowed)}")
        unknown = sorted(set(map(str, raw)) - set(allowed))
        if unknown:
            raise ConfigError(source, self._join(path, unknown[0]),
                              f"unknown key; allowed: {', '.join(allowed)}")
        self.source, self.path, self.raw = source, path, raw

    @staticmethod
    def _join(path: str, key: str) -> str:
        return f"{path}.{key}" if path else key

    def key(self, name: str) -> str:
        return self._join(self.path, name)

    def error(self, name: str, message: str) -> ConfigError:
        return ConfigError(self.source, self.key(name), message)

    def number(self, name: str, default: Any = None, *, required: bool = False, integer: bool = False,
               gt: float | None = None, ge: float | None = None, le: float | None = None) -> Any:
        if name not in self.raw:
            if required:
                raise self.error(name, "is required")
            return default
        value = self.raw[name]
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                value = float(value)
        kind = "an integer" if integer else "a finite number"
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or (
                integer and not float(value).is_integer()):
            raise self.error(name, f"must be {kind}; got {value!r}")
        if (gt is not None and not value > gt) or (ge is not None and not value >= ge) or (
                le is not None and not value <= le):
            bounds = " and ".join(f"{s} {b:g}" for s, b in ((">", gt), (">=", ge), ("<=", le)) if b is not None)
            raise self.error(name, f"must be {bounds}, got {value!r}")
        return int(value) if integer else value

    def choice(self, name: str, allowed: tuple[str, ...], default: str) -> str:
        value = self.raw.get(name, default)
        if value not in allowed:
            raise self.error(name, f"must be one of {', '.join(allowed)}; got {value!r}")
        return value

    def expression(self, name: str, default: Any = None, *, required: bool = False) -> Expression:
        if name not in self.raw and required:
            raise self.error(name, "is required")
        value = self.raw.get(name, default)
        if isinstance(value, bool | int | float):
            value = repr(value)
        if not isinstance(value, str):
            raise self.error(name, f"must be a number or an expression; got {value!r}")
        try:
            return Expression(value)
        except ExpressionError as exc:
            raise self.error(name, str(exc)) from None


def _read_parameter(source: str, name: str, raw: Any,
                    constants: Callable[[set[str]], dict[str, int]] = lambda names: {}) -> Parameter:
    path = f"parameters.{name}"
    if name in CONSTANTS:
        raise ConfigError(source, path, f"{name!r} is a name every expression reads (the cluster's or the "
                          f"data's: {', '.join(CONSTANTS)}); choose another parameter name")
    if not isinstance(raw, dict):
        raise ConfigError(source, path, f"must be a mapping with a type ({', '.join(PARAMETER_TYPES)})")
    kind = raw.get("type")
    if kind not in PARAMETER_TYPES:
        raise ConfigError(source, f"{path}.type", f"must be one of {', '.join(PARAMETER_TYPES)}; got {kind!r}")
    allowed = {"float": ("type", "low", "high", "log", "step", "when"),
               "int": ("type", "low", "high", "log", "step", "when"),
               "categorical": ("type", "choices", "when"),
               "fixed": ("type", "value", "when")}[kind]
    r = _Reader(source, path, raw, allowed)
    when = r.expression("when") if "when" in raw else None
    if kind == "fixed":
        if "value" not in raw:
            raise r.error("value", "is required for a fixed parameter")
        return Parameter(name, kind, value=raw["value"], when=when)
    if kind == "categorical":
        choices = raw.get("choices")
        if not isinstance(choices, list) or not choices:
            raise r.error("choices", "must be a non-empty list")
        if any(isinstance(c, dict | list) for c in choices):
            raise r.error("choices", "must hold numbers, strings or booleans")
        if len(set(map(repr, choices))) != len(choices):
            raise r.error("choices", f"must not repeat a value; got {choices}")
        return Parameter(name, kind, choices=tuple(choices), when=when)
    integer = kind == "int"
    bounds = None
    if isinstance(raw.get("low"), str) or isinstance(raw.get("high"), str):
        bounds = (str(raw.get("low")), str(raw.get("high")))
        raw = {**raw, **{k: _bound(r, k, constants, integer) for k in ("low", "high") if isinstance(raw.get(k), str)}}
        r = _Reader(source, path, raw, allowed)
    low = r.number("low", required=True, integer=integer)
    high = r.number("high", required=True, integer=integer)
    if not high > low and bounds is not None:  # the cluster or the data leave no room
        read = sorted({n for b in bounds for n in _names(b)} & set(CONSTANTS))
        given = ", ".join(f"{n} {constants(set(read))[n]}" for n in read)
        raise r.error("high", f"{bounds[1]} = {high:g} is not above low {bounds[0]} = {low:g} with {given}: no "
                              "recipe of this range fits this cluster and data (fewer GPUs, more data, or "
                              "cluster.min_per_gpu_batch / cluster.memory_gib)")
    if not high > low:
        raise r.error("high", f"must be > low ({low:g}), got {high:g}")
    log = raw.get("log", False)
    if not isinstance(log, bool):
        raise r.error("log", f"must be true or false; got {log!r}")
    if log and low <= 0:
        raise r.error("low", f"must be > 0 when log is true, got {low:g}")
    step = r.number("step", integer=integer, gt=0)
    if step is not None and log:
        raise r.error("step", "cannot be combined with log: true")
    return Parameter(name, kind, low=low, high=high, log=log, step=step, when=when, bounds=bounds)


def _names(text: str) -> set[str]:
    try:
        return Expression(text).names
    except ExpressionError:
        return set()


def _bound(r: _Reader, key: str, constants: Callable[[set[str]], dict[str, int]], integer: bool) -> Any:
    """A range bound written as an expression of the cluster's and the data's sizes, e.g.
    `high: "min(8192, train_images / 4)"`: its value for this data and cluster."""
    try:
        expr = Expression(r.raw[key])
    except ExpressionError as exc:
        raise r.error(key, str(exc)) from None
    unknown = sorted(expr.names - set(CONSTANTS))
    if unknown:
        raise r.error(key, f"unknown name {unknown[0]!r}; a bound reads only {', '.join(CONSTANTS)}")
    try:
        value = expr.evaluate(constants(expr.names))
    except ExpressionError as exc:
        raise r.error(key, str(exc)) from None
    if integer and isinstance(value, float) and math.isfinite(value):
        value = int(value)  # a bound of an int range rounds down
    return value


def _read_fidelity(source: str, name: str, raw: Any) -> Fidelity:
    r = _Reader(source, f"fidelities.{name}", raw,
                ("epochs", "epoch_fraction", "resolution_scale", "data_fraction", "width_scale", "precision"))
    if "epochs" in raw and "epoch_fraction" in raw:
        raise r.error("epoch_fraction", "give epochs (a fixed count) or epoch_fraction (a share of each "
                                        "trial's target epochs), not both")
    return Fidelity(name=name,
                    epochs=r.number("epochs", integer=True, ge=1),
                    epoch_fraction=r.number("epoch_fraction", gt=0, le=1),
                    resolution_scale=r.number("resolution_scale", 1.0, gt=0, le=4),
                    data_fraction=r.number("data_fraction", 1.0, gt=0, le=1),
                    width_scale=r.number("width_scale", 1.0, gt=0, le=8),
                    precision=r.choice("precision", PRECISIONS, "auto"))


def load_space(path: str | Path, *, data: str | None = None, gpus: int | None = None,
               gpus_per_node: int | None = None, profile: str | None = None) -> SearchSpace:
    """Load and check a space file; `data` replaces the base run's data.source, `gpus` and
    `gpus_per_node` the cluster section's, and `profile` (a measured throughput profile) its
    device figures. A bare name that is not a file names a shipped space."""
    from tianfeng.hpo.space.shipped import resolve_space

    path = resolve_space(path)
    return _parse_raw(read_yaml(path), str(path), data=data, gpus=gpus, gpus_per_node=gpus_per_node,
                      profile=profile)


def parse_space(text: str, source: str, *, data: str | None = None, gpus: int | None = None,
                gpus_per_node: int | None = None, stored_format: int = 2, profile: str | None = None,
                corners: bool = True) -> SearchSpace:
    """Check a space given as YAML text; `source` names it in errors (and is its path).
    `stored_format` 1 re-reads a space stored by a study made before format 2: its priors may
    leave parameters out and its rungs have no min_steps guard, as when its trials ran. `corners`
    False: a study's stored space, whose corners were built and checked when its search began,
    is not built again."""
    return _parse_raw(parse_yaml(text, source), source, data=data, gpus=gpus, gpus_per_node=gpus_per_node,
                      legacy=stored_format < 2, profile=profile, corners=corners)


def _parse_raw(raw: Any, source: str, *, data: str | None, gpus: int | None = None,
               gpus_per_node: int | None = None, legacy: bool = False, profile: str | None = None,
               corners: bool = True) -> SearchSpace:
    top = _Reader(source, "", raw, ("name", "description", "base", "parameters", "set", "phases",
                                     "fidelities", "search_fidelity", "objective", "priors", "cluster",
                                     "min_steps"))
    name = raw.get("name", Path(source).stem)
    check_name(name, source, "name", max_length=STUDY_MAX_LENGTH)  # the default study name

    base_raw = raw.get("base") or {}
    if not isinstance(base_raw, dict):
        raise top.error("base", "must be a run config mapping (as for tianfeng train --config)")
    base_raw = dict(base_raw)
    if data is not None:
        base_raw["data"] = {**(base_raw.get("data") or {}), "source": data}
    try:
        base = config_from_dict(base_raw, source)
    except ConfigError as exc:
        raise ConfigError(source, f"base.{exc.key_path}", exc.message) from None

    cluster = with_overrides(read_cluster(source, raw.get("cluster")), gpus=gpus, gpus_per_node=gpus_per_node,
                             profile=profile)
    constants: dict[str, int] = {}

    def known_constants(names: set[str] | None = None) -> dict[str, int]:
        """The constants `names` read: the cluster's alone need no data (a space for a data set
        that is elsewhere still loads); None: all of them."""
        with_data = names is None or not names <= set(CLUSTER_CONSTANTS)
        if ("train_images" if with_data else "gpus") not in constants:
            constants.update(space_constants(base, cluster, with_data=with_data))
        return constants

    params_raw = raw.get("parameters") or {}
    if not isinstance(params_raw, dict) or not params_raw:
        raise top.error("parameters", "must map at least one parameter name to its definition")
    parameters = tuple(_read_parameter(source, str(n), p, known_constants) for n, p in params_raw.items())
    names = {p.name for p in parameters}
    earlier: set[str] = set()
    for p in parameters:
        if p.when is not None:
            unknown = sorted(p.when.names - earlier)
            if unknown:
                raise ConfigError(source, f"parameters.{p.name}.when",
                                  f"unknown name {unknown[0]!r}; a condition reads parameters listed "
                                  f"above it: {', '.join(sorted(earlier)) or 'none'}")
        earlier.add(p.name)

    assignments = _read_assignments(source, raw.get("set") or {}, names | set(CONSTANTS), base)
    phases = _read_phases(source, raw.get("phases"), names | set(CONSTANTS))
    fidelities = _read_fidelities(source, raw.get("fidelities"))
    search_fidelity = raw.get("search_fidelity", next(iter(fidelities)))
    if search_fidelity not in fidelities:
        raise top.error("search_fidelity", f"must be one of {', '.join(fidelities)}; got {search_fidelity!r}")
    objective = _read_objective(source, raw.get("objective") or {})
    priors = _read_priors(source, raw.get("priors") or [], parameters, complete=not legacy)
    min_steps = raw.get("min_steps", 0 if legacy else DEFAULT_MIN_STEPS)
    if isinstance(min_steps, bool) or not isinstance(min_steps, int) or min_steps < 0:
        raise top.error("min_steps", f"must be an integer >= 0 (0: no guard); got {min_steps!r}")
    read = {n for e in [*assignments.values(), *(vars(phases).values() if phases else ())] if e for n in e.names}
    if read & set(CONSTANTS):
        known_constants(read & set(CONSTANTS))
    elif min_steps:
        # the guard counts steps on the searched data; a space whose data is elsewhere (ImageNet
        # on the cluster) is loaded without it and gets it where its trials run
        with contextlib.suppress(ConfigError):
            known_constants()
    space = SearchSpace(source, name, base, parameters, assignments, phases, fidelities,
                        search_fidelity, objective, priors, cluster, constants, min_steps)
    if corners:
        _check_builds(space)
    return space


def _read_assignments(source: str, raw: Any, names: set[str], base: RunConfig) -> dict[str, Expression]:
    if not isinstance(raw, dict):
        raise ConfigError(source, "set", "must map config key paths (e.g. optimizer.lr) to expressions")
    known = _config_paths(config_to_dict(base))
    out = {}
    for key, _value in raw.items():
        key = str(key)
        if key not in known:
            close = sorted(k for k in known if k.split(".")[-1] == key.split(".")[-1])
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ConfigError(source, f"set.{key}", f"is not a run config key{hint}")
        if key == "phases" or key.startswith("phases."):
            raise ConfigError(source, f"set.{key}", "phases are built by the phases: section")
        r = _Reader(source, "set", raw, tuple(map(str, raw)))
        expr = r.expression(key)
        unknown = sorted(expr.names - names)
        if unknown:
            raise ConfigError(source, f"set.{key}",
                              _unknown(unknown[0], names))
        out[key] = expr
    return out


def _config_paths(tree: dict[str, Any], prefix: str = "") -> set[str]:
    paths = set()
    for k, v in tree.items():
        path = f"{prefix}{k}"
        paths.add(path)
        if isinstance(v, dict):
            paths |= _config_paths(v, f"{path}.")
    return paths


def _read_phases(source: str, raw: Any, names: set[str]) -> PhasesTemplate | None:
    if raw is None:
        return None
    keys = ("epochs", "stages", "start_resolution", "end_resolution", "batch_size", "final_stage_fraction",
            "scale_batch_with_resolution", "table")
    r = _Reader(source, "phases", raw, keys)
    defaults = {"stages": 1, "final_stage_fraction": 0.25, "scale_batch_with_resolution": False}
    exprs: dict[str, Expression | None] = {"epochs": None, "table": None}
    for key in keys:
        if key in ("epochs", "table") and key not in raw:
            continue
        expr = r.expression(key, defaults.get(key), required=key not in defaults)
        unknown = sorted(expr.names - names)
        if unknown:
            raise r.error(key, _unknown(unknown[0], names))
        exprs[key] = expr
    return PhasesTemplate(**exprs)


def _read_fidelities(source: str, raw: Any) -> dict[str, Fidelity]:
    if not isinstance(raw, dict) or "target" not in raw:
        raise ConfigError(source, "fidelities", "must map rung names to proxy knobs and include "
                                                "`target`, the full-fidelity run")
    rungs = {str(n): _read_fidelity(source, str(n), f or {}) for n, f in raw.items()}
    if len(rungs) < 2:
        raise ConfigError(source, "fidelities", "must list at least one proxy rung besides target")
    return {n: f for n, f in rungs.items() if n != "target"} | {"target": rungs["target"]}


def _read_objective(source: str, raw: Any) -> Objective:
    r = _Reader(source, "objective", raw, ("metric", "direction", "at", "constraints", "mode", "target",
                                          "min_accuracy"))
    metric = r.choice("metric", METRICS, "val_top1")
    direction = r.choice("direction", ("maximize", "minimize"), "maximize")
    at = r.choice("at", ("final", "best"), "final")
    mode = ObjectiveMode(r.choice("mode", OBJECTIVE_MODES, ObjectiveMode.ACCURACY))
    target = r.number("target")
    if mode == ObjectiveMode.TIME_TO_TARGET and target is None:
        raise r.error("target", f"is required with mode time-to-target: the {metric} the search rung must reach")
    min_accuracy = r.number("min_accuracy")
    if min_accuracy is not None and (direction != "maximize" or metric not in ACCURACY_METRICS):
        raise r.error("min_accuracy", f"applies to a maximised accuracy metric ({', '.join(ACCURACY_METRICS)}); "
                      f"the objective is to {direction} {metric}")
    if min_accuracy is not None and not 0 <= min_accuracy < 100:
        raise r.error("min_accuracy", f"must be a percentage in [0, 100), got {min_accuracy}")
    constraints_raw = raw.get("constraints") or []
    if not isinstance(constraints_raw, list):
        raise r.error("constraints", "must be a list of conditions such as 'samples_per_s >= 500'")
    constraints = []
    for i, text in enumerate(constraints_raw):
        try:
            expr = Expression(str(text))
        except ExpressionError as exc:
            raise r.error(f"constraints.{i}", str(exc)) from None
        unknown = sorted(expr.names - set(METRICS))
        if unknown:
            raise r.error(f"constraints.{i}", f"unknown metric {unknown[0]!r}; allowed: {', '.join(METRICS)}")
        constraints.append(expr)
    return Objective(metric, direction, at, tuple(constraints), mode, target, min_accuracy)


def _read_priors(source: str, raw: Any, parameters: tuple[Parameter, ...], *,
                 complete: bool = True) -> tuple[Prior, ...]:
    if not isinstance(raw, list):
        raise ConfigError(source, "priors", "must be a list of {name, params}")
    by_name = {p.name: p for p in parameters}
    priors = []
    for i, item in enumerate(raw):
        r = _Reader(source, f"priors.{i}", item, ("name", "params", "partial"))
        params = item.get("params")
        if not isinstance(params, dict):
            raise r.error("params", "must map parameter names to values")
        for key, value in params.items():
            p = by_name.get(key)
            if p is None:
                raise r.error(f"params.{key}", f"is not a parameter; parameters are: {', '.join(by_name)}")
            if not _value_fits(p, value) and p.bounds is None:
                raise r.error(f"params.{key}", f"{value!r} is outside the parameter's {_domain(p)}")
        misfit = next((by_name[k] for k, v in params.items() if not _value_fits(by_name[k], v)), None)
        if misfit is not None:  # outside a range the cluster or the data set: the recipe does not fit them
            name = str(item.get("name", f"prior-{i}"))
            if _first_telling(f"{source}:{name}"):
                log.warning("prior %s left out: its %s %r is outside this cluster's and data's %s", name,
                            misfit.name, params[misfit.name], _domain(misfit))
            continue
        if complete and item.get("partial") is not True:  # partial: true marks a warm start
            _check_complete(r, params, parameters)
        priors.append(Prior(str(item.get("name", f"prior-{i}")), dict(params)))
    return tuple(priors)


def _check_complete(r: _Reader, params: dict[str, Any], parameters: tuple[Parameter, ...]) -> None:
    """A prior is a published recipe: it sets every parameter its own values make active (one it
    left out would come from the sampler, e.g. label smoothing in a recipe that has none)."""
    from tianfeng.hpo.space.materialize import is_active

    values = dict(params)
    for p in parameters:  # in order: a condition reads parameters declared before it
        if p.type == "fixed" or p.name in values:
            continue
        if is_active(p, values):
            raise r.error("params", f"sets no value for {p.name!r}, which it makes active; a prior "
                                    f"fixes every active parameter (the sampler would choose it; "
                                    f"partial: true makes it a warm start)")


def _value_fits(p: Parameter, value: Any) -> bool:
    if p.type == "categorical":
        return value in p.choices
    if p.type == "fixed":
        return value == p.value
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return p.low <= value <= p.high and (p.type != "int" or float(value).is_integer())


def _domain(p: Parameter) -> str:
    if p.type == "categorical":
        return f"choices {list(p.choices)}"
    if p.type == "fixed":
        return f"fixed value {p.value!r}"
    return f"range [{p.low:g}, {p.high:g}]"


def _check_builds(space: SearchSpace) -> None:
    """Build the config of the lowest and highest corner at every rung, so errors that only a
    combination reveals (a batch above the data size, warm-up beyond the epochs) show at load."""
    from tianfeng.hpo.space.materialize import build_config, sample_active

    for corner in ("low", "high"):
        values = sample_active(space, functools.partial(corner_value, low=corner == "low"))
        for rung in space.fidelities:
            try:
                cfg = build_config(space, values, rung)
                if rung == "target":
                    _check_fits_cluster(cfg, space.cluster, space.constants)
            except (ConfigError, ExpressionError) as exc:
                detail = str(exc.with_source(space.path)) if isinstance(exc, ConfigError) else str(exc)
                raise ConfigError(space.path, f"fidelities.{rung}",
                                  f"the {corner} corner of the space gives a bad run: {detail}") from None


def _check_fits_cluster(cfg: RunConfig, cluster: ClusterSpec, constants: dict[str, int]) -> None:
    from tianfeng.cost.walltime import check_batches, check_memory

    check_batches(cfg, cluster)
    check_memory(cfg, cluster, in_channels=constants.get("channels", 3), classes=constants.get("classes", 1000))


def _unknown(name: str, names: set[str]) -> str:
    return (f"unknown name {name!r}; parameters are: {', '.join(sorted(names))} "
            f"(quote a literal string twice: \"'{name}'\")")


def per_gpu_range(space: SearchSpace) -> str:
    """`per_gpu_batch 16-59 (a GPU's memory holds 314)`: the ranges the cluster and the data set
    (bounds written as expressions), and what one GPU holds; "" when nothing reads them."""
    c = space.constants
    derived = ", ".join(f"{p.name} {p.low:g}-{p.high:g}" for p in space.parameters if p.bounds is not None)
    if "max_per_gpu" not in c:
        return derived
    holds = "no memory limit" if c["max_per_gpu"] >= 2**31 - 1 else f"a GPU's memory holds {c['max_per_gpu']}"
    return f"{derived} ({holds}, at least {c['min_per_gpu']} per GPU)" if derived else holds
