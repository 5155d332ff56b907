"""Config loading: every bad value is one line naming the file, the key path and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tianfeng.core.errors import ConfigError
from tianfeng.core.run_config import RunConfig, config_to_dict, load_config


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return path


def test_defaults_round_trip() -> None:
    raw = config_to_dict(RunConfig())
    from tianfeng.core.run_config import config_from_dict

    assert config_from_dict(raw) == RunConfig()


def test_yaml_and_overrides(tmp_path: Path) -> None:
    path = write(tmp_path, "optimizer: {name: lars, lars: {trust_coefficient: 0.02}}\n"
                           "phases:\n  - {epochs: 3, resolution: 16, batch_size: 128}\n"
                           "  - {epochs: 2, resolution: 24, batch_size: 64}\n")
    cfg = load_config(path, ["optimizer.lr=0.5", "phases.1.batch_size=32", "schedule.step_milestones=[1, 2]"])
    assert cfg.optimizer.name == "lars"
    assert cfg.optimizer.lars.trust_coefficient == 0.02
    assert cfg.optimizer.lr == 0.5
    assert [p.batch_size for p in cfg.phases] == [128, 32]
    assert cfg.schedule.step_milestones == (1.0, 2.0)
    assert cfg.total_epochs == 5


BAD_INPUTS = [
    ("optimizer: {lars: {trust_coefficient: -1}}", "optimizer.lars.trust_coefficient", "must be > 0, got -1"),
    ("optimizer: {name: adamw}", "optimizer.name", "must be one of sgd, lars, lamb; got 'adamw'"),
    ("optimizer: {lr: fast}", "optimizer.lr", "must be a finite number"),
    ("optimizer: {nesterov: 1}", "optimizer.nesterov", "must be true or false"),
    ("optimizr: {lr: 1}", "optimizr", "unknown key; allowed: name, run_dir"),
    ("model: {depth: 0}", "model.depth", "must be >= 1, got 0"),
    ("model: {name: vit}", "model.name", "must be resnet_small, resnet50, torchvision:<name>, timm:<name> or package.module:function"),
    ("data: {fraction: 1.5}", "data.fraction", "must be <= 1, got 1.5"),
    ("data: {source: mnist}", "data.source", "must be digits, synthetic, imagefolder:DIR or package.module:function"),
    ("data: {loader: dali}", "data.loader", "dali reads files"),
    ("data: {loader: fast}", "data.loader", "must be one of auto, cache, dali, torch"),
    ("schedule: {decay: step}", "schedule.step_milestones", "must list epochs when decay is step"),
    ("schedule: {decay: step, step_milestones: [5, 2]}", "schedule.step_milestones", "must be increasing"),
    ("schedule: {warmup_epochs: 50}", "schedule.warmup_epochs", "must be <= the total epochs"),
    ("schedule: {scaling_rule: cubic}", "schedule.scaling_rule", "must be one of linear, sqrt, none"),
    ("schedule: {warmup_shape: sigmoid}", "schedule.warmup_shape", "must be one of linear, exponential"),
    ("phases: []", "phases", "must list at least one"),
    ("phases: [{epochs: 0, resolution: 16, batch_size: 8}]", "phases.0.epochs", "must be >= 1, got 0"),
    ("phases: [{epochs: 1, resolution: 16, batch: 8}]", "phases.0.batch", "unknown key; allowed: epochs, resolution, batch_size"),
    ("phases: {epochs: 1}", "phases", "must be a list"),
    ("precision: {mode: fp8}", "precision.mode", "must be one of auto, fp32, bf16, fp16"),
    ("precision: fp16", "precision", "must be a mapping of keys"),
    ("device: tpu", "device", "must be one of auto, cpu, cuda"),
    ("seed: -3", "seed", "must be >= 0, got -3"),
    ("checkpoint: {every_steps: 2.5}", "checkpoint.every_steps", "must be an integer"),
    ("model: {name: resnet50}\nphases: [{epochs: 1, resolution: 16, batch_size: 8}]", "phases", "resnet50 needs a resolution >= 32"),
    ("- just\n- a list", "(top level)", "must be a mapping of sections"),
    ("distributed: {hook: ring}", "distributed.hook", "must be one of none, hierarchical"),
    ("distributed: {compression: zip}", "distributed.compression", "must be one of none, fp16, bf16, powersgd, topk"),
    ("distributed: {topk_ratio: 0}", "distributed.topk_ratio", "must be > 0"),
    ("distributed: {bucket_mb: huge}", "distributed.bucket_mb", "must be a finite number or must be one of auto; got 'huge'"),
    ("distributed: {bucket_mb: -2}", "distributed.bucket_mb", "must be > 0, got -2"),
]


@pytest.mark.parametrize(("text", "key", "expected"), BAD_INPUTS)
def test_bad_values_name_file_key_and_allowed(tmp_path: Path, text: str, key: str, expected: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: {key}: "), message
    assert expected in message, message


def test_invalid_yaml_names_line(tmp_path: Path) -> None:
    path = write(tmp_path, "model:\n  width: [1,\n")
    with pytest.raises(ConfigError, match=r"run.yaml: line \d+: not valid YAML"):
        load_config(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="nope.yaml: cannot read"):
        load_config(tmp_path / "nope.yaml")


@pytest.mark.parametrize(("override", "expected"), [
    ("optimizer.lr", "--set: optimizer.lr: must look like key.path=value"),
    ("phases.7.epochs=3", "phases.7: must be a list index below 1"),
    ("optimizer.lr=-1", "optimizer.lr: must be > 0, got -1"),
    ("optimizer.lr.x=1", "optimizer.lr: must be a finite number"),
])
def test_bad_overrides(override: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, [override])
    assert expected in str(info.value)
