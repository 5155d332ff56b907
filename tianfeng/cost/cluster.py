"""The `cluster:` section of a search space: the machine the full-fidelity run is meant for,
whose predicted wall time the search weighs against accuracy."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from tianfeng.core.cores import usable_cores
from tianfeng.core.errors import ConfigError
from tianfeng.core.yaml_input import MAX_BYTES
from tianfeng.cost.exchange import BACKWARD_SHARE, DEFAULT_PRESET, PRESETS, VARIANTS, Cluster, Link
from tianfeng.cost.step_time import DEVICES, STACKS

KEYS = ("gpus", "gpus_per_node", "device", "throughput", "images_per_s", "half_batch", "exchange", "overlap",
        "intra_gbps", "inter_gbps", "intra_latency_us", "inter_latency_us", "adapters_per_node",
        "train_images", "memory_gib", "cpu_cores_per_gpu", "loader", "min_per_gpu_batch", "stack",
        "in_network_reduction", "hw_decoder_load")
LOADERS = ("dali", "cache", "torch")
# Half the smallest per-GPU batch among the published GPU records (Goyal et al. 2017: 32 per
# GPU), above the range where BatchNorm over a GPU's own images loses accuracy fast (Wu & He,
# Group Normalization, 2018: ResNet-50 error 23.6% at 32 images per GPU, 34.7% at 2).
MIN_PER_GPU_BATCH = 16
DALI_HW_DECODER_LOAD = 0.65  # fn.decoders.image's default share (what tianfeng's DALI loader runs)


@dataclass(frozen=True)
class ClusterSpec:
    gpus: int = 8
    gpus_per_node: int = 8
    device: str = "v100"  # a row of throughput.DEVICES (and its link preset), or measured
    throughput: str | None = None  # with device measured: the file `calibrate --throughput` wrote
    images_per_s: float | None = None  # the searched model's per-GPU training throughput at the
    # target's last resolution, 256 images per GPU; None: from the device's ResNet-50 figures
    half_batch: float | None = None  # per-GPU batch at half the peak; None: the device's
    exchange: str = "flat"  # a tianfeng.cost.exchange variant
    overlap: float = BACKWARD_SHARE  # share of the compute an exchange can hide behind
    intra_gbps: float | None = None
    inter_gbps: float | None = None
    intra_latency_us: float | None = None
    inter_latency_us: float | None = None
    adapters_per_node: int | None = None
    train_images: int | None = None  # the full run's training set; None: the space's data
    memory_gib: float | None = None  # one GPU's memory; None: the device's (no limit for measured)
    cpu_cores_per_gpu: float | None = None  # data loader cores per GPU; None: the device's node
    loader: str = "dali"  # the full run's data pipeline: dali (GPU decode), cache (pre-decoded), torch
    min_per_gpu_batch: int = MIN_PER_GPU_BATCH  # what the shipped spaces sample from (min_per_gpu)
    stack: str = "pytorch"  # the software the full run trains with: a key of step_time.STACKS
    in_network_reduction: bool = False  # the network's switches sum gradients (InfiniBand SHARP)
    hw_decoder_load: float | None = None  # with loader dali: the share of JPEG decoding the GPU's
    # hardware decoder takes; None: DALI's default where the device has one (A100, H100), else 0

    @property
    def device_memory_gib(self) -> float | None:
        if self.memory_gib is not None:
            return self.memory_gib
        return DEVICES[self.device].memory_gib if self.device in DEVICES else None

    @property
    def decoder_load(self) -> float:
        """What DALI gives the hardware JPEG decoder: the key, else DALI's default where the
        device has a decoder (a measured device is assumed to, as DALI would use it)."""
        if self.hw_decoder_load is not None:
            return self.hw_decoder_load
        has = DEVICES[self.device].jpeg_decoder if self.device in DEVICES else True
        return DALI_HW_DECODER_LOAD if has else 0.0

    @property
    def loader_cores(self) -> float:
        if self.cpu_cores_per_gpu is not None:
            return self.cpu_cores_per_gpu
        if self.device in DEVICES:
            return DEVICES[self.device].cpu_cores_per_gpu
        return max(1.0, usable_cores() / self.gpus)  # measured: the cores this process may use

    @property
    def nodes(self) -> int:
        return self.gpus // self.gpus_per_node

    def _measured_links(self) -> tuple[Link | None, Link | None, str | None]:
        """The profile's (inside a node, between nodes, backend), None where it measured none."""
        if not self.throughput:
            return None, None, None
        data = read_throughput(self.throughput)
        links = data.get("links")
        if not links:
            return None, None, data.get("backend")
        if "gbit_s" in links:  # a profile of one node of gloo processes, as first written
            one = Link(links["gbit_s"], links["latency_us"])
            return one, None, "gloo"
        intra, inter = (Link(t["gbit_s"], t["latency_us"]) if t else None for t in (links.get("intra"),
                                                                                    links.get("inter")))
        return intra, inter, data.get("backend")

    def links(self) -> Cluster:
        return self._links()[0]

    def _links(self) -> tuple[Cluster, dict[str, str]]:
        """The links and where each tier's figures come from (measured, a cluster key, a table)."""
        preset_name = self.device if self.device in PRESETS else DEFAULT_PRESET
        preset = PRESETS[preset_name]
        intra_default, inter_default, adapters = preset.intra, preset.inter, preset.adapters_per_node
        table = f"{preset_name} table"
        sources = {"intra": table, "inter": table}
        measured_intra, measured_inter, backend = self._measured_links()
        if backend == "gloo" and (measured_intra is None) != (measured_inter is None):
            # processes on one machine: emulated nodes share its loopback, so one tier stands for both
            measured_intra = measured_inter = measured_intra or measured_inter
        if measured_intra is not None:
            intra_default, sources["intra"] = measured_intra, "measured"
        if measured_inter is not None:  # every flow leaving the node was in it: the node's network
            inter_default, adapters, sources["inter"] = measured_inter, 1, "measured"
        for tier, gbps, latency in (("intra", self.intra_gbps, self.intra_latency_us),
                                    ("inter", self.inter_gbps, self.inter_latency_us)):
            if gbps is not None or latency is not None:
                sources[tier] = f"cluster.{tier}_gbps/latency_us"
        intra = Link(self.intra_gbps or intra_default.gbit_s,
                     intra_default.latency_us if self.intra_latency_us is None else self.intra_latency_us)
        inter = Link(self.inter_gbps or inter_default.gbit_s,
                     inter_default.latency_us if self.inter_latency_us is None else self.inter_latency_us)
        if self.adapters_per_node:
            adapters = self.adapters_per_node
        return Cluster(self.gpus, self.gpus_per_node, intra, inter, adapters,
                       in_network_reduction=self.in_network_reduction), sources

    def figure_sources(self) -> dict[str, str]:
        """Where the prediction's figures come from: the step curve, the links inside a node and
        those between nodes, each `measured`, a cluster key, or a table."""
        if self.device == "measured":
            step = "measured"
        elif self.images_per_s is not None:
            step = "cluster.images_per_s"
        else:
            step = f"{self.device} table ({self.stack})"
        links = self._links()[1]
        return {"step curve": step, "links in a node": links["intra"], "links between nodes": links["inter"]}

    def describe(self) -> str:
        what = f"{self.device.upper()}" if self.device != "measured" else f"measured ({self.throughput})"
        memory = f" {self.device_memory_gib:g} GiB" if self.device_memory_gib is not None else ""
        figures = ", ".join(f"{k} {v}" for k, v in self.figure_sources().items())
        return (f"{self.gpus} x {what}{memory} ({self.nodes} node(s) of {self.gpus_per_node}), {self.exchange} "
                f"exchange, {self.loader} data on {self.loader_cores:g} cores per GPU; figures: {figures}")


