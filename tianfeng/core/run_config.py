"""The run configuration: one tree of frozen dataclasses, loaded from YAML and validated on load.

Nothing downstream reads the YAML dict: every module receives the typed `RunConfig`.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tianfeng.core.errors import ConfigError
from tianfeng.core.names import check_name, is_reference
from tianfeng.core.yaml_input import parse_yaml, read_yaml

__all__ = ["ConfigError", "RunConfig", "config_from_dict", "config_to_dict", "derived", "load_config"]


def _bounds(*, gt: float | None = None, ge: float | None = None, le: float | None = None,
            lt: float | None = None) -> dict[str, Any]:
    return {"metadata": {"gt": gt, "ge": ge, "le": le, "lt": lt}}


def _bounded(default: Any, **kw: float) -> Any:
    return field(default=default, **_bounds(**kw))


class Kwargs(dict):
    """`model.kwargs`: a mapping that hashes (configs are cache keys) by its items."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(repr(sorted(self.items())))


@dataclass(frozen=True)
class ModelConfig:
    # resnet_small | resnet50 | torchvision:<name> | timm:<name> | package.module:function, your
    # builder, called as function(num_classes=N, in_channels=C, **kwargs), returning an nn.Module
    name: str = "resnet_small"
    kwargs: Kwargs = field(default_factory=Kwargs)  # to the builder (torchvision, timm or yours)
    weights: str = ""  # a local state dict to start from; nothing is ever downloaded

    def __post_init__(self) -> None:
        if not isinstance(self.kwargs, Kwargs):  # built from a plain dict in code: keep it hashable
            object.__setattr__(self, "kwargs", Kwargs(self.kwargs))
    width: int = _bounded(16, ge=1)  # channels of the first stage (resnet_small)
    depth: int = _bounded(1, ge=1)  # residual blocks per stage (resnet_small)
    stages: int = _bounded(3, ge=1, le=5)  # stages of resnet_small, each halving resolution
    zero_init_residual: bool = True  # last BN gamma of each block starts at 0 (Goyal et al.)
    bn_after_pool: bool = False


@dataclass(frozen=True)
class DataConfig:
    source: str = "digits"  # digits | synthetic | imagefolder:DIR
    loader: Literal["auto", "cache", "dali", "torch"] = "auto"
    fraction: float = _bounded(1.0, gt=0.0, le=1.0)  # stratified, seeded subset of train
    augment: Literal["auto", "random_resized_crop", "pad_crop", "none"] = "auto"
    flip: bool | None = None  # None: flip unless the source is digits
    min_crop_scale: float = _bounded(0.35, gt=0.0, le=1.0)
    cache_dir: str = ""  # "" means $TIANFENG_CACHE or ~/.cache/tianfeng
    workers: int = _bounded(2, ge=0)  # decode workers of the torch loader
    val_batch_size: int = _bounded(500, ge=1)
    synthetic_images: int = _bounded(2048, ge=1)
    synthetic_classes: int = _bounded(10, ge=2)


@dataclass(frozen=True)
class LarsConfig:
    trust_coefficient: float = _bounded(0.001, gt=0.0)
    # the MLPerf reference passes epsilon 0, which its Keras base class replaces by 1e-7
    eps: float = _bounded(1e-7, ge=0.0)
    # reference: v = m v + lr trust (g + wd w); w -= v (MLPerf, You et al.: the LR inside the
    # momentum). sgd_style: v = m v + trust (g + wd w); w -= lr v (torch SGD's placement); the two
    # differ whenever the LR changes (every warm-up and decay step)
    update: Literal["reference", "sgd_style"] = "reference"


@dataclass(frozen=True)
class LambConfig:
    beta1: float = _bounded(0.9, ge=0.0, lt=1.0)
    beta2: float = _bounded(0.999, ge=0.0, lt=1.0)
    eps: float = _bounded(1e-6, gt=0.0)


@dataclass(frozen=True)
class OptimizerConfig:
    name: Literal["sgd", "lars", "lamb"] = "sgd"
    lr: float = _bounded(0.1, gt=0.0)  # peak LR at schedule.reference_batch_size
    momentum: float = _bounded(0.9, ge=0.0, lt=1.0)
    nesterov: bool = False
    weight_decay: float = _bounded(5e-4, ge=0.0)  # applied to weights only, never BN or bias
    grad_clip_norm: float | None = _bounded(None, gt=0.0)
    label_smoothing: float = _bounded(0.0, ge=0.0, lt=1.0)
    lars: LarsConfig = field(default_factory=LarsConfig)
    lamb: LambConfig = field(default_factory=LambConfig)


