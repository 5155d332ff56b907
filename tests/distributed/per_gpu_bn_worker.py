"""Run under torchrun by test_per_gpu_bn_ddp.py: a ResNet trains one step on DDP ranks, each with
its own share of a fixed batch and plain BatchNorm (as GPUs of a cluster do); rank 0 then trains
the same model in one process on the whole batch with BatchNorm per group of a rank's share
(tianfeng.trainers.per_gpu_bn) and writes the largest differences of loss and gradients to argv[1]."""

from __future__ import annotations

import copy
import json
import sys

import torch
import torch.distributed as dist
from torch import nn

from tianfeng.core.run_config import ModelConfig
from tianfeng.trainers import per_gpu_bn
from tianfeng.trainers.data.order import rank_slice
from tianfeng.trainers.distributed import exit_rank
from tianfeng.trainers.models import build_model


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    per_rank = int(sys.argv[2])
    torch.manual_seed(0)
    model = build_model(ModelConfig(width=8, depth=1, stages=2, zero_init_residual=False), 3, 5)
    reference = copy.deepcopy(model)  # identical on every rank: same seed
    x = torch.randn(per_rank * world, 3, 12, 12)
    y = torch.randint(0, 5, (per_rank * world,))
    loss_fn = nn.CrossEntropyLoss()

    ddp = nn.parallel.DistributedDataParallel(model)
    mine = rank_slice(len(x), rank, world)  # as the loaders deal a global batch
    loss = loss_fn(ddp(x[mine]), y[mine])
    loss.backward()  # DDP averages the gradients over the ranks
    losses = [torch.zeros(()) for _ in range(world)]
    dist.all_gather(losses, loss.detach())

    if rank == 0:
        emulated = per_gpu_bn.convert(reference)
        assert per_gpu_bn.set_groups(emulated, world) > 0
        whole = loss_fn(emulated(x), y)  # equal shares: the mean over all is the mean of the ranks' means
        whole.backward()
        plain = copy.deepcopy(emulated)
        per_gpu_bn.set_groups(plain, 0)
        plain_loss = loss_fn(plain(x), y)
        grad_diff = max((a.grad - b.grad).abs().max().item()
                        for a, b in zip(model.parameters(), emulated.parameters(), strict=True))
        grad_scale = max(a.grad.abs().max().item() for a in model.parameters())
        bn = next(m for m in emulated.modules() if isinstance(m, per_gpu_bn.PerGpuBatchNorm))
        first_bn = next(m for m in model.modules() if isinstance(m, nn.BatchNorm2d))
        with open(sys.argv[1], "w") as f:
            json.dump({"loss_ddp": torch.stack(losses).mean().item(), "loss_emulated": whole.item(),
                       "loss_whole_batch_bn": plain_loss.item(), "grad_diff": grad_diff,
                       "grad_scale": grad_scale,
                       "running_mean_diff": (bn.running_mean - first_bn.running_mean).abs().max().item(),
                       "running_var_diff": (bn.running_var - first_bn.running_var).abs().max().item(),
                       "running_var_moved": (first_bn.running_var - 1).abs().max().item()}, f)
    dist.barrier()
    dist.destroy_process_group()
    exit_rank(0)


if __name__ == "__main__":
    main()
