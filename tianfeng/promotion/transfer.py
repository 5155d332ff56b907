"""Proxy-to-full transfer rules, explicit and printed: the target rung's epochs, resolution,
data and width; warm-up and step milestones stretched with the epoch budget (the same share of
the run); a new global batch with each phase's peak LR following the space's scaling rule;
precision chosen for the target device; then the user's --set overrides."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tianfeng.core.lr_schedule import peak_lr
from tianfeng.core.run_config import RunConfig, config_to_dict, derived
from tianfeng.hpo.space.materialize import build_config
from tianfeng.hpo.space.read import SearchSpace


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
    ("schedule.warmup_epochs", "", "warm-up stretched with the epoch budget ({stretch}): the same share of the run"),
    ("schedule.step_milestones", "", "milestones stretched with the epoch budget ({stretch})"),
    ("schedule.piecewise_epochs", "", "LR points stretched with the epoch budget ({stretch})"),
    ("data.fraction", "", "the full data set"),
    ("model.width", "", "the full model width"),
    ("precision.mode", "", "precision for the target device (auto decides at run time)"),
]


def _rule_for(key: str, overridden: set[str], stretch: str) -> str:
    if key in overridden:
        return "--set override"
    for prefix, suffix, rule in _RULES:
        if key.startswith(prefix) and key.endswith(suffix):
            return rule.format(stretch=stretch)
    return "target rung"


def transfer(space: SearchSpace, values: dict[str, Any], proxy_rung: str, *, target_rung: str = "target",
             batch_size: int | None = None, overrides: list[str] = (), name: str | None = None,
             run_dir: str | None = None) -> tuple[RunConfig, list[Change]]:
    """The full-fidelity config of a proxy trial's `values` and what changed on the way."""
    target = build_config(space, values, target_rung)
    proxy = build_config(space, values, proxy_rung, target=target if target_rung == "target" else None)
    full = derived(target, "promoted config", last_batch=batch_size, overrides=overrides, name=name, run_dir=run_dir)
    overridden = {a.split("=", 1)[0] for a in overrides}
    before, after = _flatten(config_to_dict(proxy)), _flatten(config_to_dict(full))
    skip = {"name", "run_dir"}
    stretch = f"x{full.total_epochs / proxy.total_epochs:g}: {proxy.total_epochs} -> {full.total_epochs} epochs"
    changes = [Change(k, before.get(k), after.get(k), _rule_for(k, overridden, stretch))
               for k in sorted(set(before) | set(after))
               if k not in skip and before.get(k) != after.get(k)]
    # every phase's peak LR, each following its own phase's batch (phases pair up by position)
    for i in range(max(len(proxy.phases), len(full.phases))):
        lr_proxy = peak_lr(proxy, i) if i < len(proxy.phases) else None
        lr_full = peak_lr(full, i) if i < len(full.phases) else None
        if lr_proxy is None or lr_full is None or abs(lr_proxy - lr_full) > 1e-12:
            changes.append(Change(f"phase {i} peak LR (computed)", lr_proxy and round(lr_proxy, 6),
                                  lr_full and round(lr_full, 6),
                                  f"optimizer.lr x schedule.scaling_rule {full.schedule.scaling_rule}: batch "
                                  f"{proxy.phases[min(i, len(proxy.phases) - 1)].batch_size} -> "
                                  f"{full.phases[min(i, len(full.phases) - 1)].batch_size}"))
    return full, changes
