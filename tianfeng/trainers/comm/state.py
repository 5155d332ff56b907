"""A comm hook's state as tensors and plain values, for checkpoints: error feedback, PowerSGD's
warm-start factors and step counter, top-k residuals and the byte counters. Each rank's is its
own (error feedback differs between ranks), so each rank saves its own file; a resumed run at
the same world size then continues exactly as the uninterrupted run would have."""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any

import numpy as np
import torch

from tianfeng.trainers.comm.compression import CompressionState
from tianfeng.trainers.comm.hierarchical import CommBytes, HierarchicalState


def _pairs(d: dict) -> list[list[Any]]:
    return [[list(k) if isinstance(k, tuple) else k, v] for k, v in d.items()]


def _unpairs(pairs: list[list[Any]]) -> dict:
    return {tuple(k) if isinstance(k, list) else k: v for k, v in pairs}


def comm_state_dict(comm: CompressionState | HierarchicalState) -> dict[str, Any]:
    out: dict[str, Any] = {"bytes": asdict(comm.bytes)}
    if isinstance(comm, CompressionState):
        out["residuals"] = _pairs(comm.residuals)
        if comm.node_powersgd is not None:
            ps = comm.node_powersgd
            out["node_powersgd"] = {"step": ps.step, "q": _pairs(ps.q), "error": _pairs(ps.error)}
        if comm.powersgd is not None:
            ps = comm.powersgd
            kind, keys, pos, has_gauss, cached = ps.rng.get_state()
            out["powersgd"] = {
                "iter": ps.iter, "error": _pairs(ps.error_dict), "p": _pairs(ps.p_memory_dict),
                "q": _pairs(ps.q_memory_dict), "numel_before": ps.total_numel_before_compression,
                "numel_after": ps.total_numel_after_compression,
                "rng": [kind, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached)]}
    return out


def load_comm_state(comm: CompressionState | HierarchicalState, saved: dict[str, Any]) -> None:
    comm.bytes = CommBytes(**{f.name: saved["bytes"][f.name] for f in fields(CommBytes)})
    if not isinstance(comm, CompressionState):
        return
    comm.residuals = _unpairs(saved["residuals"])
    if comm.node_powersgd is not None:
        ps, s = comm.node_powersgd, saved["node_powersgd"]
        ps.step, ps.q, ps.error = s["step"], _unpairs(s["q"]), _unpairs(s["error"])
    if comm.powersgd is not None:
        ps, s = comm.powersgd, saved["powersgd"]
        ps.iter, ps.error_dict = s["iter"], _unpairs(s["error"])
        ps.p_memory_dict, ps.q_memory_dict = _unpairs(s["p"]), _unpairs(s["q"])
        ps.total_numel_before_compression = s["numel_before"]
        ps.total_numel_after_compression = s["numel_after"]
        kind, keys, pos, has_gauss, cached = s["rng"]
        ps.rng.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))


def to_device(tree: Any, device: torch.device) -> Any:
    """Loaded to the CPU like every checkpoint; the hook's tensors live beside the gradients."""
    if isinstance(tree, torch.Tensor):
        return tree.to(device)
    if isinstance(tree, dict):
        return {k: to_device(v, device) for k, v in tree.items()}
    if isinstance(tree, list):
        return [to_device(v, device) for v in tree]
    return tree