@dataclass(frozen=True)
class ScheduleConfig:
    warmup_epochs: float = _bounded(0.0, ge=0.0)
    warmup_shape: Literal["linear", "exponential"] = "linear"
    # x peak LR at the first step; None: 0 for a linear warm-up (the MLPerf reference starts
    # from 0), 0.01 for an exponential one (which cannot start at 0)
    warmup_start_factor: float | None = _bounded(None, ge=0.0, le=1.0)
    decay: Literal["poly", "cosine", "step", "constant", "piecewise"] = "cosine"
    poly_power: float = _bounded(2.0, gt=0.0)
    final_lr_factor: float = _bounded(0.0, ge=0.0, le=1.0)  # end of poly/cosine, x peak LR
    step_milestones: tuple[float, ...] = ()  # epochs at which step decay multiplies by gamma
    step_gamma: float = _bounded(0.1, gt=0.0, le=1.0)
    # decay piecewise: the LR (x peak) at these epochs, straight lines between them, the last value
    # after the last epoch; an epoch given twice is a jump (fast.ai's imagenet18 schedule). The
    # points include any warm-up, so warmup_epochs is 0 with it
    piecewise_epochs: tuple[float, ...] = ()
    piecewise_factors: tuple[float, ...] = ()
    scaling_rule: Literal["linear", "sqrt", "none"] = "linear"
    reference_batch_size: int = _bounded(256, ge=1)


@dataclass(frozen=True)
class PhaseConfig:
    epochs: int = _bounded(1, ge=1)
    resolution: int = _bounded(16, ge=4)
    batch_size: int = _bounded(64, ge=1)  # global batch (all ranks together)


@dataclass(frozen=True)
class PrecisionConfig:
    mode: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    loss_scale_init: float = _bounded(2.0**16, gt=0.0)
    growth_interval: int = _bounded(2000, ge=1)


@dataclass(frozen=True)
class DistributedConfig:
    backend: Literal["auto", "nccl", "gloo"] = "auto"
    bucket_mb: float | Literal["auto"] = _bounded(25.0, gt=0.0)  # auto: time a few at start-up
    hook: Literal["none", "hierarchical"] = "none"  # DDP communication hook
    local_size: int = _bounded(0, ge=0)  # ranks per node; 0: torchrun's LOCAL_WORLD_SIZE
    compression: Literal["none", "fp16", "bf16", "powersgd", "topk"] = "none"
    powersgd_rank: int = _bounded(4, ge=1)
    powersgd_start_step: int = _bounded(10, ge=2)  # plain allreduce before this step
    topk_ratio: float = _bounded(0.01, gt=0.0, le=1.0)
    # BatchNorm statistics over the global batch (torch's SyncBatchNorm on CUDA, ours on CPU);
    # off by default: the records normalise over each GPU's share of the batch
    sync_bn: bool = False
    sync_bn_scope: Literal["world", "node"] = "world"  # node: statistics over a node's ranks only
    # with sync_bn: statistics over groups of this many consecutive GPUs instead of the scope
    # (MLPerf's BN_GROUP: 2 GPUs of a node at 15-16 images each); 0: over sync_bn_scope
    sync_bn_group: int = _bounded(0, ge=0)
    # the GPUs of the cluster this recipe is for: BatchNorm normalises over groups of each phase's
    # batch / emulate_gpus images, as each of those GPUs would, however few processes train it
    # (0: over each process's share, the cluster's own way when it is the cluster)
    emulate_gpus: int = _bounded(0, ge=0)
    # that cluster's GPUs per node: with sync_bn_scope node, BatchNorm normalises over groups of a
    # node's share (batch / (emulate_gpus / emulate_gpus_per_node) images) instead of a GPU's
    emulate_gpus_per_node: int = _bounded(0, ge=0)


@dataclass(frozen=True)
class CheckpointConfig:
    dir: str = ""  # "" means <run_dir>/checkpoints
    every_epochs: int = _bounded(1, ge=0)  # 0 disables epoch checkpoints
    every_steps: int = _bounded(0, ge=0)  # mid-epoch checkpoints; 0 disables
    resume: bool = True  # continue from the last checkpoint in dir when one exists


