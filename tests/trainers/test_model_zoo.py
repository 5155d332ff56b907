"""torchvision and timm models by name: built with random weights, trained by the engine on
digits, per-GPU BatchNorm for timm's BatchNorm-with-activation layers, nothing downloaded."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import timm
import torch
from timm.layers import BatchNormAct2d

from tests.conftest import make_config
from tianfeng.core.errors import ConfigError
from tianfeng.core.run_config import ModelConfig
from tianfeng.trainers import per_gpu_bn
from tianfeng.trainers.engine import train
from tianfeng.trainers.models import build_model

PHASES = [{"epochs": 1, "resolution": 32, "batch_size": 64}]


@pytest.mark.parametrize("name,kwargs", [
    ("torchvision:resnet18", {}),
    ("torchvision:mobilenet_v3_small", {"dropout": 0.1}),
    ("timm:resnet10t", {}),
    ("timm:mobilenetv3_small_050", {"drop_rate": 0.1}),
])
def test_the_engine_trains_a_named_model_on_digits(tmp_path, name, kwargs) -> None:
    cfg = make_config(tmp_path, model={"name": name, "kwargs": kwargs}, phases=PHASES,
                      data={"fraction": 0.3}, distributed={"emulate_gpus": 4})
    result = train(cfg)
    assert result.status == "completed" and len(result.epochs) == 1
    first_loss = result.epochs[0].train_loss
    assert 0 < first_loss < 10
    # the named model is the one trained: the checkpoint holds its parameters, name by name
    saved = torch.load(Path(cfg.run_dir) / "checkpoints" / "last.pt", map_location="cpu", weights_only=False)
    built = build_model(cfg.model, in_channels=1, num_classes=10)
    assert set(saved["model"]) == set(built.state_dict())


def test_digits_one_channel_reaches_the_first_convolution() -> None:
    model = build_model(ModelConfig(name="torchvision:resnet18"), in_channels=1, num_classes=10)
    assert model.conv1.in_channels == 1 and model(torch.randn(2, 1, 32, 32)).shape == (2, 10)
    model = build_model(ModelConfig(name="timm:resnet10t"), in_channels=1, num_classes=10)
    assert model(torch.randn(2, 1, 32, 32)).shape == (2, 10)


@pytest.mark.parametrize("kwargs,key", [({"pretrained": True}, "model.kwargs.pretrained"),
                                        ({"weights": "DEFAULT"}, "model.kwargs.weights")])
def test_pretrained_weights_are_refused_in_one_line(kwargs, key) -> None:
    family = "timm:resnet10t" if "pretrained" in kwargs else "torchvision:resnet18"
    with pytest.raises(ConfigError, match=f"{key}: tianfeng never downloads weights"):
        build_model(ModelConfig(name=family, kwargs=kwargs), 3, 10)


def test_unknown_names_and_arguments_are_one_line_errors() -> None:
    with pytest.raises(ConfigError, match="model.name: torchvision has no classification model 'resnet19'"):
        build_model(ModelConfig(name="torchvision:resnet19"), 3, 10)
    with pytest.raises(ConfigError, match="model.name: timm has no model 'nonet'"):
        build_model(ModelConfig(name="timm:nonet"), 3, 10)
    with pytest.raises(ConfigError, match="model.kwargs: torchvision:resnet18: .*wings"):
        build_model(ModelConfig(name="torchvision:resnet18", kwargs={"wings": 2}), 3, 10)


def test_local_weights_load_and_a_misfit_is_named(tmp_path) -> None:
    source = build_model(ModelConfig(name="timm:resnet10t"), 3, 10)
    torch.save(source.state_dict(), tmp_path / "w.pt")
    loaded = build_model(ModelConfig(name="timm:resnet10t", weights=str(tmp_path / "w.pt")), 3, 10)
    assert all(torch.equal(a, b) for a, b in zip(source.state_dict().values(), loaded.state_dict().values(), strict=True))
    with pytest.raises(ConfigError, match="model.weights: .*w.pt does not fit the model"):
        build_model(ModelConfig(name="timm:resnet10t", weights=str(tmp_path / "w.pt")), 3, 7)
    with pytest.raises(ConfigError, match="model.weights: no such file"):
        build_model(ModelConfig(name="timm:resnet10t", weights=str(tmp_path / "none.pt")), 3, 10)


@pytest.mark.parametrize("images", [12, 13])  # dealt evenly, and with the rest to the last GPU
def test_batchnorm_with_activation_is_grouped_per_gpu_and_keeps_its_activation(images: int) -> None:
    """timm's BatchNormAct2d (BatchNorm then its activation) applied group by group equals the
    layer applied to each GPU's images on its own; the first group's statistics are kept."""
    torch.manual_seed(0)
    layer = BatchNormAct2d(6, act_layer=torch.nn.ReLU).train()
    reference = copy.deepcopy(layer)
    model = per_gpu_bn.convert(torch.nn.Sequential(layer))
    assert per_gpu_bn.set_groups(model, 3) == 1 and isinstance(model[0], BatchNormAct2d)
    x = torch.randn(images, 6, 5, 5)
    shares = [[0, 3, 6, 9], [1, 4, 7, 10], [2, 5, 8, 11, 12][:images - 8]]  # dealt in turn, the rest to the last GPU
    expected, states = torch.empty_like(x), []
    for share in shares:
        copy_of = copy.deepcopy(reference)
        expected[share] = copy_of(x[share])
        states.append(copy_of.running_mean.clone())
    y = model(x)
    assert torch.allclose(y, expected, atol=1e-6) and (y >= 0).all()  # ReLU still applied
    assert torch.allclose(model[0].running_mean, states[0])
    assert timm.create_model("mobilenetv3_small_050", pretrained=False).bn1.__class__ is BatchNormAct2d


def test_a_two_trial_search_of_a_timm_model(tmp_path) -> None:
    import optuna

    from tests.search.conftest import TINY_SPACE, write_space
    from tests.search.test_study import spec_for
    from tianfeng.hpo.running.runner import run_search

    space = copy.deepcopy(TINY_SPACE)
    space["base"]["model"] = {"name": "timm:resnet10t", "kwargs": {"drop_rate": 0.1}}
    space["phases"].update(start_resolution=16, end_resolution=16)
    plan = spec_for(tmp_path, write_space(tmp_path, space), trials=2)
    run_search(plan, workers=1, resume=False)
    trials = optuna.load_study(study_name=plan.study, storage=plan.options.storage).get_trials()
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE] * 2
    assert all(t.user_attrs["config"]["model"] == {"name": "timm:resnet10t", "kwargs": {"drop_rate": 0.1},
                                                   "width": 16, "depth": 1, "stages": 3, "zero_init_residual": True,
                                                   "bn_after_pool": False, "weights": ""} for t in trials)


def test_a_model_config_made_in_code_from_a_dict_stays_hashable() -> None:
    """Configs are cache keys (the FLOP count, the memory measurement)."""
    made = ModelConfig(**{"name": "resnet_small", "kwargs": {"x": 1}})
    assert hash(made) == hash(ModelConfig(name="resnet_small", kwargs={"x": 1}))
