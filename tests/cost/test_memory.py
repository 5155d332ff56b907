"""What fits in one GPU's memory, against published per-GPU batches, and the search's use of it:
infeasible recipes are refused at load in one line, and a cluster no recipe fits is exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from tests.conftest import make_config
from tianfeng.cli import main
from tianfeng.core.errors import ConfigError
from tianfeng.core.run_config import ModelConfig
from tianfeng.cost.cluster import ClusterSpec
from tianfeng.cost.memory import activation_bytes, per_gpu_fit
from tianfeng.cost.step_time import step_cost
from tianfeng.cost.walltime import check_memory
from tianfeng.hpo.space.read import load_space

RN50 = ModelConfig(name="resnet50")


def test_resnet50_fits_nvidias_published_batch_on_a_16gb_v100_and_not_twice_it() -> None:
    """NVIDIA DeepLearningExamples train ResNet-50 v1.5 at 256 images per V100 16 GB with AMP."""
    params = step_cost(RN50, 224).params
    fit = per_gpu_fit(RN50, 224, mixed=True, optimizer="sgd", memory_gib=16, params=params)
    assert 256 <= fit.max_per_gpu < 512
    fp32 = per_gpu_fit(RN50, 224, mixed=False, optimizer="sgd", memory_gib=16, params=params)
    assert fp32.max_per_gpu == pytest.approx(fit.max_per_gpu / 2, abs=2)  # activations in 32 bits
    assert per_gpu_fit(RN50, 224, mixed=True, optimizer="sgd", memory_gib=80, params=params).max_per_gpu > 1024


def test_activation_bytes_are_per_image_grow_with_pixels_and_leave_the_random_stream_alone() -> None:
    small = ModelConfig(name="resnet_small", width=8, depth=1, stages=2)
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    at_16 = activation_bytes(small, 16, 3, 10)
    assert torch.equal(before, torch.random.get_rng_state())
    at_32 = activation_bytes(small, 32, 3, 10)
    assert 3.5 < at_32 / at_16 < 4.5  # 4x the pixels: about 4x the saved activations
    # the stem's first conv alone saves its 3-channel input: at least that much per image
    assert at_16 >= 3 * 16 * 16 * 4


def test_a_run_too_big_for_the_gpu_is_one_line_naming_the_phase_and_the_limit(tmp_path) -> None:
    cfg = make_config(tmp_path, model={"name": "resnet50"}, precision={"mode": "bf16"},
                      phases=[{"epochs": 1, "resolution": 224, "batch_size": 4096}])
    check_memory(cfg, ClusterSpec(gpus=16, gpus_per_node=8), in_channels=3, classes=1000)  # 256 per GPU
    with pytest.raises(ConfigError) as info:
        check_memory(cfg, ClusterSpec(gpus=8, gpus_per_node=8), in_channels=3, classes=1000)  # 512 per GPU
    text = str(info.value)
    assert "phases.0.batch_size" in text and "512 images per GPU" in text and "at most" in text
    assert "\n" not in text
    # more memory: it fits
    check_memory(cfg, ClusterSpec(gpus=8, gpus_per_node=8, memory_gib=32), in_channels=3, classes=1000)


def test_the_shipped_space_samples_per_gpu_batches_the_cluster_allows() -> None:
    space = load_space("large_batch")
    per_gpu = next(p for p in space.parameters if p.name == "per_gpu_batch")
    assert per_gpu.low == 16 and per_gpu.high == space.constants["train_images"] // 3 // 8
    assert all(p.params["per_gpu_batch"] == 32 for p in space.priors)  # Goyal et al.'s 32 per GPU


def test_a_cluster_no_recipe_fits_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["search", "--space", "large_batch", "--gpus", "128", "--trials", "1"]) == 2
    err = capsys.readouterr().err
    assert "parameters.per_gpu_batch.high" in err and "min_per_gpu = 16" in err and "gpus 128" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "tianfeng.db").exists()


def test_a_batch_beyond_the_memory_trains_in_micro_batches_and_one_image_too_many_is_refused(tmp_path) -> None:
    """Gradient accumulation as the priced answer to a per-GPU batch the GPU cannot hold: the
    target and the proxy train it in the same number of micro-batches, each of which fits."""
    from tianfeng.cost.memory import accumulation_needed
    from tianfeng.hpo.space.materialize import build_config

    raw = yaml.safe_load(Path(load_space("large_batch").path).read_text())
    raw["cluster"] = {"gpus": 8, "gpus_per_node": 8, "device": "v100", "memory_gib": 2.0}
    raw["parameters"]["per_gpu_batch"] = {"type": "int", "low": 16, "high": 4000, "log": True}
    raw["base"]["data"] = {"source": "synthetic", "synthetic_images": 40_000}
    raw["base"]["model"] = {"name": "resnet_small", "width": 64, "depth": 2, "stages": 3}
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(raw))
    space = load_space(path)  # the largest corner fits in micro-batches: no refusal
    values = {**space.priors[0].params, "per_gpu_batch": 4000}
    target, proxy = build_config(space, values, "target"), build_config(space, values, "proxy")
    k = target.accumulate_steps
    assert k > 1 and proxy.accumulate_steps == k
    assert accumulation_needed(target, 8, 2.0, in_channels=3, classes=10) == k
    check_memory(target, space.cluster, in_channels=3, classes=10)  # each micro-batch fits
    small = build_config(space, {**values, "per_gpu_batch": 16}, "target")
    assert small.accumulate_steps == 1
    raw["cluster"]["memory_gib"] = 1.0  # less than the reserve: not one image fits
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError) as info:
        load_space(path)
    assert "batch_size" in str(info.value) and "GiB GPU holds at most 0" in str(info.value)


@pytest.mark.parametrize(("cluster", "expected"), [
    ({"loader": "pil"}, "cluster.loader: must be one of dali, cache, torch"),
    ({"memory_gib": 0}, "cluster.memory_gib: must be a number > 0"),
    ({"cpu_cores_per_gpu": -1}, "cluster.cpu_cores_per_gpu: must be a number > 0"),
    ({"min_per_gpu_batch": 0}, "cluster.min_per_gpu_batch: must be an integer >= 1"),
])
def test_bad_cluster_memory_and_data_keys(tmp_path, cluster: dict, expected: str) -> None:
    raw = yaml.safe_load(Path(load_space("large_batch").path).read_text())
    raw["cluster"] = {**raw["cluster"], **cluster}
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError) as info:
        load_space(path)
    assert expected in str(info.value)


def _memory_for(images: int, cfg) -> float:
    """The GiB with which exactly `images` of cfg's first phase fit one device (the memory model's
    own sums, turned around)."""
    from tianfeng.cost.memory import GIB, RESERVED_GIB, USABLE_SHARE

    p = cfg.phases[0]
    fit = per_gpu_fit(cfg.model, p.resolution, mixed=False, optimizer=cfg.optimizer.name, memory_gib=1.0,
                      params=step_cost(cfg.model, p.resolution, 1, 10).params, in_channels=1, classes=10)
    return ((fit.state_bytes + (images + 0.5) * fit.image_bytes) / GIB + RESERVED_GIB) / USABLE_SHARE


def test_a_trials_micro_batches_split_into_whole_emulated_gpus_to_fit_the_device_that_trains_it(tmp_path) -> None:
    """By hand: a batch of 256 over 8 emulated GPUs in 2 micro-batches is 128 images a micro-batch,
    16 per GPU. A device holding 70 needs the micro-batch in parts of whole GPUs: 2 parts of 64 fit
    (not 3: it does not divide 8 GPUs); one holding 16 needs 8 parts; one holding 15 cannot take a
    GPU's 16 and is refused in one line that says so. Bug caught: parts that split a GPU's images,
    or a count that does not divide the GPUs."""
    from tianfeng.cost.memory import memory_split_needed

    cfg = make_config(tmp_path, phases=[{"epochs": 1, "resolution": 8, "batch_size": 256}], accumulate_steps=2,
                      distributed={"emulate_gpus": 8})

    def parts(images: int) -> int:
        return memory_split_needed(cfg, _memory_for(images, cfg), in_channels=1, classes=10)

    assert parts(128) == 1 and parts(127) == 2 and parts(70) == 2 and parts(63) == 4 and parts(16) == 8
    with pytest.raises(ConfigError, match=r"phases.0.batch_size: one emulated GPU's micro-batch \(16 images at 8 px\) "
                                          r"does not fit .* it holds 15\): raise accumulate_steps"):
        parts(15)
    # two DDP ranks: each trains half the micro-batch, 4 of the 8 GPUs (Bug caught: the split
    # sized for the whole batch, or for all 8 emulated GPUs on each rank)
    def ranked(images: int) -> int:
        return memory_split_needed(cfg, _memory_for(images, cfg), in_channels=1, classes=10, world=2)

    assert ranked(64) == 1 and ranked(63) == 2 and ranked(16) == 4
    with pytest.raises(ConfigError, match=r"one emulated GPU's micro-batch \(16 images"):
        ranked(15)