@dataclass(frozen=True)
class EngineConfig:
    # torch.compile of the training model; auto: after a few timed eager steps, when the steps
    # left would save more than the compile is expected to cost (trainers/compilation.py)
    compile: Literal["auto", "on", "off"] = "auto"
    # torch.compile's mode: reduce-overhead adds CUDA graphs (GPUs, fixed shapes)
    compile_mode: Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"] = "default"
    # stop after this many epochs of the schedule (status stopped; 0 trains them all): the run
    # cut short on purpose, its schedule unchanged; its choices (compile auto) count only the
    # epochs it trains
    stop_after_epochs: int = _bounded(0, ge=0)
    # end the run as diverged after this many epochs at a uniform guess (chance top-1, training
    # loss ln(classes)) once it had learned (trainers/collapse.py); 0 never
    collapse_patience: int = _bounded(3, ge=0)


@dataclass(frozen=True)
class RunConfig:
    name: str = "run"
    run_dir: str = ""  # "" means runs/<name>
    device: Literal["auto", "cpu", "cuda"] = "auto"
    seed: int = _bounded(0, ge=0)
    log_every_steps: int = _bounded(0, ge=0)  # 0: one line per epoch only
    # every this many steps (and each epoch's first) a step runs in two halves to measure the
    # gradient noise scale; 0 turns it off
    noise_scale_every: int = _bounded(8, ge=0)
    # gradient accumulation: each GPU's share of a step's batch runs in this many micro-batches
    # (what fits its memory), the gradients exchanged once; BatchNorm sees one micro-batch at a time
    accumulate_steps: int = _bounded(1, ge=1)
    # this machine alone: each micro-batch runs in this many parts to fit the memory of the device
    # that trains it (a search GPU smaller than the target's, one process for many emulated GPUs).
    # The gradient is the same sum and BatchNorm still sees each emulated GPU's whole micro-batch,
    # so it must divide the GPUs each process emulates; the target cluster does not split
    memory_split: int = _bounded(1, ge=1)
    # model and batches in channels_last (NHWC) or contiguous (NCHW); auto: channels_last on GPUs,
    # and on a CPU whichever a few timed steps find faster for these shapes (cached)
    memory_format: Literal["auto", "channels_last", "contiguous"] = "auto"
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    phases: tuple[PhaseConfig, ...] = (PhaseConfig(epochs=12, resolution=16, batch_size=64),)
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)

    @property
    def total_epochs(self) -> int:
        return sum(p.epochs for p in self.phases)

    @property
    def resolved_run_dir(self) -> Path:
        return Path(self.run_dir or f"runs/{self.name}")

    @property
    def resolved_checkpoint_dir(self) -> Path:
        return Path(self.checkpoint.dir) if self.checkpoint.dir else self.resolved_run_dir / "checkpoints"


# ---------------------------------------------------------------------------------------------
# Loading and validation


