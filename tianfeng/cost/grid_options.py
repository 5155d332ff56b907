"""The options of `tianfeng plan`, in one typed object: built once (by the command from its flags,
by `tianfeng.plan` from keyword arguments), checked once, passed down unchanged."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from tianfeng.core.errors import ConfigError
from tianfeng.cost.cluster import LOADERS, ClusterSpec
from tianfeng.cost.exchange import BACKWARD_SHARE, PRESETS
from tianfeng.options import flag_name, option, with_changes


@dataclass(frozen=True)
class PlanOptions:
    """The cluster and data set a run config is predicted for; each field is the flag of the same
    name. None takes the preset's figure (links, memory, loader cores) or the device's ResNet-50
    throughput moved to the model by its FLOPs (`gpu_images_per_s`)."""
    gpus: int = option(8, "GPUs of the cluster", required=True)
    gpus_per_node: int = option(8, "GPUs per node")
    preset: str = option("v100", "device and links of a DGX-1 V100, DGX A100 or DGX H100 cluster with InfiniBand; "
                         "the flags below override", choices=tuple(PRESETS))
    classes: int = option(1000, "classes of the model's head")
    gpu_images_per_s: float | None = option(None, "training images/s of one GPU on this model at the last "
                                            "phase's resolution, 256 per GPU (default: the device's ResNet-50 "
                                            "figure moved to the model by its FLOPs)")
    compute_ms: float | None = option(None, "measured compute time of one step of the last phase at --gpus instead")
    train_images: int = option(1_281_167, "training set size (default ImageNet-1k's)", show_default=False)
    val_images: int = option(50_000, "validation set size (default ImageNet-1k's)", show_default=False)
    intra_gbps: float | None = option(None, "one GPU's NVLink bandwidth inside a node, Gbit/s per direction")
    intra_latency_us: float | None = option(None, "latency of a link inside a node (us)")
    inter_gbps: float | None = option(None, "one network adapter between nodes, Gbit/s")
    inter_latency_us: float | None = option(None, "latency of a hop between nodes (us)")
    adapters_per_node: int | None = option(None, "network adapters per node, shared by its GPUs")
    overlap: float = option(BACKWARD_SHARE, "share of a step's compute (its backward pass) that an overlapping "
                            "exchange hides behind")
    loader: str = option("dali", "the data pipeline: dali (GPU decode), cache (pre-decoded), torch (CPU decode)",
                         choices=LOADERS)
    cpu_cores_per_gpu: float | None = option(None, "loader cores per GPU (default: the preset node's cores over "
                                             "its GPUs)")
    memory_gib: float | None = option(None, "one GPU's memory (default: the preset's)")
    profile: str | None = option(None, "a throughput profile `tianfeng calibrate` wrote: its measured step curve and "
                                 "links instead of --preset's tables (and, for the model it measured, its "
                                 "classes and input channels)", metavar="FILE")

    def changed(self, **changes: Any) -> PlanOptions:
        """A copy with `changes`; an unknown name is one line with the closest known one."""
        return with_changes(self, "plan", changes)

    def checked(self) -> PlanOptions:
        """These options, or the first mistake as one line naming the flag and what it allows."""
        def number(value: Any, low: float, strict: bool = True) -> bool:
            return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and (
                value > low if strict else value >= low)

        def integer(value: Any, low: int) -> bool:
            return isinstance(value, int) and not isinstance(value, bool) and value >= low

        optional = [("gpu_images_per_s", 0, True), ("compute_ms", 0, True), ("intra_gbps", 0, True),
                    ("inter_gbps", 0, True), ("intra_latency_us", 0, False), ("inter_latency_us", 0, False),
                    ("cpu_cores_per_gpu", 0, True), ("memory_gib", 0, True)]
        checks = [("gpus", integer(self.gpus, 1), ">= 1"), ("gpus_per_node", integer(self.gpus_per_node, 1), ">= 1"),
                  ("classes", integer(self.classes, 2), ">= 2"), ("train_images", integer(self.train_images, 1), ">= 1"),
                  ("val_images", integer(self.val_images, 0), ">= 0"),
                  ("adapters_per_node", self.adapters_per_node is None or integer(self.adapters_per_node, 1), ">= 1"),
                  *((key, getattr(self, key) is None or number(getattr(self, key), low, strict),
                     f"{'>' if strict else '>='} {low}") for key, low, strict in optional),
                  ("overlap", number(self.overlap, 0, strict=False) and self.overlap <= 1, "between 0 and 1")]
        for key, ok, rule in checks:
            if not ok:
                value = getattr(self, key)
                shown = f"{value:g}" if isinstance(value, float) else repr(value)
                raise ConfigError(_flag(key), "", f"must be {rule}, got {shown}")
        for key, value, allowed in (("preset", self.preset, tuple(PRESETS)), ("loader", self.loader, LOADERS)):
            if value not in allowed:
                raise ConfigError(_flag(key), "", f"must be one of {', '.join(allowed)}; got {value!r}")
        if self.profile is not None:
            from tianfeng.cost.cluster import read_throughput

            read_throughput(self.profile, "--profile", "")
            given = [_flag(k) for k in ("gpu_images_per_s", "compute_ms") if getattr(self, k) is not None]
            if given:
                raise ConfigError(given[0], "", "goes without --profile (the profile's measured step curve "
                                                "is the compute)")
        if self.gpus % self.gpus_per_node and self.gpus > self.gpus_per_node:
            raise ConfigError("--gpus", "", f"must be a multiple of --gpus-per-node ({self.gpus_per_node}); "
                                            f"got {self.gpus}")
        return self

    def cluster(self, images_per_s: float | None) -> ClusterSpec:
        """The cluster these options describe, at `images_per_s` per GPU (None: the device's)."""
        measured = {"device": "measured", "throughput": self.profile} if self.profile else {"device": self.preset}
        return ClusterSpec(gpus=self.gpus, gpus_per_node=self.gpus_per_node, **measured,
                           images_per_s=images_per_s, overlap=self.overlap, intra_gbps=self.intra_gbps,
                           inter_gbps=self.inter_gbps, intra_latency_us=self.intra_latency_us,
                           inter_latency_us=self.inter_latency_us, adapters_per_node=self.adapters_per_node,
                           memory_gib=self.memory_gib, cpu_cores_per_gpu=self.cpu_cores_per_gpu, loader=self.loader)


def _flag(key: str) -> str:
    return flag_name(next(f for f in dataclasses.fields(PlanOptions) if f.name == key))
