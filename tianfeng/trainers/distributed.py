"""Process-group set-up for runs under torchrun: rank, world size and the backend for the device."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from tianfeng.trainers.per_gpu_bn import emulated_groups


@dataclass(frozen=True)
class DistContext:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    local_world: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world > 1


def context_from_env() -> DistContext:
    return DistContext(rank=int(os.environ.get("RANK", 0)),
                       world=int(os.environ.get("WORLD_SIZE", 1)),
                       local_rank=int(os.environ.get("LOCAL_RANK", 0)),
                       local_world=int(os.environ.get("LOCAL_WORLD_SIZE", 1)))


def init(backend: str, device: torch.device) -> DistContext:
    """Join the process group torchrun described in the environment (a no-op for one process).
    On a GPU the rank's device is made current and bound to the group first: otherwise every
    rank opens a context on GPU 0 and NCCL's collectives (the shutdown barrier too) use it."""
    ctx = context_from_env()
    if ctx.enabled and not dist.is_initialized():
        if backend == "auto":
            backend = "nccl" if device.type == "cuda" else "gloo"
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(backend=backend, device_id=device if device.type == "cuda" else None)
    return ctx


def validate_world(cfg, ctx: DistContext) -> int:
    """Checks that need the world size; returns the ranks per node."""
    from tianfeng.core.errors import ConfigError

    for i, phase in enumerate(cfg.phases):
        if phase.batch_size % ctx.world:
            raise ConfigError("", f"phases.{i}.batch_size", f"must be divisible by the world size "
                              f"({ctx.world} ranks), got {phase.batch_size}")
    emulated = cfg.distributed.emulate_gpus
    if emulated > ctx.world:  # as many ranks as GPUs or more: each rank's own BatchNorm is the GPU's
        if emulated % ctx.world:
            raise ConfigError("", "distributed.emulate_gpus", f"must be a multiple of the world size ({ctx.world} "
                              f"ranks): each rank emulates whole GPUs, got {emulated}")
        for i, phase in enumerate(cfg.phases):
            least = emulated * cfg.accumulate_steps
            if phase.batch_size < least:
                times = f" x accumulate_steps ({cfg.accumulate_steps}) = {least}" if cfg.accumulate_steps > 1 else ""
                raise ConfigError("", f"phases.{i}.batch_size", f"must be at least distributed.emulate_gpus "
                                  f"({emulated}){times}: each GPU's micro-batch needs one image, got {phase.batch_size}")
        if cfg.distributed.sync_bn and cfg.distributed.sync_bn_scope == "node" and not cfg.distributed.sync_bn_group:
            _check_emulated_nodes(cfg, ctx.world)
    _check_bn_group(cfg, ctx.world)
    if cfg.memory_split > 1:
        groups = emulated_groups(cfg.distributed, ctx.world)
        if groups < 2 or groups % cfg.memory_split:
            raise ConfigError("", "memory_split", f"must divide the GPUs (or nodes) each of the {ctx.world} rank(s) "
                              f"emulates for BatchNorm ({max(groups, 1)}), so that every part holds whole GPUs' "
                              f"micro-batches; got {cfg.memory_split}. With a GPU per rank, raise accumulate_steps")
    local = cfg.distributed.local_size or ctx.local_world
    if ctx.world % local:
        raise ConfigError("", "distributed.local_size", f"must divide the world size ({ctx.world}), got {local}")
    if cfg.distributed.hook == "hierarchical" and ctx.world // local < 2:
        raise ConfigError("", "distributed.hook", f"hierarchical needs at least 2 nodes, and this run is "
                          f"1 node of {local} rank(s); set distributed.local_size below the world size "
                          "to emulate nodes on one machine, or use hook: none")
    return local


def _all_reduce(values: list[float], device: torch.device, ctx: DistContext, op: dist.ReduceOp) -> list[float]:
    if not ctx.enabled:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=op)
    return t.tolist()


def all_reduce_sum(values: list[float], device: torch.device, ctx: DistContext) -> list[float]:
    return _all_reduce(values, device, ctx, dist.ReduceOp.SUM)


def all_reduce_max(values: list[float], device: torch.device, ctx: DistContext) -> list[float]:
    return _all_reduce(values, device, ctx, dist.ReduceOp.MAX)


def broadcast_buffers(module: torch.nn.Module, ctx: DistContext) -> None:
    """Rank 0's buffers (BatchNorm's running statistics) onto every rank. DDP broadcasts them at
    the start of each forward, so after an epoch's last step each rank holds its own update."""
    if ctx.enabled:
        for buffer in module.buffers():
            dist.broadcast(buffer, src=0)


def shutdown() -> None:
    """Tear the process groups down together. Left to interpreter exit, gloo's worker threads can
    be destroyed while still joinable, and a rank then aborts ("terminate called without an
    active exception") after its run finished."""
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def exit_rank(code: int = 0) -> None:
    """End a torchrun rank without the interpreter's teardown: with gloo, a C++ worker thread can
    still be joinable when static destructors run, and the rank then aborts with "terminate called
    without an active exception" after a finished run (seen in CI on 2 of 3 runs). Call it once
    the process group is destroyed and every file closed; it flushes and leaves."""
    import logging
    import sys

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def consecutive_group(size: int):
    """This rank's process group of `size` consecutive ranks (ranks 0..size-1, size..2*size-1,
    ...); every rank must call it, each subgroup being made by all of them."""
    return dist.new_subgroups(group_size=size)[0]


def _check_bn_group(cfg, world: int) -> None:
    """A BatchNorm group is whole GPUs of one process's share (emulated) or whole ranks (real)."""
    from tianfeng.core.errors import ConfigError

    d, group = cfg.distributed, cfg.distributed.sync_bn_group
    if not group:
        return
    if not d.sync_bn:
        raise ConfigError("", "distributed.sync_bn_group", f"needs sync_bn: true (statistics over groups of {group} "
                          "GPUs), got sync_bn: false")
    emulating = d.emulate_gpus > world
    gpus = d.emulate_gpus // world if emulating else world
    if gpus % group:
        whose = f"GPUs each of the {world} process(es) emulates" if emulating else "ranks"
        raise ConfigError("", "distributed.sync_bn_group", f"must divide the {whose} ({gpus}), got {group}")


def _check_emulated_nodes(cfg, world: int) -> None:
    """Node-scope SyncBatchNorm in fewer processes than GPUs: each process emulates whole nodes
    (BatchNorm over a node's share of the batch), so a node never spans two processes."""
    from tianfeng.core.errors import ConfigError

    gpus, per_node = cfg.distributed.emulate_gpus, cfg.distributed.emulate_gpus_per_node
    if per_node < 1:
        raise ConfigError("", "distributed.emulate_gpus_per_node", "must be set (the target's GPUs per node) for "
                          "sync_bn_scope: node in fewer processes than distributed.emulate_gpus")
    if gpus % per_node or (gpus // world) % per_node:
        raise ConfigError("", "distributed.emulate_gpus_per_node", f"must divide the GPUs each of the {world} "
                          f"process(es) emulates ({gpus // world}) for sync_bn_scope: node, got {per_node}")
