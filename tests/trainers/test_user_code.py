"""The user's own model builder and data set, named package.module:function: one epoch of
training with each, a 2-trial search on a user data set, and the errors when the name is wrong."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from tests.conftest import make_config
from tests.search.conftest import TINY_SPACE, write_space
from tianfeng.core.errors import ConfigError
from tianfeng.core.run_config import config_from_dict, config_to_dict, load_config
from tianfeng.recipes import DEFAULT_RECIPE
from tianfeng.trainers.engine import train

USER_MODULE = textwrap.dedent('''
    import numpy as np
    from sklearn.datasets import load_digits
    from torch import nn

    def tiny_mlp(num_classes, in_channels):
        """Any model that takes N x C x H x W at any resolution works: pooled to 4 x 4 first."""
        return nn.Sequential(nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(in_channels * 16, 64),
                             nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, num_classes))

    def not_a_model(num_classes, in_channels):
        return "model"

    def nothing():
        return None

    def zero_one_seven():
        """The digits 0, 1 and 7 as classes 0, 1, 2: a data set no built-in source provides."""
        bunch = load_digits()
        keep = np.isin(bunch.target, [0, 1, 7])
        images = np.clip(bunch.images[keep] * 16, 0, 255).astype(np.uint8)
        labels = np.searchsorted([0, 1, 7], bunch.target[keep])
        return images[:440], labels[:440], images[440:], labels[440:]
''')


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch) -> str:
    (tmp_path / "my_project").mkdir()
    (tmp_path / "my_project" / "__init__.py").write_text("")
    (tmp_path / "my_project" / "builders.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "my_project.builders"


def test_one_epoch_with_a_user_model_on_digits(tmp_path: Path, user_module: str) -> None:
    cfg = load_config(DEFAULT_RECIPE, [f"run_dir={tmp_path / 'run'}", f"model.name={user_module}:tiny_mlp",
                                       "phases.0.epochs=1", "precision.mode=fp32"])
    result = train(cfg)
    assert result.status == "completed" and result.final.val_top1 > 50  # 10 classes: chance is 10
    # weight decay and trust ratios skip its BN and bias tensors, as for the built-in models
    from tianfeng.trainers.models import build_model
    from tianfeng.trainers.optim import parameter_groups

    decayed, skipped = parameter_groups(build_model(cfg.model, 1, 10), 1e-4)
    assert len(decayed["params"]) == 2 and len(skipped["params"]) == 4


def test_one_epoch_on_a_user_data_set(tmp_path: Path, user_module: str) -> None:
    cfg = load_config(DEFAULT_RECIPE, [f"run_dir={tmp_path / 'run'}", f"data.source={user_module}:zero_one_seven",
                                       "phases.0.epochs=4", "precision.mode=fp32"])
    result = train(cfg)
    # three classes, 99 validation images: chance is 33, this machine gives 68 after a noisy climb
    assert result.status == "completed" and result.final.val_top1 > 45


def test_a_two_trial_search_on_a_user_data_set(tmp_path: Path, user_module: str) -> None:
    from tests.search.test_study import spec_for, trials_of
    from tianfeng.hpo.running.runner import run_search

    space = yaml.safe_load(yaml.safe_dump(TINY_SPACE))
    space["base"]["data"] = {"source": f"{user_module}:zero_one_seven"}
    plan = spec_for(tmp_path, write_space(tmp_path, space), trials=2)
    run_search(plan, workers=1, resume=False)
    trials = trials_of(plan)
    assert len(trials) == 2 and all(t.state.name == "COMPLETE" for t in trials)
    configs = list((tmp_path / "runs").rglob("config.yaml"))
    assert len(configs) == 2
    assert all(yaml.safe_load(c.read_text())["data"]["source"] == f"{user_module}:zero_one_seven" for c in configs)


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("model.name", "my_project.builders:missing", "my_project.builders has no function missing"),
    ("model.name", "no_such_package.x:f", "cannot import no_such_package.x"),
    ("model.name", "my_project.builders:not_a_model", "returned str, not a torch.nn.Module"),
    ("data.source", "my_project.builders:nothing", "must return an ImageSource or"),
    ("data.source", "my_project.builders:not_a_model", "must accept no arguments"),
    ("model.name", "my_project.builders:zero_one_seven", "must accept num_classes, in_channels"),
])
def test_a_wrong_user_name_is_one_line_naming_the_key(tmp_path: Path, user_module: str, key: str, value: str,
                                                      expected: str) -> None:
    section, field = key.split(".")
    cfg = make_config(tmp_path, **{section: {field: value}})
    with pytest.raises(ConfigError, match=expected) as caught:
        train(cfg)
    assert caught.value.key_path == key


def test_names_that_are_neither_built_in_nor_module_function_are_refused_at_load(tmp_path: Path) -> None:
    raw = config_to_dict(make_config(tmp_path))
    raw["model"]["name"] = "resnet18"
    with pytest.raises(ConfigError, match="model.name: must be resnet_small, resnet50, torchvision:<name>, timm:<name> or package.module:function"):
        config_from_dict(raw, "run.yaml")
    raw["model"]["name"] = "resnet_small"
    raw["data"]["source"] = "os:system; rm"
    with pytest.raises(ConfigError, match="data.source: must be digits, synthetic, imagefolder:DIR or"):
        config_from_dict(raw, "run.yaml")


@pytest.mark.slow
def test_a_module_in_the_working_folder_trains_in_two_workers_and_on_two_gloo_ranks(tmp_path: Path) -> None:
    """The page's steps as a user runs them, with the installed `tianfeng` command (whose own
    folder, not the working one, heads its import path): a builder and a data source in a module
    beside the space, a search with two worker processes, then a promotion on two gloo ranks."""
    import json
    import os
    import subprocess
    import sys

    (tmp_path / "tinyuser.py").write_text(USER_MODULE)
    space = dict(TINY_SPACE)
    space["base"] = {**space["base"], "model": {"name": "tinyuser:tiny_mlp"}, "data": {"source": "tinyuser:zero_one_seven"}}
    space_file = write_space(tmp_path, space)
    command = str(Path(sys.executable).parent / "tianfeng")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TIANFENG_CODE_DIR")}
    storage = f"sqlite:///{tmp_path / 'user.db'}"

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([command, *args, "--storage", storage], capture_output=True, text=True, cwd=tmp_path,
                              env=env, timeout=600)

    searched = run("search", "--space", str(space_file), "--study", "user", "--trials", "2", "--workers", "2",
                   "--pruner", "none", "--objective", "accuracy")
    assert searched.returncode == 0, searched.stderr[-3000:]
    assert "cannot import" not in searched.stderr
    promoted = run("promote", "0", "--study", "user", "--nodes", "1", "--gpus-per-node", "2", "--device", "cpu",
                   "--set", "phases.0.batch_size=64", "--json")
    assert promoted.returncode == 0 and promoted.stdout.strip(), (promoted.stdout, promoted.stderr[-3000:])
    out = json.loads(promoted.stdout)
    assert out["status"] == "completed" and out["full_val_top1"] > 50, out  # three classes: chance is 33