DEFAULT = ClusterSpec()


def read_cluster(source: str, raw: Any) -> ClusterSpec:
    """Check a `cluster:` mapping; every bad value is one error naming the key and what it allows."""
    if raw is None:
        return DEFAULT
    if not isinstance(raw, dict):
        raise ConfigError(source, "cluster", f"must be a mapping with keys {', '.join(KEYS)}")
    unknown = sorted(set(map(str, raw)) - set(KEYS))
    if unknown:
        raise ConfigError(source, f"cluster.{unknown[0]}", f"unknown key; allowed: {', '.join(KEYS)}")
    return checked(replace(DEFAULT, **{str(k): v for k, v in raw.items()}), source)


def checked(spec: ClusterSpec, source: str, prefix: str = "cluster.") -> ClusterSpec:
    """The spec with its values checked (command-line overrides go through here too)."""

    def fail(key: str, message: str) -> ConfigError:
        return ConfigError(source, f"{prefix}{key}", message)

    def integer(key: str, low: int) -> None:
        value = getattr(spec, key)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise fail(key, f"must be an integer >= {low}; got {value!r}")

    def number(key: str, *, low: float = 0.0, high: float | None = None, strict: bool = True,
               optional: bool = True) -> None:
        value = getattr(spec, key)
        if value is None and optional:
            return
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and (
            value > low if strict else value >= low) and (high is None or value <= high)
        if not ok:
            rule = f"{'>' if strict else '>='} {low:g}" + (f" and <= {high:g}" if high is not None else "")
            raise fail(key, f"must be a number {rule}; got {value!r}")

    integer("gpus", 1)
    integer("gpus_per_node", 1)
    if spec.gpus % spec.gpus_per_node and spec.gpus > spec.gpus_per_node:
        raise fail("gpus", f"must be a multiple of gpus_per_node ({spec.gpus_per_node}); got {spec.gpus}")
    if spec.device not in (*DEVICES, "measured"):
        raise fail("device", f"must be one of {', '.join(DEVICES)}, measured; got {spec.device!r}")
    if (spec.device == "measured") != (spec.throughput is not None):
        raise fail("throughput", "goes with device: measured (a file tianfeng calibrate --throughput wrote), "
                                 "and device: measured needs it")
    if spec.throughput is not None:
        read_throughput(spec.throughput, source, f"{prefix}throughput")
    if spec.exchange not in VARIANTS:
        raise fail("exchange", f"must be one of {', '.join(VARIANTS)}; got {spec.exchange!r}")
    number("images_per_s")
    number("half_batch", strict=False)
    number("overlap", high=1.0, strict=False, optional=False)
    for key in ("intra_gbps", "inter_gbps"):
        number(key)
    for key in ("intra_latency_us", "inter_latency_us"):
        number(key, strict=False)
    if spec.adapters_per_node is not None:
        integer("adapters_per_node", 1)
    if spec.train_images is not None:
        integer("train_images", 1)
    number("memory_gib")
    number("cpu_cores_per_gpu")
    if spec.loader not in LOADERS:
        raise fail("loader", f"must be one of {', '.join(LOADERS)}; got {spec.loader!r}")
    integer("min_per_gpu_batch", 1)
    number("hw_decoder_load", high=1.0, strict=False)
    if spec.hw_decoder_load and spec.device in DEVICES and not DEVICES[spec.device].jpeg_decoder:
        raise fail("hw_decoder_load", f"{spec.device} has no hardware JPEG decoder (A100 and H100 do): allowed 0 "
                                      f"or leave it out; got {spec.hw_decoder_load!r}")
    if spec.stack not in STACKS:
        raise fail("stack", f"must be one of {', '.join(STACKS)}; got {spec.stack!r}")
    if not isinstance(spec.in_network_reduction, bool):
        raise fail("in_network_reduction", f"must be true or false; got {spec.in_network_reduction!r}")
    if spec.gpus < spec.gpus_per_node:
        spec = replace(spec, gpus_per_node=spec.gpus)  # fewer GPUs than a node holds: one node
    return spec


