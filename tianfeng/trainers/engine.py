"""The training loop. Models, optimizers, schedules, data, precision and checkpoints are small
modules it calls; this file is meant to be read top to bottom."""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
import yaml
from torch import nn

from tianfeng.core.epoch_metrics import EpochMetrics
from tianfeng.core.errors import ConfigError
from tianfeng.core.lr_schedule import learning_rate
from tianfeng.core.run_config import RunConfig, config_to_dict
from tianfeng.core.states import RunStatus
from tianfeng.trainers import (
    checkpoint,
    compilation,
    memory_format,
    per_gpu_bn,
    stop_signals,
    sync_bn,
)
from tianfeng.trainers import distributed as dist_utils
from tianfeng.trainers.collapse import collapse_message
from tianfeng.trainers.comm import compression, fusion, hierarchical
from tianfeng.trainers.comm import state as comm_state
from tianfeng.trainers.data.loaders import build_pipeline
from tianfeng.trainers.data.pipeline import DataPipeline
from tianfeng.trainers.data.sources import default_cache_dir, open_source
from tianfeng.trainers.data.subset import stratified_subset
from tianfeng.trainers.models import build_model
from tianfeng.trainers.noise_scale import EpochNoise, accumulated_backward, measured_backward
from tianfeng.trainers.optim import build_optimizer
from tianfeng.trainers.phases import PhaseTimeline
from tianfeng.trainers.precision import build_precision
from tianfeng.trainers.tensorboard_log import open_board

log = logging.getLogger("tianfeng.engine")


class StopTraining(Exception):
    """Raised by an epoch callback to end the run early, e.g. when a pruner says so."""

    def __init__(self, status: str = RunStatus.PRUNED, reason: str = "") -> None:
        super().__init__(reason or status)
        self.status = status


EpochCallback = Callable[[EpochMetrics], None]


@dataclass
class RunResult:
    status: RunStatus
    epochs: list[EpochMetrics]
    run_dir: Path
    precision: str
    message: str = ""

    @property
    def final(self) -> EpochMetrics | None:
        return self.epochs[-1] if self.epochs else None


