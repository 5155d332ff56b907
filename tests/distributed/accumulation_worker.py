"""Run under torchrun by test_accumulation_ddp.py: DDP ranks each accumulate their share of a fixed
batch in micro-batches (DDP's no_sync on all but the last, plain BatchNorm over each micro-batch,
as on a cluster's GPUs); rank 0 then trains the same model in one process on the whole batch,
micro-batch by micro-batch, with BatchNorm per emulated rank (dealt in turn), and writes the
largest differences of loss, gradients and running statistics to argv[1]."""

from __future__ import annotations

import copy
import json
import sys

import torch
import torch.distributed as dist
from torch import nn

from tianfeng.core.run_config import ModelConfig, PrecisionConfig
from tianfeng.trainers import per_gpu_bn
from tianfeng.trainers.data.order import rank_slice
from tianfeng.trainers.distributed import exit_rank
from tianfeng.trainers.models import build_model
from tianfeng.trainers.noise_scale import accumulated_backward
from tianfeng.trainers.precision import build_precision


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    per_rank, chunks = int(sys.argv[2]), int(sys.argv[3])
    torch.manual_seed(0)
    model = build_model(ModelConfig(width=8, depth=1, stages=2, zero_init_residual=False), 3, 5)
    reference = copy.deepcopy(model)  # identical on every rank: same seed
    x = torch.randn(per_rank * world, 3, 12, 12)
    y = torch.randint(0, 5, (per_rank * world,))
    loss_fn = nn.CrossEntropyLoss()
    precision = build_precision(PrecisionConfig(mode="fp32"), torch.device("cpu"))

    ddp = nn.parallel.DistributedDataParallel(model)
    mine = rank_slice(len(x), rank, world)  # as the loaders deal a global batch
    loss = accumulated_backward(ddp, loss_fn, x[mine], y[mine], precision, chunks)
    losses = [torch.zeros(()) for _ in range(world)]
    dist.all_gather(losses, loss.detach().float())

    if rank == 0:
        # dealt in turn, micro-batch j of the one process holds micro-batch j of every rank
        emulated = per_gpu_bn.convert(reference)
        per_gpu_bn.set_groups(emulated, world)
        whole = accumulated_backward(emulated, loss_fn, x, y, precision, chunks)
        grad_diff = max((a.grad - b.grad).abs().max().item()
                        for a, b in zip(model.parameters(), emulated.parameters(), strict=True))
        grad_scale = max(a.grad.abs().max().item() for a in model.parameters())
        bn = next(m for m in emulated.modules() if isinstance(m, per_gpu_bn.PerGpuBatchNorm))
        first_bn = next(m for m in model.modules() if isinstance(m, nn.BatchNorm2d))
        with open(sys.argv[1], "w") as f:
            json.dump({"loss_ddp": torch.stack(losses).mean().item(), "loss_emulated": whole.item(),
                       "grad_diff": grad_diff, "grad_scale": grad_scale,
                       "running_mean_diff": (bn.running_mean - first_bn.running_mean).abs().max().item(),
                       "batches_tracked": int(first_bn.num_batches_tracked)}, f)
    dist.barrier()
    dist.destroy_process_group()
    exit_rank(0)


if __name__ == "__main__":
    main()
