"""How many local worker processes a search runs: `--workers N`, or `auto` (the default).

auto: one per visible GPU, each trial on its own GPU. Without GPUs, one per CPU core (at most
MAX_CPU_WORKERS), each with its share of the cores: proxy runs are small, and PyTorch spreads a
small network's operators over several threads poorly. Measured on this project's 2-core machine
(resnet_small at the lowres_half rung): two one-thread trials at once train 1.5x the images per
second of one two-thread trial, and a 12-trial search took 1/1.53 of the wall time.
"""

from __future__ import annotations

from tianfeng.core.cores import usable_cores
from tianfeng.core.errors import ConfigError

MAX_CPU_WORKERS = 8  # beyond this, SQLite's single writer and memory per process start to cost


def parse_workers(text: str | int) -> int | str:
    """`auto` or a count >= 1, for --workers and the Python API."""
    if text == "auto":
        return "auto"
    try:
        count = int(text)
    except (TypeError, ValueError):
        raise ConfigError("--workers", "", f"must be auto or a number >= 1, got {text!r}") from None
    if count < 1:
        raise ConfigError("--workers", "", f"must be auto or a number >= 1, got {count}")
    return count


def resolve_workers(setting: int | str, trials_left: int, *, gpus: int | None = None,
                    cores: int | None = None, per_trial: int = 1) -> tuple[int, str]:
    """(workers, why) for `setting`, never more than the trials left to run; a trial on
    `per_trial` ranks takes that many GPUs (or cores)."""
    setting = parse_workers(setting)
    if setting != "auto":
        return setting, "as asked"
    if gpus is None:
        import torch

        gpus = torch.cuda.device_count()  # respects CUDA_VISIBLE_DEVICES
    cores = cores or usable_cores()
    left = max(1, trials_left)
    if gpus:
        n = max(1, min(gpus // per_trial, left))
        return n, (f"auto: one per GPU, {gpus} GPU(s)" if per_trial == 1 else
                   f"auto: one per {per_trial} GPUs (--gpus-per-trial), {gpus} GPU(s)")
    n = max(1, min(cores // per_trial, MAX_CPU_WORKERS, left))
    threads = max(1, cores // n)
    return n, (f"auto: {cores} CPU core(s), {threads} thread(s) per trial; --workers 1 runs one trial at a "
               "time, reproducibly in order")