@dataclass
class _Position:
    """Where training is, saved in every checkpoint so a resumed run continues exactly."""
    epoch: int = 0  # index of the epoch in progress
    step: int = 0  # steps done in it
    global_step: int = 0
    loss_sum: float = 0.0  # of the epoch in progress
    loss_count: int = 0
    skipped: int = 0
    history: list[dict] = field(default_factory=list)
    # the gradient noise scale's sums of the epoch in progress (the world's, held by rank 0) and
    # its average over the epochs before
    noise_sums: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    noise_smoothed: list[float] | None = None


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    if name == "cuda" or (name == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise RuntimeError("device: cuda was asked for but torch sees no CUDA device; "
                               "use device: cpu or auto")
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def _cache_dir(cfg: RunConfig) -> Path:
    return Path(cfg.data.cache_dir).expanduser() if cfg.data.cache_dir else default_cache_dir()


def _model_parts(cfg: RunConfig, precision_mode: str) -> tuple:
    m = cfg.model
    return (m.name, m.width, m.depth, m.stages, precision_mode)


def _compile_policy(cfg: RunConfig, train_model: nn.Module, device: torch.device, ctx: dist_utils.DistContext,
                    precision, layout: str) -> compilation.CompilePolicy:
    """engine.compile for this run; rank 0's `auto` decision is every rank's."""
    def share(verdict: bool) -> bool:
        if not ctx.enabled:
            return verdict
        shared = [verdict]
        torch.distributed.broadcast_object_list(shared, src=0)
        return bool(shared[0])

    cuda_graphs = cfg.engine.compile_mode in ("reduce-overhead", "max-autotune")
    if ctx.enabled and ctx.is_main and cfg.engine.compile != "off" and cuda_graphs and device.type == "cuda":
        log.warning("compile_mode %s records CUDA graphs, which DDP's bucketed all-reduce was not tested with "
                    "here (no GPU); use compile_mode default if the run fails", cfg.engine.compile_mode)
    compilation.use_cache_dir(_cache_dir(cfg))
    key = compilation.model_key(device, (*_model_parts(cfg, precision.mode), layout, f"world{ctx.world}"))
    return compilation.CompilePolicy(cfg.engine.compile, cfg.engine.compile_mode, train_model, device,
                                     is_main=ctx.is_main, share=share, cache_dir=_cache_dir(cfg), model_key=key)


def _memory_format(cfg: RunConfig, model: nn.Module, ctx: dist_utils.DistContext, device: torch.device,
                   timeline: PhaseTimeline, source, precision, bn_groups: int) -> tuple[str, str]:
    """The run's layout; under DDP rank 0 decides for all (a rank's gradient buckets follow its
    parameters' strides, so every rank must use the same one)."""
    heaviest = max(timeline.phases, key=lambda p: p.epochs * p.resolution**2)
    choice = ("", "")
    if ctx.is_main:
        choice = memory_format.choose(
            cfg.memory_format, model, device=device, channels=source.channels, resolution=heaviest.resolution,
            batch=max(1, heaviest.batch_size // ctx.world), classes=source.num_classes, autocast=precision.autocast,
            cache_dir=_cache_dir(cfg), key_parts=_model_parts(cfg, precision.mode), bn_groups=bn_groups)
    if ctx.enabled:
        shared = [choice]
        torch.distributed.broadcast_object_list(shared, src=0)
        choice = shared[0]
    return choice


def _wrap_distributed(model: nn.Module, cfg: RunConfig, ctx: dist_utils.DistContext,
                      device: torch.device, local_size: int, data: DataPipeline, timeline: PhaseTimeline,
                      loss_fn: nn.Module, autocast: Callable) -> tuple[nn.Module, object]:
    """DDP with the configured bucket size (or the fastest of a few, for `auto`) and comm hook."""
    if not ctx.enabled:
        return model, None
    dcfg = cfg.distributed
    hier = hierarchical.build_state(local_size) if dcfg.hook == "hierarchical" else None  # its groups, once

    def new_comm_state():
        """The hook's state: byte counts, and for compression its error feedback and PowerSGD's
        matrices, which belong to one bucket layout and one run."""
        if dcfg.compression == "none":
            return None if hier is None else replace(hier, bytes=hierarchical.CommBytes())
        layout = hierarchical.NodeLayout(ctx.world, ctx.rank, local_size)
        return compression.build_state(dcfg.compression, layout, topk_ratio=dcfg.topk_ratio,
                                       powersgd_rank=dcfg.powersgd_rank,
                                       powersgd_start_step=dcfg.powersgd_start_step, hierarchical=hier)

    def wrap(bucket_mb: float, comm) -> nn.Module:
        # broadcast_buffers stays on: every rank steps from rank 0's BatchNorm statistics, so the
        # checkpoint (rank 0's) and a resumed run agree (the epoch's end broadcasts them again
        # before evaluating); it costs one coalesced broadcast of the buffers per step (about
        # 0.2 MB for ResNet-50)
        ddp = nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None, bucket_cap_mb=bucket_mb)
        if dcfg.compression != "none":
            ddp.register_comm_hook(comm, compression.compressed_allreduce_hook)
        elif comm is not None:
            ddp.register_comm_hook(comm, hierarchical.hierarchical_allreduce_hook)
        return ddp

    bucket_mb = dcfg.bucket_mb
    stateful = dcfg.compression in ("topk", "powersgd")
    if bucket_mb == "auto" or stateful:
        first = timeline.phases[0]
        batch = next(iter(data.train_batches(0, first.resolution, first.batch_size)))
    if bucket_mb == "auto":
        # each candidate runs with a throw-away hook state: the run's starts untouched
        bucket_mb, timings = fusion.choose_bucket_mb(model, lambda mb: wrap(mb, new_comm_state()), batch, loss_fn,
                                                     autocast=autocast)
        if ctx.is_main:
            log.info("bucket_mb auto: %s -> %g MB", ", ".join(f"{mb:g} MB {1000 * s:.1f} ms"
                                                            for mb, s in timings.items()), bucket_mb)
    comm = new_comm_state()
    ddp = wrap(bucket_mb, comm)
    if stateful:  # the buckets every step will use, then a hook state the settling never touched
        fusion.settle_buckets(ddp, model, batch, loss_fn, autocast)
        fresh = vars(new_comm_state())
        fresh.pop("background", None)  # keep the hook's thread
        vars(comm).update(fresh)
    return ddp, comm


DIVERGENCE_CHECK_STEPS = 16  # on accelerators: a non-finite loss stops the run at most this late


def divergence_check_steps(device: torch.device) -> int:
    """Reading the loss on the host every step would stall an accelerator; on a CPU it is free."""
    return 1 if device.type == "cpu" else DIVERGENCE_CHECK_STEPS


class DivergenceCheck:
    """Whether any rank's loss has been non-finite, and whether any rank was sent a stop signal:
    one MAX all-reduce of two flags, so every rank decides the same (a rank leaving alone would
    hang the others in their next all-reduce)."""

    def __init__(self, ctx: dist_utils.DistContext) -> None:
        self.ctx = ctx
        self.last: str | None = None  # what the last check found: the loss, or "non-finite"
        self.stop_signal: int | None = None  # a stop signal some rank received, agreed by all

    def check(self, nonfinite: torch.Tensor, loss: torch.Tensor | None) -> str | None:
        # the stop signal rides on the same all-reduce: every rank learns it at the same step
        signum = stop_signals.received() or 0
        flags = torch.stack([nonfinite.to(torch.float32).reshape(()),
                             torch.tensor(float(signum), device=nonfinite.device)])
        if self.ctx.enabled:
            torch.distributed.all_reduce(flags, op=torch.distributed.ReduceOp.MAX)
        flag, agreed = flags.tolist()  # one wait for the device
        self.stop_signal = int(agreed) or None
        if not flag:
            self.last = None
        elif loss is not None and not torch.isfinite(loss.detach()).item():
            self.last = str(loss.item())
        else:
            self.last = "non-finite" + ("" if nonfinite.item() else " on another rank")
        return self.last


def _saves_now(cfg: RunConfig, pos: _Position) -> bool:
    """Whether this step ends with a mid-epoch checkpoint (a diverged model must not be saved)."""
    every = cfg.checkpoint.every_steps
    return bool(every) and (pos.global_step + 1) % every == 0


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class _EvaluationCut(Exception):  # noqa: N818
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _agreed_stop_signal(run: _Run, batch: int) -> int | None:
    """A stop signal any rank received, agreed by every rank before validation batch `batch`:
    asked only at batches every rank reads (their shares differ by a row at most) and, on an
    accelerator, every `check_every` batches, as the training steps are."""
    if batch % run.check_every or batch >= run.data.val_batches_on_every_rank():
        return None
    flag = torch.tensor(float(stop_signals.received() or 0), device=run.device)
    if run.ctx.enabled:
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
    return int(flag.item()) or None


@torch.no_grad()
def evaluate(model: nn.Module, data: DataPipeline, resolution: int, precision, device: torch.device,
             ctx: dist_utils.DistContext, stop: Callable[[int], int | None] | None = None) -> tuple[float, float, float]:
    """(val loss, top-1 %, top-5 %) over the whole validation split, summed across ranks. `stop`,
    asked before each batch, returns a stop signal every rank agrees on: the evaluation ends there
    (`_EvaluationCut`)."""
    model.eval()
    loss_sum = top1 = top5 = count = 0.0
    for batch, (x, y) in enumerate(data.val_batches(resolution)):
        if stop is not None and (signum := stop(batch)):
            raise _EvaluationCut(signum)
        with precision.autocast():
            logits = model(x)
        loss_sum += nn.functional.cross_entropy(logits.float(), y, reduction="sum").item()
        k = min(5, logits.shape[1])
        hits = logits.topk(k, dim=1).indices == y[:, None]
        top1 += hits[:, 0].sum().item()
        top5 += hits.any(dim=1).sum().item()
        count += len(y)
    loss_sum, top1, top5, count = dist_utils.all_reduce_sum([loss_sum, top1, top5, count], device, ctx)
    model.train()
    return loss_sum / count, 100.0 * top1 / count, 100.0 * top5 / count


def _matching_checkpoint(cfg: RunConfig, ckpt_dir: Path) -> dict | None:
    """The checkpoint to resume from, if any; one written by a different run is refused."""
    saved = checkpoint.load(ckpt_dir) if cfg.checkpoint.resume else None
    if saved is not None:
        changed = checkpoint.config_changes(saved["config"], config_to_dict(cfg))
        if changed:
            raise ConfigError("", "checkpoint.dir",
                              f"{ckpt_dir / checkpoint.LAST} was written by a different run "
                              f"({', '.join(changed[:3])} differ); resume only the same run, or "
                              "use a new run_dir or checkpoint.resume: false")
    return saved


@dataclass
class _Run:
    """What one run holds from its set-up to its end: the pieces the step, the epoch's end and
    the checkpoint all use."""
    cfg: RunConfig
    ctx: dist_utils.DistContext
    device: torch.device
    local_size: int
    run_dir: Path
    ckpt_dir: Path
    timeline: PhaseTimeline
    data: DataPipeline
    model: nn.Module  # the module whose weights are saved
    train_model: nn.Module  # what the step runs: the model wrapped by DDP when distributed
    comm: object | None  # the comm hook's state, when the run has one
    optimizer: torch.optim.Optimizer
    precision: object
    loss_fn: nn.Module
    layout: str
    pos: _Position = field(default_factory=_Position)
    history: list[EpochMetrics] = field(default_factory=list)
    noise: EpochNoise | None = None
    divergence: DivergenceCheck | None = None
    nonfinite: torch.Tensor | None = None  # a non-finite loss since the last check, on the device
    check_every: int = 1
    params: list = field(default_factory=list)
    compiler: object = None
    shapes: list = field(default_factory=list)
    started: float = 0.0
    board: object = None
    end_epoch: int = 0  # the epochs this run trains: engine.stop_after_epochs, else all
    classes: int = 0  # of the data set: chance and a uniform guess's loss (collapse)
    startup_s: float | None = None  # from train() to the first step, until the first epoch reports it
    bn_groups: int = 0  # the emulated GPUs (or nodes) each process deals a batch to (per_gpu_bn)


@dataclass
class _EpochSums:
    """One epoch's running totals, on the device until the epoch ends."""
    loss: torch.Tensor
    skipped: torch.Tensor
    wait_s: float = 0.0
    samples: int = 0
    lr: float = 0.0
    started: float = 0.0


def train(cfg: RunConfig, on_epoch_end: EpochCallback | None = None, *,
          max_steps: int | None = None) -> RunResult:
    """Run `cfg` to the end (or until diverged, stopped by the callback, or `max_steps`)."""
    called = time.perf_counter()
    with stop_signals.leaving_at_once("while starting up"):
        run, saved = _set_up(cfg)
        if saved is not None:
            _resume(run, saved)
        _ready_loop(run)
    run.startup_s = time.perf_counter() - called  # reported with this process's first epoch
    status, message = RunStatus.COMPLETED, ""
    try:
        while run.pos.epoch < run.end_epoch:
            phase = run.timeline.phase_of_epoch(run.pos.epoch)  # the batch size and resolution change here
            status, message, sums = _train_epoch(run, phase, max_steps)
            if status != RunStatus.COMPLETED:
                break
            metrics = _end_epoch(run, phase, sums)
            if on_epoch_end is not None:
                on_epoch_end(metrics)
            collapsed = (collapse_message(run.history, run.classes, run.cfg.engine.collapse_patience)
                         if run.pos.epoch < run.end_epoch else None)  # the last epoch is trained: nothing to save
            if collapsed:
                status, message = RunStatus.DIVERGED, collapsed
                break
        if status == RunStatus.COMPLETED and run.end_epoch < run.timeline.total_epochs:
            status = RunStatus.STOPPED
            message = f"stopped after epoch {run.end_epoch} of {run.timeline.total_epochs} (engine.stop_after_epochs)"
    except StopTraining as stop:
        status, message = RunStatus(stop.status), str(stop)
    finally:
        if run.board is not None:
            run.board.close()
    return _finish(run, status, message)


def _set_up(cfg: RunConfig) -> tuple[_Run, dict | None]:
    """Process group, device, data, model, optimizer, precision; the matching checkpoint, if any."""
    ctx = dist_utils.context_from_env()
    local_size = dist_utils.validate_world(cfg, ctx)
    device = resolve_device(cfg.device, ctx.local_rank)
    ctx = dist_utils.init(cfg.distributed.backend, device)
    _seed_everything(cfg.seed)
    run_dir, ckpt_dir = cfg.resolved_run_dir, cfg.resolved_checkpoint_dir
    source = open_source(cfg.data.source, synthetic_images=cfg.data.synthetic_images,
                         synthetic_classes=cfg.data.synthetic_classes,
                         resolution=max(p.resolution for p in cfg.phases))
    train_indices = stratified_subset(source.train.labels, cfg.data.fraction, cfg.seed)
    if ctx.enabled:  # every rank reads last.pt after rank 0 finished writing it (a run ended in this process)
        torch.distributed.barrier()
    saved = _matching_checkpoint(cfg, ckpt_dir)  # before anything is written to the run
    timeline = PhaseTimeline(cfg.phases, len(train_indices))
    data, loader_reason = build_pipeline(source, cfg.data, seed=cfg.seed, train_indices=train_indices,
                                         resolution=timeline.max_resolution, rank=ctx.rank,
                                         world=ctx.world, device=device)
    data.prepare([p.resolution for p in timeline.phases])
    model = build_model(cfg.model, source.channels, source.num_classes).to(device)
    # fewer processes than the target's GPUs: BatchNorm over each GPU's (or node's) share, not
    # the process's (with SyncBatchNorm over the world the cluster normalises over the whole batch)
    groups = per_gpu_bn.emulated_groups(cfg.distributed, ctx.world)
    if groups:
        model = per_gpu_bn.convert(model)
        per_gpu_bn.set_groups(model, groups // cfg.memory_split)  # each part holds whole GPUs' images
    elif cfg.distributed.sync_bn and ctx.enabled:  # before the optimizer takes the parameters
        if cfg.distributed.sync_bn_group:  # every rank makes every subgroup, as torch asks
            group = dist_utils.consecutive_group(cfg.distributed.sync_bn_group)
        else:
            group = (hierarchical.build_state(local_size).node_group
                     if cfg.distributed.sync_bn_scope == "node" else None)
        model = sync_bn.convert(model, device, group)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # shapes are fixed within a phase: tune once per shape
    optimizer = build_optimizer(model, cfg.optimizer)
    precision = build_precision(cfg.precision, device)
    layout, layout_reason = _memory_format(cfg, model, ctx, device, timeline, source, precision, groups)
    model = model.to(memory_format=memory_format.FORMATS[layout])
    data.memory_format = memory_format.FORMATS[layout]
    loss_fn = nn.CrossEntropyLoss(label_smoothing=cfg.optimizer.label_smoothing)
    train_model, comm = _wrap_distributed(model, cfg, ctx, device, local_size, data, timeline, loss_fn,
                                          precision.autocast)
    if ctx.is_main:  # only now, with everything that can refuse the config built: a refused one leaves no file
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(yaml.safe_dump(config_to_dict(cfg), sort_keys=False))
        log.info("device %s, world %d (%d per node), precision %s (%s)", device, ctx.world, local_size,
                 precision.mode, precision.reason)
        log.info("memory format %s (%s)", layout, layout_reason)
        log.info("%s; %d training images of %d, %d classes, %d steps in %d epochs",
                 loader_reason, len(train_indices), len(source.train), source.num_classes,
                 timeline.total_steps, timeline.total_epochs)
        if groups:
            total = groups * ctx.world
            if cfg.distributed.sync_bn and cfg.distributed.sync_bn_group:
                whose = f"group of {total} ({cfg.distributed.sync_bn_group} GPUs each, SyncBatchNorm groups)"
            elif total < cfg.distributed.emulate_gpus:
                whose = f"node of {total} ({cfg.distributed.emulate_gpus_per_node} GPUs each, node-scope SyncBatchNorm)"
            else:
                whose = f"GPU of {total}"
            log.info("BatchNorm per %s: groups of %s images%s", whose,
                     "/".join(str(p.batch_size // total // cfg.accumulate_steps) for p in timeline.phases),
                     f" (micro-batches of {cfg.accumulate_steps} accumulated)" if cfg.accumulate_steps > 1 else "")
            if cfg.memory_split > 1:
                log.info("each micro-batch in %d parts of %d GPUs' images, for this device's memory",
                         cfg.memory_split, total // cfg.memory_split)
    return _Run(cfg, ctx, device, local_size, run_dir, ckpt_dir, timeline, data, model, train_model, comm, optimizer,
                precision, loss_fn, layout, classes=source.num_classes, bn_groups=groups), saved


def _resume(run: _Run, saved: dict) -> None:
    """Weights, optimizer, loss scale, random streams and position from the last checkpoint."""
    ctx = run.ctx
    run.model.load_state_dict(saved["model"])
    run.optimizer.load_state_dict(saved["optimizer"])
    if saved.get("scaler"):  # empty when the checkpoint was written without loss scaling
        run.precision.scaler.load_state_dict(saved["scaler"])
    checkpoint.restore_rng(saved["rng"])
    run.pos = _Position(**saved["position"])
    if not ctx.is_main:  # rank 0 carries the world's partial epoch loss
        run.pos.loss_sum, run.pos.loss_count = 0.0, 0
    if run.comm is not None:
        mine = checkpoint.load_rank_state(run.ckpt_dir, ctx.rank, ctx.world, run.pos.global_step)
        if mine is not None:
            comm_state.load_comm_state(run.comm, comm_state.to_device(mine["comm"], run.device))
        elif ctx.is_main:
            log.warning("no comm hook state of step %d for world %d in %s: error feedback and "
                        "PowerSGD factors start afresh (the run is no longer the uninterrupted one)",
                        run.pos.global_step, ctx.world, run.ckpt_dir)
    if ctx.is_main:
        log.info("resumed from %s at epoch %d, step %d", run.ckpt_dir / checkpoint.LAST,
                 run.pos.epoch + 1, run.pos.step)


def _ready_loop(run: _Run) -> None:
    """The loop's own state, from the (possibly resumed) position."""
    pos, device = run.pos, run.device
    run.history = [EpochMetrics(**h) for h in pos.history]
    run.check_every = divergence_check_steps(device)
    run.divergence = DivergenceCheck(run.ctx)
    run.nonfinite = torch.zeros((), dtype=torch.bool, device=device)
    run.noise = EpochNoise(device)
    if not run.ctx.is_main:  # rank 0 carries the world's partial noise sums, as it does the loss
        pos.noise_sums = [0.0, 0.0, 0.0]
    run.noise.sums = torch.tensor(pos.noise_sums, dtype=torch.float32, device=device)
    run.noise.smoothed = tuple(pos.noise_smoothed) if pos.noise_smoothed is not None else None
    run.params = [p for p in run.model.parameters() if p.requires_grad]
    run.compiler = _compile_policy(run.cfg, run.train_model, device, run.ctx, run.precision, run.layout)
    stop = run.cfg.engine.stop_after_epochs
    run.end_epoch = min(stop, run.timeline.total_epochs) if stop else run.timeline.total_epochs
    run.shapes = [compilation.shape_key(p.resolution, max(1, p.batch_size // run.ctx.world))
                  for p in run.timeline.phases if p.first_epoch < run.end_epoch]
    run.started = time.perf_counter()
    run.board = open_board(run.run_dir, pos.epoch) if run.ctx.is_main else None


def _save_checkpoint(run: _Run) -> None:
    """The epoch's partial loss and noise sums of every rank, held by rank 0 (a resumed rank 0
    brings them back), every rank's comm state, then rank 0's last.pt."""
    pos, ctx, noise = run.pos, run.ctx, run.noise
    total, count, *noise_sums = dist_utils.all_reduce_sum(
        [pos.loss_sum, pos.loss_count, *noise.sums.tolist()], run.device, ctx)
    pos.loss_sum, pos.loss_count = (total, int(count)) if ctx.is_main else (0.0, 0)
    pos.noise_sums = noise_sums if ctx.is_main else [0.0, 0.0, 0.0]
    noise.sums = torch.tensor(pos.noise_sums, device=run.device)
    pos.noise_smoothed = list(noise.smoothed) if noise.smoothed is not None else None
    if run.comm is not None:  # every rank's own error feedback, before rank 0's last.pt
        checkpoint.save_rank_state(run.ckpt_dir, ctx.rank, ctx.world, pos.global_step,
                                   {"comm": comm_state.comm_state_dict(run.comm)})
    if ctx.is_main:
        checkpoint.save(run.ckpt_dir, {
            "model": run.model.state_dict(), "optimizer": run.optimizer.state_dict(),
            "scaler": run.precision.scaler.state_dict(), "rng": checkpoint.rng_state(),
            "position": asdict(pos), "config": config_to_dict(run.cfg)})


def _train_epoch(run: _Run, phase, max_steps: int | None) -> tuple[RunStatus, str, _EpochSums]:
    """The epoch's steps from the current position; the status says how the epoch ended."""
    cfg, pos = run.cfg, run.pos
    sums = _EpochSums(loss=torch.zeros((), device=run.device),  # since the last read
                      skipped=torch.zeros((), dtype=torch.int64, device=run.device),  # fp16 steps skipped
                      started=time.perf_counter())
    batches = run.data.train_batches(pos.epoch, phase.resolution, phase.batch_size, pos.step)
    if pos.step:  # the last step's LR, should a run resumed after the epoch's last step train none
        sums.lr = learning_rate(run.timeline.progress(pos.epoch, pos.step - 1), phase.batch_size, cfg)
    while True:
        wait_from = time.perf_counter()
        batch = next(batches, None)  # in the run's memory format (data.memory_format)
        sums.wait_s += time.perf_counter() - wait_from
        if batch is None:
            break
        x, y = batch
        # LR from progress in epochs, continuous across phases; scaled for the batch size
        sums.lr = learning_rate(run.timeline.progress(pos.epoch, pos.step), phase.batch_size, cfg)
        for group in run.optimizer.param_groups:
            group["lr"] = sums.lr
        compiles = not _measures_noise(cfg, pos, y) and run.compiler.compiles(tuple(x.shape))
        with (stop_signals.leaving_at_once(f"while compiling for epoch {pos.epoch + 1}, step {pos.step + 1}")
              if compiles else nullcontext()):
            loss = _step(run, phase, x, y, sums)
        if compiles:
            run.compiler.compiled(tuple(x.shape))
        if loss is None:
            return RunStatus.DIVERGED, _diverged_text(run, sums.lr, step=True), sums
        pos.loss_count += len(y)
        sums.samples += len(y) * run.ctx.world
        pos.step += 1
        pos.global_step += 1
        if cfg.log_every_steps and pos.global_step % cfg.log_every_steps == 0 and run.ctx.is_main:
            log.info("step %d loss %.4f lr %.4g", pos.global_step, loss.item(), sums.lr)
        signalled = run.divergence.stop_signal
        if signalled or (cfg.checkpoint.every_steps and pos.global_step % cfg.checkpoint.every_steps == 0):
            pos.loss_sum, sums.loss = pos.loss_sum + sums.loss.item(), sums.loss.zero_()
            pos.skipped, sums.skipped = pos.skipped + int(sums.skipped.item()), sums.skipped.zero_()
            _save_checkpoint(run)
        if signalled:
            raise stop_signals.Signalled(signalled, f"at epoch {pos.epoch + 1}, step {pos.step}")
        if max_steps is not None and pos.global_step >= max_steps:
            return RunStatus.STOPPED, "", sums
    if run.divergence.check(run.nonfinite, None) is not None:  # the steps since the last read
        return RunStatus.DIVERGED, _diverged_text(run, sums.lr, step=False), sums
    pos.loss_sum += sums.loss.item()
    pos.skipped += int(sums.skipped.item())
    return RunStatus.COMPLETED, "", sums


def _step(run: _Run, phase, x: torch.Tensor, y: torch.Tensor, sums: _EpochSums) -> torch.Tensor | None:
    """Forward, backward and the optimizer step of one batch; None when the loss diverged."""
    cfg, pos, precision, compiler = run.cfg, run.pos, run.precision, run.compiler
    if compiler.timing:
        compiler.timer.sync()
        step_from = time.perf_counter()
    run.optimizer.zero_grad(set_to_none=True)
    # every noise_scale_every steps: the gradient noise scale, from the batch in halves
    chunks = min(cfg.accumulate_steps, len(y))
    split = cfg.memory_split  # parts of each micro-batch, for this device's memory alone
    groups = run.bn_groups if split > 1 else 0
    measure = _measures_noise(cfg, pos, y)
    backward_done = measure or chunks * split > 1
    if measure:
        loss = measured_backward(run.train_model, run.loss_fn, x, y, precision, run.params, run.noise, run.ctx.world,
                                 chunks=chunks, split=split, groups=groups)
    elif chunks * split > 1:
        loss = accumulated_backward(compiler.model, run.loss_fn, x, y, precision, chunks, split, groups)
    else:
        with precision.autocast():
            loss = run.loss_fn(compiler.model(x), y)
    # divergence: flagged on the device every step, read (and agreed by every rank) every
    # `check_every` steps and before anything is saved, so all ranks stop together
    run.nonfinite |= ~torch.isfinite(loss.detach())
    checks = pos.step % run.check_every == 0 or _saves_now(cfg, pos)
    if checks and run.divergence.check(run.nonfinite, loss) is not None:
        return None
    sums.loss += loss.detach().float() * len(y)
    if not backward_done:
        precision.scaler.scale(loss).backward()  # loss scaling: fp16 only, else a no-op
    if cfg.optimizer.grad_clip_norm is not None:
        precision.scaler.unscale_(run.optimizer)
        nn.utils.clip_grad_norm_(run.model.parameters(), cfg.optimizer.grad_clip_norm)
    scaling = precision.scaler.is_enabled()
    # the scale as a device tensor: get_scale() would wait for the GPU every step
    scale_before = precision.scaler._get_scale_async().clone() if scaling else None
    precision.scaler.step(run.optimizer)  # skips the step if fp16 gradients overflowed
    precision.scaler.update()
    if scaling:  # the scale shrinks exactly when the step was skipped
        sums.skipped += precision.scaler._get_scale_async() < scale_before
    if compiler.timing:  # engine.compile auto: timing steps, then deciding once
        compiler.timer.sync()
        compiler.step_done(time.perf_counter() - step_from, timed=not measure,
                           steps_left=run.timeline.steps_until(run.end_epoch) - pos.global_step - 1,
                           shapes_left=run.shapes[phase.index:])
    return loss


def _measures_noise(cfg: RunConfig, pos: _Position, y: torch.Tensor) -> bool:
    """Whether this step measures the gradient noise scale (from the batch in halves, eagerly)."""
    return bool(cfg.noise_scale_every) and pos.step % cfg.noise_scale_every == 0 and len(y) >= 2


def _diverged_text(run: _Run, lr: float, *, step: bool) -> str:
    where = run.divergence.last
    if step:
        return (f"loss became {where} by epoch {run.pos.epoch + 1}, step {run.pos.step} (lr {lr:.4g}); "
                "stopped instead of training on garbage")
    return f"loss became {where} in epoch {run.pos.epoch + 1} (lr {lr:.4g}); stopped instead of training on garbage"


def _end_epoch(run: _Run, phase, sums: _EpochSums) -> EpochMetrics:
    """Evaluate, record the epoch's metrics (run dir, TensorBoard, log), checkpoint."""
    cfg, pos, ctx, device = run.cfg, run.pos, run.ctx, run.device
    if device.type == "cuda":
        torch.cuda.synchronize()
    train_s = time.perf_counter() - sums.started
    eval_from = time.perf_counter()
    # every rank evaluates its shard with rank 0's statistics: the model the checkpoint holds,
    # so a run resumed from a checkpoint after the epoch's last step evaluates as the uncut one
    dist_utils.broadcast_buffers(run.model, ctx)
    try:
        val_loss, top1, top5 = evaluate(run.model, run.data, phase.resolution, run.precision, device, ctx,
                                        stop=lambda batch: _agreed_stop_signal(run, batch))
    except _EvaluationCut as cut:  # the epoch is trained: saved so, the restarted run evaluates it
        run.model.train()
        _save_checkpoint(run)
        raise stop_signals.Signalled(cut.signum, f"while evaluating epoch {pos.epoch + 1}") from None
    eval_s = time.perf_counter() - eval_from
    loss_sum, loss_count, *terms = dist_utils.all_reduce_sum(
        [pos.loss_sum, pos.loss_count, *run.noise.sums.tolist()], device, ctx)
    noise_scale = run.noise.value(terms)
    run.noise.reset()
    metrics = EpochMetrics(
        epoch=pos.epoch + 1, phase=phase.index, resolution=phase.resolution,
        batch_size=phase.batch_size, lr=sums.lr, train_loss=loss_sum / max(loss_count, 1),
        val_loss=val_loss, val_top1=top1, val_top5=top5,
        samples_per_s=sums.samples / max(train_s, 1e-9),
        data_wait_fraction=sums.wait_s / max(train_s, 1e-9), skipped_steps=pos.skipped,
        elapsed_s=time.perf_counter() - run.started, noise_scale=noise_scale, train_s=train_s, eval_s=eval_s,
        startup_s=run.startup_s, world=ctx.world)
    run.startup_s = None  # once per process
    run.history.append(metrics)
    pos.history.append(asdict(metrics))
    pos.epoch, pos.step, pos.loss_sum, pos.loss_count = pos.epoch + 1, 0, 0.0, 0
    if ctx.is_main:
        # rewritten whole from the checkpointed history, so a resume never duplicates lines
        lines = "".join(json.dumps(h) + "\n" for h in pos.history)
        (run.run_dir / "metrics.jsonl").write_text(lines)
        if run.board is not None:
            run.board.write(metrics)
        log.info("epoch %d/%d  res %d  batch %d  lr %.4g  loss %.4f  val top-1 %.2f%%  "
                 "top-5 %.2f%%  %.0f img/s  data wait %.1f%%  noise scale %s", metrics.epoch,
                 run.timeline.total_epochs, phase.resolution, phase.batch_size, sums.lr,
                 metrics.train_loss, top1, top5, metrics.samples_per_s,
                 100 * metrics.data_wait_fraction, "-" if noise_scale is None else f"{noise_scale:.0f}")
    if run.comm is not None:
        # the busiest rank's: ranks can send different amounts (PowerSGD across nodes splits the
        # matrices unevenly) and a synchronous step waits for the slowest
        steps = max(pos.global_step, 1)
        inter, intra = dist_utils.all_reduce_max(
            [run.comm.bytes.inter_payload / steps, run.comm.bytes.intra_payload / steps], device, ctx)
        if ctx.is_main:
            log.info("comm per step, busiest rank: %.0f B inter-node, %.0f B intra-node (payload)", inter, intra)
    if cfg.checkpoint.every_epochs and (pos.epoch % cfg.checkpoint.every_epochs == 0
                                        or pos.epoch in (run.end_epoch, run.timeline.total_epochs)):
        _save_checkpoint(run)
    return metrics


def _finish(run: _Run, status: RunStatus, message: str) -> RunResult:
    """The run's result, and result.json beside its metrics."""
    result = RunResult(status, run.history, run.run_dir, run.precision.mode, message)
    if run.ctx.is_main:
        summary = {"status": status.value, "message": message, "precision": run.precision.mode,
                   "epochs_completed": len(run.history),
                   "final": asdict(run.history[-1]) if run.history else None}
        (run.run_dir / "result.json").write_text(json.dumps(summary, indent=2))
        if status == RunStatus.DIVERGED:
            log.warning("diverged: %s", message)
    return result
