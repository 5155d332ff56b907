"""Proxy-to-full transfer rules, explicit and printed: the target rung's epochs, resolution,
data and width; a new global batch with the LR following the space's scaling rule and warm-up
kept in epochs; precision chosen for the target device; then the user's --set overrides."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tianfeng.search.materialize import build_config
from tianfeng.search.space import SearchSpace
from trainers.config import ConfigError, RunConfig, apply_override, config_from_dict, config_to_dict
from trainers.schedules import batch_scale


@dataclass(frozen=True)
class Change:
    key: str
    proxy: Any
    full: Any
    rule: str


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict):
        out: dict[str, Any] = {}
        for k, v in tree.items():
            out |= _flatten(v, f"{prefix}{k}.")
        return out
    if isinstance(tree, list) and tree and isinstance(tree[0], dict):
        out = {}
        for i, v in enumerate(tree):
            out |= _flatten(v, f"{prefix}{i}.")
        return out
    return {prefix.rstrip("."): tree}


_RULES = [
    ("phases.", "epochs", "epoch budget of the target rung"),
    ("phases.", "resolution", "resolution scaled back to full"),
    ("phases.", "batch_size", "batch-size transfer (LR follows schedule.scaling_rule)"),
    ("schedule.warmup_epochs", "", "warm-up kept in epochs, stretched with the epoch budget"),
    ("schedule.step_milestones", "", "milestones stretched with the epoch budget"),
    ("data.fraction", "", "the full data set"),
    ("model.width", "", "the full model width"),
    ("precision.mode", "", "precision for the target device (auto decides at run time)"),
]


def _rule_for(key: str, overridden: set[str]) -> str:
    if key in overridden:
        return "--set override"
    for prefix, suffix, rule in _RULES:
        if key.startswith(prefix) and key.endswith(suffix):
            return rule
    return "target rung"


def peak_lr(cfg: RunConfig) -> float:
    """The LR at the end of warm-up in the final phase, after batch scaling."""
    return cfg.optimizer.lr * batch_scale(cfg.phases[-1].batch_size, cfg.schedule)


def transfer(space: SearchSpace, values: dict[str, Any], proxy_rung: str, *, target_rung: str = "target",
             batch_size: int | None = None, overrides: list[str] = (), name: str | None = None,
             run_dir: str | None = None) -> tuple[RunConfig, list[Change]]:
    proxy = build_config(space, values, proxy_rung)
    raw = config_to_dict(build_config(space, values, target_rung))
    if batch_size is not None:
        if batch_size < 1:
            raise ConfigError("--batch-size", "", f"must be >= 1, got {batch_size}")
        factor = batch_size / raw["phases"][-1]["batch_size"]
        for phase in raw["phases"]:
            phase["batch_size"] = max(1, round(phase["batch_size"] * factor))
    for assignment in overrides:
        apply_override(raw, assignment)
    if name is not None:
        raw["name"] = name
    if run_dir is not None:
        raw["run_dir"] = run_dir
    full = config_from_dict(raw, "promoted config")
    overridden = {a.split("=", 1)[0] for a in overrides}
    before, after = _flatten(config_to_dict(proxy)), _flatten(config_to_dict(full))
    skip = {"name", "run_dir"}
    changes = [Change(k, before.get(k), after.get(k), _rule_for(k, overridden))
               for k in sorted(set(before) | set(after))
               if k not in skip and before.get(k) != after.get(k)]
    lr_proxy, lr_full = peak_lr(proxy), peak_lr(full)
    if abs(lr_proxy - lr_full) > 1e-12:
        changes.append(Change("peak LR (computed)", round(lr_proxy, 6), round(lr_full, 6),
                              f"schedule.scaling_rule {full.schedule.scaling_rule} from batch "
                              f"{proxy.phases[-1].batch_size} to {full.phases[-1].batch_size}"))
    return full, changes
