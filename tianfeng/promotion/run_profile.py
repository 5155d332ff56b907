"""A promoted run's own step times, turned into the figures of a throughput profile
(`tianfeng calibrate --from-run RUN`): the cluster the run trained on measured at the batch and
world it used, so that the next search and plan predict with what that cluster really does.

Each phase's step time is read from its epochs (the median over them: a first epoch's warm-up
does not move it), less its waits for data; the exchange the wall-time model says was left
exposed at that world is taken off, leaving the compute a profile's step curve holds. Where the
run has two or more per-process batches at a resolution its points are the fit; with one, the
curve keeps the shape the profile measured (or, for a new profile, the device table's half-peak
batch) and takes its level from the run."""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections import defaultdict
from typing import Any

from tianfeng.core.errors import ConfigError
from tianfeng.core.run_config import RunConfig, config_to_dict
from tianfeng.cost.cluster import ClusterSpec
from tianfeng.cost.step_time import DEVICES, StepModel
from tianfeng.cost.walltime import predict_wall_time

PREDICTED_STEPS = 64  # steps of the one-phase run whose predicted exchange is read per step


def exposed_exchange_s(cfg: RunConfig, phase_index: int, spec: ClusterSpec, *, in_channels: int,
                       classes: int) -> float:
    """Seconds a step of the phase waits for the gradient exchange and BatchNorm's statistics,
    as the wall-time model predicts them on `spec`."""
    w = _one_phase_prediction(cfg, cfg.phases[phase_index], spec, in_channels=in_channels, classes=classes)
    return (w.parts["exchange"] + w.parts["sync_bn"]) / max(w.steps, 1)


def _one_phase_prediction(cfg: RunConfig, phase, spec: ClusterSpec, *, in_channels: int, classes: int):
    """The wall-time model's prediction of PREDICTED_STEPS steps of one epoch of `phase` alone."""
    one = dataclasses.replace(cfg, phases=(dataclasses.replace(phase, epochs=1),), noise_scale_every=0)
    return predict_wall_time(one, spec, train_images=phase.batch_size * PREDICTED_STEPS, val_images=0,
                             classes=classes, in_channels=in_channels, startup=False)


# each field a timed epoch must hold: (type, lowest, highest)
_EPOCH_FIELDS = {"phase": (int, 0, 10**6), "world": (int, 1, 10**7), "batch_size": (int, 1, 10**9),
                 "resolution": (int, 1, 10**5), "samples_per_s": (float, 1e-9, 1e12),
                 "data_wait_fraction": (float, 0.0, 1.0), "train_s": (float, 1e-9, 1e9)}


def _check_epoch(run_id: int, index: int, epoch: dict) -> None:
    """One line naming the run, the epoch and the field for a value no engine writes."""
    for name, (kind, low, high) in _EPOCH_FIELDS.items():
        value = epoch.get(name)
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or (kind is int and value != int(value)) or not math.isfinite(value) or not low <= value <= high:
            raise ConfigError("--from-run", str(run_id), f"epochs.{index}.{name}: must be "
                              f"{'an integer' if kind is int else 'a number'} in [{low:g}, {high:g}]; got {value!r}")


def run_points(run: dict[str, Any], cfg: RunConfig, cluster: ClusterSpec, *, in_channels: int,
               classes: int) -> list[dict[str, Any]]:
    """One point per phase and world the run trained at: per-process batch, measured step,
    predicted exposed exchange, and the compute left."""
    if run.get("record_error"):
        raise ConfigError("--from-run", str(run["id"]), run["record_error"])
    groups: dict[tuple[int, int], list[dict]] = defaultdict(list)
    for i, e in enumerate(run["epochs"]):
        if e.get("train_s") and e.get("world") and e.get("samples_per_s"):
            _check_epoch(run["id"], i, e)
            groups[(e["phase"], e["world"])].append(e)
    if not groups:
        raise ConfigError("--from-run", str(run["id"]), "has no timed epochs (its epochs were recorded before the "
                          "engine kept their world and time, or it trained none)")
    local = cfg.distributed.local_size
    points = []
    for (phase, world), epochs in sorted(groups.items()):
        batch = epochs[0]["batch_size"]
        step = statistics.median(batch * (1 - e["data_wait_fraction"]) / e["samples_per_s"] for e in epochs)
        per_node = local if local and world % local == 0 else world
        spec = dataclasses.replace(cluster, gpus=world, gpus_per_node=per_node)
        exchange = exposed_exchange_s(cfg, phase, spec, in_channels=in_channels, classes=classes) if world > 1 else 0.0
        points.append({"resolution": epochs[0]["resolution"], "batch": batch // world, "world": world,
                       "nodes": world // per_node, "epochs": len(epochs), "step_s": step, "exchange_s": exchange,
                       "compute_s": max(step - exchange, 0.5 * step), "source": f"run {run['id']}"})
    return points


