"""Run under torchrun by test_hooks.py: the same model and batches through DDP's own allreduce (no
hook: the independent reference) and through the hierarchical hook, with one bucket and with
many; rank 0 writes the largest difference, the hook's byte counts and the parameter count."""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist
from torch import nn

from tianfeng.trainers.comm.hierarchical import NodeLayout, build_state, hierarchical_allreduce_hook
from tianfeng.trainers.distributed import exit_rank


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 10))


def grads(ddp: nn.Module, steps: int = 3) -> list[torch.Tensor]:
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for step in range(steps):
        torch.manual_seed(100 * step + dist.get_rank())  # each rank its own data
        x, y = torch.randn(4, 3, 8, 8), torch.randint(0, 10, (4,))
        opt.zero_grad()
        nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()
    return [p.grad.clone() for p in ddp.parameters()] + [p.detach().clone() for p in ddp.parameters()]


def main() -> None:
    out_path, local_size = sys.argv[1], int(sys.argv[2])
    dist.init_process_group("gloo")
    layout = NodeLayout(dist.get_world_size(), dist.get_rank(), local_size)
    reference = grads(nn.parallel.DistributedDataParallel(model(), bucket_cap_mb=0.01))  # DDP's own allreduce
    result = {"nodes": layout.nodes, "params": sum(p.numel() for p in model().parameters()), "steps": 3}
    for name, cap_mb in (("one_bucket", 25.0), ("many_buckets", 0.01)):
        hier = nn.parallel.DistributedDataParallel(model(), bucket_cap_mb=cap_mb)
        state = build_state(local_size)
        hier.register_comm_hook(state, hierarchical_allreduce_hook)
        mine = grads(hier)
        result[name] = {"max_diff": max((x - y).abs().max().item() for x, y in zip(reference, mine, strict=True)),
                        "bytes": vars(state.bytes)}
    if dist.get_rank() == 0:
        with open(out_path, "w") as f:
            json.dump(result, f)
    dist.destroy_process_group()
    exit_rank(0)  # no interpreter teardown: gloo can abort in it


if __name__ == "__main__":
    main()
