"""Run under torchrun by comm_hooks.py: times DDP steps of the proxy net with each gradient
exchange variant and counts the bytes each rank sends between (emulated) nodes."""

from __future__ import annotations

import json
import sys
import time

import torch
import torch.distributed as dist
from torch import nn

from tianfeng.core.run_config import ModelConfig
from tianfeng.trainers.comm import compression, hierarchical
from tianfeng.trainers.distributed import exit_rank
from tianfeng.trainers.models import build_model

# "... blocking": the same hook running its collectives inside the hook call, as before the hooks
# got their background thread (no overlap with the rest of the backward pass)
VARIANTS = ("flat", "hierarchical", "hierarchical blocking", "fp16+hier", "fp16+hier blocking", "topk+hier",
            "fp16", "powersgd")


def time_variant(name: str, layout, hier_state, steps: int, batch: int) -> dict:
    variant, _, blocking = name.partition(" ")
    torch.manual_seed(0)
    model = build_model(ModelConfig(width=16, depth=1, stages=3), 3, 10)
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=5)
    if variant == "flat":
        state = hierarchical.FlatState(layout)
        ddp.register_comm_hook(state, hierarchical.flat_allreduce_hook)
    elif variant == "hierarchical":
        state = hierarchical.HierarchicalState(hier_state.layout, hier_state.node_group, hier_state.cross_group,
                                               background=None if blocking else hierarchical.Background())
        ddp.register_comm_hook(state, hierarchical.hierarchical_allreduce_hook)
    else:
        kind, _, where = variant.partition("+")
        state = compression.build_state(kind, layout, topk_ratio=0.01, powersgd_rank=4, powersgd_start_step=2,
                                        hierarchical=hier_state if where else None)
        if blocking:
            state.background = None
        ddp.register_comm_hook(state, compression.compressed_allreduce_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(batch, 3, 16, 16), torch.randint(0, 10, (batch,))
    for i in range(steps + 3):
        if i == 3:  # warm-up steps (and PowerSGD's plain-allreduce start) are not counted
            state.bytes = type(state.bytes)()
            start = time.perf_counter()
        nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()
        opt.zero_grad()
    seconds = torch.tensor([(time.perf_counter() - start) / steps])
    dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
    return {"step_s": seconds.item(), "inter_bytes": state.bytes.inter_payload / steps}


def main() -> None:
    steps, batch = int(sys.argv[1]), int(sys.argv[2])
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    layout = hierarchical.NodeLayout(dist.get_world_size(), dist.get_rank(), 2)
    hier_state = hierarchical.build_state(2)
    results = {v: time_variant(v, layout, hier_state, steps, batch) for v in VARIANTS}
    if dist.get_rank() == 0:
        print(json.dumps(results))
    dist.destroy_process_group()
    exit_rank(0)  # no interpreter teardown: gloo can abort in it


if __name__ == "__main__":
    main()
