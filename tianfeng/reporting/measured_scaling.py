"""Measured scaling of promoted distributed runs next to the cost model's prediction: a trial
promoted both on one process and on N nodes x G processes gives a measured efficiency
(samples/s at world W over W times one process's), which the alpha-beta model predicts from the
one-process step time, the model's gradient size and the links `tianfeng plan` assumes."""

from __future__ import annotations

import re
import statistics
from pathlib import Path
from typing import Any

import yaml

from tianfeng.core.run_config import RunConfig, config_from_dict
from tianfeng.cost.exchange import Cluster, predict
from tianfeng.storage.runs import RunRecordStatus

_WORLD = re.compile(r"-(\d+)x(\d+)$")


def _throughput(run: dict[str, Any]) -> float | None:
    """Median samples/s over the run's epochs, the first left out when there are others (warm-up)."""
    rates = [e["samples_per_s"] for e in run["epochs"]]
    rates = rates[1:] if len(rates) > 1 else rates
    return statistics.median(rates) if rates else None


def _classes_and_channels(cfg: RunConfig) -> tuple[int, int]:
    source = cfg.data.source
    if source == "digits":
        return 10, 1
    if source == "synthetic":
        return cfg.data.synthetic_classes, 3
    train = Path(source.removeprefix("imagefolder:")).expanduser() / "train"
    return (sum(1 for p in train.iterdir() if p.is_dir()) if train.is_dir() else 1000), 3


def _variant(cfg: RunConfig) -> str:
    if cfg.distributed.compression == "powersgd":
        return "powersgd"
    if cfg.distributed.hook == "hierarchical":
        return "hierarchical+fp16" if cfg.distributed.compression == "fp16" else "hierarchical"
    return "flat"


def scaling_rows(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from tianfeng.trainers.models import build_model

    singles = {(r["trial_number"], r["config_hash"]): r for r in runs
               if not _WORLD.search(r["config_hash"]) and r["status"] == RunRecordStatus.COMPLETED}
    rows = []
    for run in runs:
        match = _WORLD.search(run["config_hash"])
        if not match or run["status"] != RunRecordStatus.COMPLETED:
            continue
        single = singles.get((run["trial_number"], run["config_hash"][:match.start()]))
        measured, alone = _throughput(run), single and _throughput(single)
        if not measured or not alone:
            continue
        nodes, per_node = int(match.group(1)), int(match.group(2))
        world = nodes * per_node
        cfg = config_from_dict(yaml.safe_load(run["config_yaml"]), f"run {run['id']}")
        classes, channels = _classes_and_channels(cfg)
        grad_bytes = 4 * sum(p.numel() for p in build_model(cfg.model, channels, classes).parameters())
        per_rank = max(1, cfg.phases[-1].batch_size // world)
        p = predict(_variant(cfg), Cluster(world, per_node), grad_bytes=grad_bytes,
                    compute_s=per_rank / alone, per_gpu_batch=per_rank)
        rows.append({"run": run["id"], "trial": run["trial_number"], "layout": f"{nodes} x {per_node}",
                     "variant": p.variant, "single": alone, "measured": measured,
                     "efficiency": measured / (world * alone), "predicted": p.efficiency,
                     "predicted_samples": p.samples_per_s})
    return rows