def refitted(fits: dict[str, dict[str, float]], points: list[dict[str, Any]],
             half_batch: float | None) -> dict[str, dict[str, float]]:
    """The fits with the run's points: a resolution with two or more batches is fitted to them;
    one batch keeps the nearest fit's shape (or `half_batch`'s) at the run's level."""
    from tianfeng.cost.measure import fit

    out = dict(fits)
    by_resolution: dict[int, list[dict]] = defaultdict(list)
    for p in points:
        by_resolution[p["resolution"]].append(p)
    for r, ps in sorted(by_resolution.items()):
        per_batch = {p["batch"]: p["compute_s"] for p in ps}  # the last world's, for an elastic run
        if len(per_batch) >= 2:
            fixed_s, image_s = fit(sorted(per_batch.items()))
        else:
            (b, seconds), = per_batch.items()
            if fits:
                near = fits[str(min((int(k) for k in fits), key=lambda m: (abs(m - r), m)))]
                shape = StepModel(near["fixed_s"], near["image_s"])
            else:
                shape = StepModel(half_batch, 1.0)  # step = (half + b) x image_s
            level = seconds / shape.step_s(b)
            fixed_s, image_s = shape.fixed_s * level, shape.image_s * level
        out[str(r)] = {"fixed_s": fixed_s, "image_s": image_s}
    return out


def refined_profile(profile: dict[str, Any] | None, run: dict[str, Any], cfg: RunConfig, cluster: ClusterSpec, *,
                    in_channels: int, classes: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The profile refined by the run (or a new one from the run alone, its links left to the
    tables), and the run's points."""
    points = run_points(run, cfg, cluster, in_channels=in_channels, classes=classes)
    model = config_to_dict(cfg)["model"]
    if profile is not None and profile.get("model") != model:
        raise ConfigError("--from-run", str(run["id"]), f"trains model {model}, the profile measured "
                          f"{profile.get('model')}: refine a profile of the same model, or write a new one with -o")
    half = cluster.half_batch if cluster.half_batch is not None else (
        DEVICES[cluster.device].half_batch if cluster.device in DEVICES else None)
    if profile is None and half is None:
        raise ConfigError("--from-run", str(run["id"]), "needs a profile to refine (--profile) when its study's "
                          "cluster is not a device of the tables")
    base = profile or {"kind": "tianfeng-throughput", "host": "", "processes": points[-1]["world"] // points[-1]["nodes"],
                       "nodes": points[-1]["nodes"], "threads": None, "backend": None, "device": None, "links": None,
                       "precision": cfg.precision.mode, "model": model, "in_channels": in_channels, "classes": classes,
                       "fits": {}, "points": []}
    kept = [p for p in base.get("points", []) if p.get("source") != f"run {run['id']}"]  # refining twice: once
    runs = [r for r in base.get("runs", []) if r.get("run") != run["id"]]
    runs.append({"run": run["id"], "study": run["study"], "trial": run["trial_number"], "status": run["status"],
                 "epochs": len(run["epochs"])})
    fits = refitted({k: v for k, v in base["fits"].items()}, points, half)
    return {**base, "fits": fits, "points": kept + points, "runs": runs}, points


def predicted_compute_s(cfg: RunConfig, point: dict[str, Any], spec: ClusterSpec, *, in_channels: int,
                        classes: int) -> float:
    """The compute seconds of one step at the point's resolution, batch and world on `spec`."""
    phase = next(p for p in cfg.phases if p.resolution == point["resolution"])
    world = point["world"]
    spec = dataclasses.replace(spec, gpus=world, gpus_per_node=world // point["nodes"])
    w = _one_phase_prediction(cfg, phase, spec, in_channels=in_channels, classes=classes)
    return w.parts["compute"] / max(w.steps, 1)
