"""The Ray variant of a launch plan: Ray Train starts the run's N x G ranks as workers of a
TorchTrainer. Ray Train sets torchrun's environment variables (RANK, LOCAL_RANK,
LOCAL_WORLD_SIZE, ...) and the process group before the engine starts, ranks grouped by node,
so the engine runs unchanged. On a cluster the plan submits this through `ray job submit`."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from tianfeng.core.cores import usable_cores
from tianfeng.core.errors import ConfigError
from tianfeng.launch.ray_cluster import start_or_join
from tianfeng.launch.scripts import LaunchPlan

log = logging.getLogger("tianfeng.launch")


def _rank_worker(loop_config: dict[str, Any]) -> None:
    """One rank, inside a Ray Train worker."""
    import ray.train

    from tianfeng.core.run_config import load_config
    from tianfeng.terminal.logs import setup_logging
    from tianfeng.trainers.engine import train

    setup_logging()
    ctx = ray.train.get_context()
    expected = ctx.get_node_rank() * ctx.get_local_world_size() + ctx.get_local_rank()
    if ctx.get_world_rank() != expected:  # the hierarchical hook's node groups need this
        raise RuntimeError(f"Ray Train gave rank {ctx.get_world_rank()} to local rank {ctx.get_local_rank()} "
                           f"of node {ctx.get_node_rank()}: ranks are not contiguous per node")
    cfg = load_config(loop_config["config"], loop_config["overrides"])
    result = train(cfg)
    final = result.final
    ray.train.report({"status": result.status, "run_dir": str(result.run_dir),
                      "val_top1": final.val_top1 if final else None, "epoch": final.epoch if final else 0})


def run_with_ray_train(plan: LaunchPlan, run_dir: Path, address: str | None) -> dict[str, Any]:
    """Run the plan's world as Ray Train workers: on the cluster at `address`, or on a Ray
    started here (address None). Returns the run's result.json (written by rank 0; the run
    directory is shared by the nodes, as for torchrun)."""
    import ray
    from ray.train import FailureConfig, RunConfig, ScalingConfig, TrainingFailedError
    from ray.train.torch import TorchConfig, TorchTrainer

    cuda = plan.device == "cuda"
    # one machine: as many logical CPUs as ranks, like torchrun here
    start_or_join(address, env={"OMP_NUM_THREADS": "1"}, log_to_driver=True,
                  num_cpus=max(plan.world, usable_cores()))
    have = ray.cluster_resources().get("GPU" if cuda else "CPU", 0.0)
    if have < plan.world:
        raise ConfigError("--nodes", "", f"{plan.nodes} x {plan.per_node} ranks need {plan.world} "
                          f"{'GPUs' if cuda else 'CPUs'} but the Ray cluster has {have:g}")
    # workers may start elsewhere: every path they use is absolute
    config_path, run_dir = str(Path(plan.config_path).resolve()), run_dir.resolve()
    overrides = [f"device={plan.device}", f"distributed.local_size={plan.per_node}", f"run_dir={run_dir}"]
    trainer = TorchTrainer(
        _rank_worker,
        train_loop_config={"config": config_path, "overrides": overrides},
        torch_config=TorchConfig(backend="nccl" if cuda else "gloo"),
        scaling_config=ScalingConfig(num_workers=plan.world, use_gpu=cuda,
                                     resources_per_worker={"GPU": 1} if cuda else {"CPU": 1}),
        # a failed worker restarts every rank, which resume from the run's last checkpoint
        run_config=RunConfig(name=f"{plan.run_name}-{plan.nodes}x{plan.per_node}",
                             storage_path=str(run_dir / "ray"),
                             failure_config=FailureConfig(max_failures=plan.max_restarts)),
    )
    log.info("Ray Train: %d workers (%d nodes x %d), backend %s", plan.world, plan.nodes, plan.per_node,
             "nccl" if cuda else "gloo")
    try:
        trainer.fit()
    except TrainingFailedError as exc:  # a rank failed: its checkpoints stay, a relaunch resumes
        raise RuntimeError(f"Ray Train run failed: {str(exc).splitlines()[0]}") from exc
    finally:
        if address is None:
            ray.shutdown()
    return json.loads((run_dir / "result.json").read_text())
