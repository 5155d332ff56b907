"""Run under torchrun by test_sync_bn.py: each rank normalises its share of one fixed batch with
GlobalBatchNorm2d; rank 0 checks outputs, gradients and running statistics against one
BatchNorm2d on the whole batch and writes the largest differences to the file in argv[1]."""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist
from torch import nn

from tianfeng.trainers.comm.hierarchical import build_state
from tianfeng.trainers.distributed import consecutive_group, exit_rank
from tianfeng.trainers.sync_bn import convert


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    # argv[2], ranks per node: statistics over a node's ranks only (sync_bn_scope: node); 0: all
    local = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    # argv[3] "consecutive": the group is the engine's sync_bn_group (consecutive ranks), not a node's
    consecutive = len(sys.argv) > 3 and sys.argv[3] == "consecutive"
    group = (consecutive_group(local) if consecutive else build_state(local).node_group) if local else None
    span = local or world  # node 0's ranks (or all of them) share one normalisation
    torch.manual_seed(0)
    x = torch.randn(8 * world, 3, 5, 5) * 3 + 1
    probe = torch.randn_like(x)  # a loss whose gradient differs per element
    reference = nn.BatchNorm2d(3)
    with torch.no_grad():
        reference.weight.uniform_(0.5, 1.5)
        reference.bias.uniform_(-0.5, 0.5)
    model = convert(nn.Sequential(nn.BatchNorm2d(3)), torch.device("cpu"), group)
    model[0].load_state_dict(reference.state_dict())

    mine = x.chunk(world)[rank].clone().requires_grad_(True)
    y = model(mine)
    (y * probe.chunk(world)[rank]).sum().backward()
    grads = torch.cat([model[0].weight.grad, model[0].bias.grad])
    dist.all_reduce(grads)  # what DDP's sum (before its average) would hold
    ys = [torch.empty_like(y) for _ in range(world)]
    dxs = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(ys, y.detach())
    dist.all_gather(dxs, mine.grad)

    part = world // span  # node 0's share of the global batch: its ranks' shards, in order
    whole = x[: len(x) // part].clone().requires_grad_(True)
    y_ref = reference(whole)
    (y_ref * probe[: len(x) // part]).sum().backward()
    if rank == 0:
        diff = {
            "y": (torch.cat(ys[:span]) - y_ref).abs().max().item(),
            "dx": (torch.cat(dxs[:span]) - whole.grad).abs().max().item(),
            "dw_db": 0.0 if local else (grads - torch.cat([reference.weight.grad, reference.bias.grad])).abs().max().item(),
            "running_mean": (model[0].running_mean - reference.running_mean).abs().max().item(),
            "running_var": (model[0].running_var - reference.running_var).abs().max().item(),
            "type": type(model[0]).__name__,
        }
        with open(sys.argv[1], "w") as f:
            json.dump(diff, f)
    dist.destroy_process_group()
    exit_rank(0)  # no interpreter teardown: gloo can abort in it


if __name__ == "__main__":
    main()