_SCIENTIFIC = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def _convert(value: Any, tp: Any, path: str, source: str) -> Any:
    origin = typing.get_origin(tp)
    if origin is Literal:
        allowed = typing.get_args(tp)
        if isinstance(value, bool) and {"on", "off"} <= set(allowed):  # YAML 1.1 reads on/off as booleans
            value = "on" if value else "off"
        if value not in allowed:
            raise ConfigError(source, path, f"must be one of {', '.join(map(str, allowed))}; got {value!r}")
        return value
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        errors = []
        for option in options:  # e.g. `float | Literal["auto"]`: a number or the word auto
            try:
                return _convert(value, option, path, source)
            except ConfigError as exc:
                errors.append(exc.message.split(";")[0])
        raise ConfigError(source, path, f"{' or '.join(errors)}; got {value!r}")
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(value, list | tuple):
            raise ConfigError(source, path, f"must be a list; got {value!r}")
        return tuple(_convert(v, args[0], f"{path}.{i}", source) for i, v in enumerate(value))
    if dataclasses.is_dataclass(tp):
        return _from_dict(tp, value, path, source)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(source, path, f"must be true or false; got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int) or abs(value) >= 2**63:
            raise ConfigError(source, path, f"must be an integer (below 2**63); got {value!r}")
        return value
    if tp is float:
        if isinstance(value, str) and _SCIENTIFIC.fullmatch(value.strip()):
            value = float(value)  # YAML 1.1 reads `1e-4` (no dot) as a string
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ConfigError(source, path, f"must be a finite number; got {value!r}")
        return float(value)
    if tp is Kwargs:
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise ConfigError(source, path, f"must be a mapping of argument names to values; got {value!r}")
        return Kwargs(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(source, path, f"must be a string; got {value!r}")
        return value
    raise TypeError(f"unsupported config type {tp!r} at {path}")


def _check_bounds(value: Any, meta: typing.Mapping[str, Any], path: str, source: str) -> None:
    if value is None or not meta or isinstance(value, str):
        return
    checks = [("gt", lambda v, b: v > b, ">"), ("ge", lambda v, b: v >= b, ">="),
              ("lt", lambda v, b: v < b, "<"), ("le", lambda v, b: v <= b, "<=")]
    for key, ok, symbol in checks:
        bound = meta.get(key)
        if bound is not None and not ok(value, bound):
            raise ConfigError(source, path, f"must be {symbol} {bound:g}, got {value!r}")


def _from_dict(cls: Any, raw: Any, path: str, source: str) -> Any:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(source, path or "(top level)", f"must be a mapping of keys; got {raw!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        key = f"{path}.{unknown[0]}" if path else str(unknown[0])
        raise ConfigError(source, key, f"unknown key; allowed: {', '.join(fields)}")
    values = {}
    for name, value in raw.items():
        key = f"{path}.{name}" if path else name
        converted = _convert(value, hints[name], key, source)
        _check_bounds(converted, fields[name].metadata, key, source)
        values[name] = converted
    return cls(**values)


def _validate_cross_fields(cfg: RunConfig, source: str) -> None:
    check_name(cfg.name, source, "name")  # a path, a job name and a rendezvous id
    if not cfg.phases:
        raise ConfigError(source, "phases", "must list at least one {epochs, resolution, batch_size}")
    src = cfg.data.source
    if not (src in ("digits", "synthetic") or (src.startswith("imagefolder:") and len(src) > 12)
            or is_reference(src)):
        raise ConfigError(source, "data.source",
                          f"must be digits, synthetic, imagefolder:DIR or package.module:function; got {src!r}")
    if cfg.model.name not in ("resnet_small", "resnet50") and not is_reference(cfg.model.name):
        raise ConfigError(source, "model.name", "must be resnet_small, resnet50, torchvision:<name>, timm:<name> "
                          f"or package.module:function; got {cfg.model.name!r}")
    if cfg.data.loader == "dali" and not src.startswith("imagefolder:"):
        raise ConfigError(source, "data.loader", f"dali reads files: it needs an imagefolder:DIR "
                          f"source, got {src!r}; allowed here: auto, cache, torch")
    milestones = cfg.schedule.step_milestones
    if cfg.schedule.decay == "step":
        if not milestones:
            raise ConfigError(source, "schedule.step_milestones", "must list epochs when decay is step")
        if list(milestones) != sorted(milestones) or milestones[0] <= 0:
            raise ConfigError(source, "schedule.step_milestones",
                              f"must be increasing epochs > 0; got {list(milestones)}")
    points = (cfg.schedule.piecewise_epochs, cfg.schedule.piecewise_factors)
    if cfg.schedule.decay == "piecewise":
        if not points[0] or len(points[0]) != len(points[1]):
            raise ConfigError(source, "schedule.piecewise_epochs", "must list epochs, as many as "
                              f"schedule.piecewise_factors, when decay is piecewise; got {len(points[0])} "
                              f"and {len(points[1])}")
        if list(points[0]) != sorted(points[0]) or points[0][0] < 0 or min(points[1]) < 0:
            raise ConfigError(source, "schedule.piecewise_epochs", f"must be non-decreasing epochs >= 0 with factors "
                              f">= 0; got {list(points[0])} and {list(points[1])}")
        if cfg.schedule.warmup_epochs:
            raise ConfigError(source, "schedule.warmup_epochs", "must be 0 with decay piecewise (its points hold "
                              f"the warm-up); got {cfg.schedule.warmup_epochs:g}")
    if cfg.schedule.warmup_shape == "exponential" and cfg.schedule.warmup_start_factor == 0:
        raise ConfigError(source, "schedule.warmup_start_factor",
                          "must be > 0 for an exponential warm-up (or leave it out: 0.01); got 0")
    if cfg.schedule.warmup_epochs > cfg.total_epochs:
        raise ConfigError(source, "schedule.warmup_epochs",
                          f"must be <= the total epochs of all phases ({cfg.total_epochs}), "
                          f"got {cfg.schedule.warmup_epochs:g}")
    if cfg.model.name == "resnet50" and min(p.resolution for p in cfg.phases) < 32:
        raise ConfigError(source, "phases", "resnet50 needs a resolution >= 32 in every phase")


def config_from_dict(raw: dict[str, Any], source: str = "") -> RunConfig:
    """Build and validate a RunConfig; `source` names the file in error messages."""
    cfg = _from_dict(RunConfig, raw, "", source)
    _validate_cross_fields(cfg, source)
    return cfg


def apply_override(raw: dict[str, Any], assignment: str) -> None:
    """Apply one `a.b.c=value` override in place; the value is parsed as YAML (`0.1`, `true`, `[1,2]`)."""
    if "=" not in assignment:
        raise ConfigError("--set", assignment, "must look like key.path=value")
    key_path, text = assignment.split("=", 1)
    value = parse_yaml(text, f"--set {key_path}")
    node: Any = raw
    parts = key_path.split(".")
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise ConfigError("--set", ".".join(parts[: i + 1]),
                                  f"must be a list index below {len(node)}")
            if last:
                node[int(part)] = value
            else:
                node = node[int(part)]
        else:
            if last:
                node[part] = value
            else:
                node = node.setdefault(part, {})
                if not isinstance(node, dict | list):
                    raise ConfigError("--set", ".".join(parts[: i + 1]), "is not a section")


def config_to_dict(cfg: Any) -> dict[str, Any]:
    """Plain, YAML-safe dict (tuples become lists); `config_from_dict` round-trips it."""

    def plain(v: Any) -> Any:
        if isinstance(v, tuple | list):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v

    return plain(dataclasses.asdict(cfg))


def load_config(path: str | Path | None = None, overrides: typing.Sequence[str] = ()) -> RunConfig:
    """Load a RunConfig from YAML (the dataclass defaults when path is None), then overrides."""
    raw: dict[str, Any] = {}
    source = "defaults"
    if path is not None:
        source = str(path)
        loaded = read_yaml(path)
        if loaded is None:
            raise ConfigError(source, "", "is empty; give at least the sections to change (see configs/), "
                              "or leave out --config for the embedded default recipe")
        if not isinstance(loaded, dict):
            raise ConfigError(source, "(top level)", "must be a mapping of sections")
        raw = loaded or {}
    if overrides:
        if "phases" in raw or any(o.startswith("phases.") for o in overrides):
            raw.setdefault("phases", config_to_dict(RunConfig())["phases"])
        for assignment in overrides:
            apply_override(raw, assignment)
        source = f"{source} (with --set)"
    return config_from_dict(raw, source)


def derived(cfg: RunConfig, source: str, *, last_batch: int | None = None, overrides: typing.Sequence[str] = (),
            **fields: Any) -> RunConfig:
    """cfg with every phase's batch scaled so the last phase's is `last_batch` (each at least 1),
    then `a.b.c=value` overrides, then top-level `fields` not None (name, run_dir); validated
    once, errors naming `source`. With nothing to change, cfg itself (it is valid already)."""
    if last_batch is None and not overrides and all(value is None for value in fields.values()):
        return cfg
    raw = config_to_dict(cfg)
    if last_batch is not None:
        factor = last_batch / raw["phases"][-1]["batch_size"]
        for phase in raw["phases"]:
            phase["batch_size"] = max(1, round(phase["batch_size"] * factor))
    for assignment in overrides:
        apply_override(raw, assignment)
    raw.update({key: value for key, value in fields.items() if value is not None})
    return config_from_dict(raw, source)


def with_changes(cfg: RunConfig, **sections: Any) -> RunConfig:
    """A copy of cfg with whole fields or sections replaced, re-validated."""
    return config_from_dict(config_to_dict(dataclasses.replace(cfg, **sections)), "in-code config")


def stopping_after(cfg: RunConfig, epochs: int) -> RunConfig:
    """`cfg` stopping after its first `epochs` epochs (`engine.stop_after_epochs`), its schedule
    unchanged, so that the engine's own choices, such as whether compiling pays, count only the
    epochs it trains; `cfg` itself when that is all of them."""
    if epochs >= cfg.total_epochs:
        return cfg
    return dataclasses.replace(cfg, engine=dataclasses.replace(cfg.engine, stop_after_epochs=epochs))
