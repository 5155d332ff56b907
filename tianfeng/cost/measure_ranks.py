"""The measuring processes of `tianfeng calibrate --throughput` with more than one process: what
torchrun starts on every node (`python -m tianfeng.cost.measure_ranks REQUEST.json`). Each rank
times the step grid and the allreduces (tianfeng.cost.measure.measure_rank); rank 0 writes the
throughput file the request names."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from tianfeng.core.run_config import config_from_dict
from tianfeng.cost.measure import Grid, fitted_links, measure_rank, profile, write_throughput
from tianfeng.trainers.distributed import exit_rank


def write_request(path: Path, grid: Grid, *, device: str, threads: int, output: Path) -> Path:
    """The request every rank reads: the grid, the device kind and where rank 0 writes."""
    from tianfeng.core.run_config import config_to_dict

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"config": config_to_dict(grid.cfg), "resolutions": list(grid.resolutions),
                                "batches": list(grid.batches), "in_channels": grid.in_channels,
                                "classes": grid.classes, "steps": grid.steps, "device": device,
                                "threads": threads, "output": str(output)}, indent=2))
    return path


def _grid(request: dict[str, Any], source: str) -> Grid:
    return Grid(config_from_dict(request["config"], source), tuple(request["resolutions"]),
                tuple(request["batches"]), request["in_channels"], request["classes"], request["steps"])


def main(argv: list[str] | None = None) -> int:
    path = Path((argv or sys.argv[1:])[0])
    request = json.loads(path.read_text())
    grid = _grid(request, str(path))
    local_rank, local_size = int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"])
    if request["device"] == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        torch.set_num_threads(request["threads"])
        backend = "gloo"
    dist.init_process_group(backend)
    try:
        mine = measure_rank(grid, device, local_size)
        everyone: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, mine)
        if dist.get_rank() == 0:
            nodes = dist.get_world_size() // local_size
            times = [float(np.median(values)) for values in zip(*(r["grid"] for r in everyone), strict=True)]
            links = fitted_links(local_size, nodes, mine["intra"], mine["inter"])
            result = profile(grid, times, processes=local_size, nodes=nodes, threads=request["threads"],
                             backend=backend, links=links, device=device)
            write_throughput(result, Path(request["output"]))
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    # without the interpreter's teardown: gloo's threads can abort a finished rank there
    exit_rank(main())
