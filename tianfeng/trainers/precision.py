"""Numeric precision: fp32, bf16 autocast, or fp16 autocast with dynamic loss scaling.

Parameters and optimizer state stay fp32 in every mode (autocast only lowers the compute), so
fp16 training keeps fp32 master weights without a second copy.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

import torch

from tianfeng.core.run_config import PrecisionConfig

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def cpu_has_bf16_hardware() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


def resolve_mode(mode: str, device: torch.device) -> tuple[str, str]:
    """The concrete mode for `auto`, with the reason it was chosen."""
    if mode != "auto":
        return mode, f"precision.mode is {mode}"
    if device.type == "cuda":
        # without emulation: a V100 "supports" bf16 only by emulating it, far slower than fp16
        if torch.cuda.is_bf16_supported(including_emulation=False):
            return "bf16", "the GPU computes bf16 natively (no loss scaling needed)"
        return "fp16", "the GPU has no bf16; fp16 with dynamic loss scaling"
    if cpu_has_bf16_hardware():
        return "bf16", "the CPU has bf16 matrix instructions (AMX or AVX512-BF16)"
    return "fp32", ("this CPU has no bf16 matrix instructions (no AMX or AVX512-BF16), so bf16 "
                    "autocast is emulated and much slower than fp32 (see benchmarks/engine/precision.py)")


@dataclass
class Precision:
    mode: str  # fp32 | bf16 | fp16, never auto
    reason: str
    device_type: str
    scaler: torch.amp.GradScaler

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.mode == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=_DTYPES[self.mode])


def build_precision(cfg: PrecisionConfig, device: torch.device) -> Precision:
    mode, reason = resolve_mode(cfg.mode, device)
    scaler = torch.amp.GradScaler(device.type, init_scale=cfg.loss_scale_init,
                                  growth_interval=cfg.growth_interval, enabled=mode == "fp16")
    return Precision(mode, reason, device.type, scaler)
