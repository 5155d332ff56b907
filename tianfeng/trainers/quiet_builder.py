"""Silence for torch's C++ extension builder, used by the compile path and the per-GPU BatchNorm
kernel's build."""

from __future__ import annotations

import logging


def quiet_extension_builder() -> None:
    """torch's C++ extension builder (imported by inductor's CPU path and by the per-GPU
    BatchNorm kernel's build) warns on a CUDA build of torch on a machine without a GPU that it
    found no CUDA runtime, and logs its build steps: neither says anything about the run."""
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