def with_overrides(spec: ClusterSpec, *, gpus: int | None, gpus_per_node: int | None,
                   device: str | None = None, profile: str | None = None) -> ClusterSpec:
    """`--gpus N --gpus-per-node G --device D` on the command line replace the space's values;
    `--profile FILE` (a file `tianfeng calibrate` wrote) makes the device `measured` with it."""
    if profile is not None:
        device = "measured"
    changes = {k: v for k, v in (("gpus", gpus), ("gpus_per_node", gpus_per_node), ("device", device),
                                 ("throughput", profile)) if v is not None}
    if not changes:
        return spec
    try:
        return checked(replace(spec, **changes), "command line", prefix="")
    except ConfigError as exc:  # named as the flag that set it
        flag = "profile" if exc.key_path == "throughput" else exc.key_path.replace("_", "-")
        raise ConfigError(f"--{flag}", "", exc.message) from None


# what a measured step can physically take: per image, beyond a minute is a broken measurement;
# per step, beyond an hour
THROUGHPUT_BOUNDS = {"fixed_s": (0.0, 3600.0), "image_s": (0.0, 60.0)}


def read_throughput(path: str, source: str = "", key: str = "cluster.throughput") -> dict:
    """A throughput file of `tianfeng calibrate --throughput`, checked."""
    import json
    from pathlib import Path

    file = Path(path).expanduser()
    try:
        if file.stat().st_size > MAX_BYTES:
            raise ConfigError(source, key, f"{path} is larger than {MAX_BYTES} bytes")
        data = json.loads(file.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(source, key, f"cannot read {path} ({type(exc).__name__}); write it with "
                          "tianfeng calibrate --throughput") from None
    if not isinstance(data, dict) or data.get("kind") != "tianfeng-throughput":
        raise ConfigError(source, key, f"{path} is not a throughput file of tianfeng calibrate --throughput "
                          f"(it holds {type(data).__name__ if not isinstance(data, dict) else 'another kind'})")
    fits = data.get("fits")
    if not isinstance(fits, dict) or not fits:
        raise ConfigError(source, key, f"{path}: fits: must map resolutions to step-time fits; got {fits!r:.80}")
    for resolution, fit in fits.items():
        where = f"{path}: fits.{resolution}"
        if not str(resolution).isdigit() or not isinstance(fit, dict):
            raise ConfigError(source, key, f"{where}: must be a resolution in pixels mapping to fixed_s and image_s")
        for name, (low, high) in THROUGHPUT_BOUNDS.items():
            value = fit.get(name)
            if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value) \
                    or not low <= value <= high or (name == "image_s" and value == 0):
                raise ConfigError(source, key, f"{where}.{name}: must be a number of seconds in "
                                  f"{'(' if name == 'image_s' else '['}{low:g}, {high:g}]; got {value!r}")
    return data
