"""Run under torchrun by test_accumulation_ddp.py: DDP ranks each accumulate their share of a fixed
batch in micro-batches (DDP's no_sync on all but the last, plain BatchNorm over each micro-batch,
as on a cluster's GPUs); rank 0 then trains the same model in one process on the whole batch,
micro-batch by micro-batch, with BatchNorm per emulated rank (dealt in turn), and writes the
largest differences of loss, gradients and running statistics to argv[1]."""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist
from torch import nn

from tests.distributed.ddp_against_one import differences, first_batch_norms, start
from tianfeng.core.run_config import PrecisionConfig
from tianfeng.trainers import per_gpu_bn
from tianfeng.trainers.data.order import rank_slice
from tianfeng.trainers.distributed import exit_rank
from tianfeng.trainers.noise_scale import accumulated_backward
from tianfeng.trainers.precision import build_precision


def main() -> None:
    per_rank, chunks = int(sys.argv[2]), int(sys.argv[3])
    s = start(per_rank)
    loss_fn = nn.CrossEntropyLoss()
    precision = build_precision(PrecisionConfig(mode="fp32"), torch.device("cpu"))

    ddp = nn.parallel.DistributedDataParallel(s.model)
    mine = rank_slice(len(s.x), s.rank, s.world)  # as the loaders deal a global batch
    loss = accumulated_backward(ddp, loss_fn, s.x[mine], s.y[mine], precision, chunks)
    losses = [torch.zeros(()) for _ in range(s.world)]
    dist.all_gather(losses, loss.detach().float())

    if s.rank == 0:
        # dealt in turn, micro-batch j of the one process holds micro-batch j of every rank
        emulated = per_gpu_bn.convert(s.reference)
        per_gpu_bn.set_groups(emulated, s.world)
        whole = accumulated_backward(emulated, loss_fn, s.x, s.y, precision, chunks)
        with open(sys.argv[1], "w") as f:
            json.dump({"loss_ddp": torch.stack(losses).mean().item(), "loss_emulated": whole.item(),
                       **differences(s.model, emulated),
                       "batches_tracked": int(first_batch_norms(s.model, emulated)[1].num_batches_tracked)}, f)
    dist.barrier()
    dist.destroy_process_group()
    exit_rank(0)


if __name__ == "__main__":
    main()
