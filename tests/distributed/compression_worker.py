"""Run under torchrun by test_hooks.py: one small MLP trained with each compression hook (flat
and composed with the hierarchical hook); rank 0 writes losses, inter-node bytes per step and
the final weights."""

import json
import sys

import torch
import torch.distributed as dist
from torch import nn

from tianfeng.trainers.comm import compression, hierarchical
from tianfeng.trainers.distributed import exit_rank

STEPS = 40


def batches(rank: int):
    teacher = torch.Generator().manual_seed(123)
    w = torch.randn(64, 10, generator=teacher)
    data = torch.Generator().manual_seed(1000 + rank)
    for _ in range(STEPS):
        x = torch.randn(32, 64, generator=data)
        yield x, (x @ w).argmax(dim=1)


def train(variant: str, layout: hierarchical.NodeLayout, hier_state) -> dict:
    torch.manual_seed(0)
    ddp = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)))
    if variant == "flat":
        state = hierarchical.FlatState(layout)
        ddp.register_comm_hook(state, hierarchical.flat_allreduce_hook)
    else:
        kind, _, where = variant.partition("+")
        state = compression.build_state(kind, layout, topk_ratio=0.05, powersgd_rank=4, powersgd_start_step=2,
                                        hierarchical=hier_state if where.startswith("hier") else None)
        if where == "hier-full-rank":  # every matrix compressed at full rank: exact
            state.node_powersgd.rank, state.node_powersgd.min_rate = 10**6, 0.0
        ddp.register_comm_hook(state, compression.compressed_allreduce_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for x, y in batches(dist.get_rank()):
        loss = nn.functional.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return {"first": sum(losses[:5]) / 5, "last": sum(losses[-5:]) / 5,
            "inter_payload_per_step": state.bytes.inter_payload / STEPS,
            "weights": torch.cat([p.detach().reshape(-1) for p in ddp.parameters()]).tolist()}


def large_gradients(variant: str, layout: hierarchical.NodeLayout, hier_state) -> list[float]:
    """Every rank's gradient is 30,000 per weight: fp16 holds it (max 65,504) but not the sum
    over 4 ranks. Returns the gradient DDP leaves after the hook (the mean, 30,000, or inf)."""
    kind, _, where = variant.partition("+")
    ddp = nn.parallel.DistributedDataParallel(nn.Linear(8, 1, bias=False))
    state = compression.build_state(kind, layout, hierarchical=hier_state if where == "hier" else None)
    ddp.register_comm_hook(state, compression.compressed_allreduce_hook)
    (30_000.0 * ddp(torch.ones(1, 8)).sum()).backward()
    return ddp.module.weight.grad.reshape(-1).tolist()


def main() -> None:
    out_path = sys.argv[1]
    dist.init_process_group("gloo")
    layout = hierarchical.NodeLayout(dist.get_world_size(), dist.get_rank(), 2)
    hier_state = hierarchical.build_state(2)
    results = {v: train(v, layout, hier_state)
               for v in ("flat", "fp16", "bf16", "topk", "powersgd", "fp16+hier", "topk+hier", "powersgd+hier",
                       "powersgd+hier-full-rank")}
    results["large_gradients"] = {v: large_gradients(v, layout, hier_state) for v in ("fp16", "fp16+hier")}
    results["params"] = 64 * 128 + 128 + 128 * 10 + 10  # the MLP's, for the hand counts
    if dist.get_rank() == 0:
        with open(out_path, "w") as f:
            json.dump(results, f)
    dist.destroy_process_group()
    exit_rank(0)  # no interpreter teardown: gloo can abort in it


if __name__ == "__main__":
    main()
