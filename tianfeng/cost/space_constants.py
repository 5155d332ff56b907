"""The constants a search space's bounds and expressions read (`gpus`, `gpus_per_node`,
`min_per_gpu`, `max_per_gpu`, `train_images`), computed in one call: the cluster's sizes, what one
GPU's memory holds of the base run's model, and the training set's size."""

from __future__ import annotations

from tianfeng.core.run_config import RunConfig
from tianfeng.cost.cluster import ClusterSpec
from tianfeng.cost.memory import per_gpu_fit
from tianfeng.cost.step_time import step_cost


def space_constants(base: RunConfig, cluster: ClusterSpec, *, with_data: bool = True) -> dict[str, int]:
    """The constants' values; `with_data` False: the cluster's alone, which open no data (a space
    for a data set that is elsewhere still loads)."""
    if not with_data:
        return cluster_constants(base, cluster)
    return data_constants(base, cluster)


def data_constants(base: RunConfig, cluster: ClusterSpec) -> dict[str, int]:
    """The values of CONSTANTS: the cluster's, and the base run's training images."""
    from tianfeng.trainers.data.sources import open_source

    d = base.data
    source = open_source(d.source, synthetic_images=d.synthetic_images, synthetic_classes=d.synthetic_classes)
    train = len(source.train)
    return {**cluster_constants(base, cluster, source.channels, source.num_classes),
            "train_images": int(train * d.fraction), "all_train_images": train, "channels": source.channels,
            "classes": source.num_classes}


def cluster_constants(base: RunConfig, cluster: ClusterSpec, channels: int = 3, classes: int = 1000) -> dict[str, int]:
    """The cluster's sizes, and the per-GPU batch range: from cluster.min_per_gpu_batch to what
    one GPU's memory holds of the base run's model at its largest resolution, precision and
    optimizer (tianfeng.cost.memory; unbounded on a measured cluster, whose memory is not modelled)."""
    memory = cluster.device_memory_gib
    most = 2**31 - 1
    if memory is not None:
        resolution = max(p.resolution for p in base.phases)
        most = per_gpu_fit(base.model, resolution, mixed=base.precision.mode != "fp32", optimizer=base.optimizer.name,
                           memory_gib=memory, params=step_cost(base.model, resolution, channels, classes).params,
                           in_channels=channels, classes=classes).max_per_gpu
    return {"gpus": cluster.gpus, "gpus_per_node": cluster.gpus_per_node, "min_per_gpu": cluster.min_per_gpu_batch,
            "max_per_gpu": most}
