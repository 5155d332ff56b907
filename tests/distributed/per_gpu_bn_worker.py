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

from tests.distributed.ddp_against_one import differences, first_batch_norms, start
from tianfeng.trainers import per_gpu_bn
from tianfeng.trainers.data.order import rank_slice
from tianfeng.trainers.distributed import exit_rank


def main() -> None:
    s = start(int(sys.argv[2]))
    loss_fn = nn.CrossEntropyLoss()

    ddp = nn.parallel.DistributedDataParallel(s.model)
    mine = rank_slice(len(s.x), s.rank, s.world)  # as the loaders deal a global batch
    loss = loss_fn(ddp(s.x[mine]), s.y[mine])
    loss.backward()  # DDP averages the gradients over the ranks
    losses = [torch.zeros(()) for _ in range(s.world)]
    dist.all_gather(losses, loss.detach())

    if s.rank == 0:
        emulated = per_gpu_bn.convert(s.reference)
        assert per_gpu_bn.set_groups(emulated, s.world) > 0
        whole = loss_fn(emulated(s.x), s.y)  # equal shares: the mean over all is the mean of the ranks' means
        whole.backward()
        plain = copy.deepcopy(emulated)
        per_gpu_bn.set_groups(plain, 0)
        plain_loss = loss_fn(plain(s.x), s.y)
        bn, first_bn = first_batch_norms(s.model, emulated)
        with open(sys.argv[1], "w") as f:
            json.dump({"loss_ddp": torch.stack(losses).mean().item(), "loss_emulated": whole.item(),
                       "loss_whole_batch_bn": plain_loss.item(), **differences(s.model, emulated),
                       "running_var_diff": (bn.running_var - first_bn.running_var).abs().max().item(),
                       "running_var_moved": (first_bn.running_var - 1).abs().max().item()}, f)
    dist.barrier()
    dist.destroy_process_group()
    exit_rank(0)


if __name__ == "__main__":
    main()
