"""Every confirmed published recipe, enqueued as a trial of imagenet_resnet50.yaml, materialises
to the recipe: the table below is transcribed from the recipes' sources on its own, not from the
space file."""

from __future__ import annotations

import functools
from pathlib import Path

import optuna
import pytest

from tianfeng.core.lr_schedule import learning_rate, warmup_start
from tianfeng.hpo.running.objective import suggest
from tianfeng.hpo.space.materialize import build_config
from tianfeng.hpo.space.read import load_space

REPO = Path(__file__).resolve().parents[2]

# name: (batch, optimizer, momentum, peak LR, warm-up epochs, warm-up start LR, decay, poly power,
#        end LR, LARS eta, LARS eps, weight decay, label smoothing, epochs)
RECIPES = {
    "mlperf-reference-lars-4k": (4096, "lars", 0.9, 10.0, 5, 0.0, "poly", 2.0, 1e-4, 0.001, 1e-7, 2e-4, 0.1, 42),
    "google-mlperf-v0.6-32k": (32768, "lars", 0.9, 31.2, 25, 0.0, "poly", 2.0, 1e-4, 0.001, 1e-5, 1e-4, 0.1, 76),
    "google-mlperf-v0.7-64k": (65536, "lars", 0.951807, 24.699, 31, 0.0, "poly", 2.0, 1e-4, 0.001, 0.0, 1e-4, 0.1, 89),
    "google-mlperf-v1.0-32k": (32768, "lars", 0.929, 29.0, 18, 0.0, "poly", 2.0, 1e-4, 0.001, 0.0, 1e-4, 0.1, 60),
    "nvidia-mlperf-v1.0-64k": (64480, "lars", 0.9518, 24.699, 31, 0.0, "poly", 2.0, 1e-4, 0.001, 0.0, 1e-4, 0.1, 90),
    "nvidia-mlperf-v1.0-35k": (35840, "lars", 0.94, 21.9, 17, 0.0, "poly", 2.0, 1e-4, 0.001, 0.0, 2.5e-5, 0.1, 60),
    "fujitsu-mlperf-v0.6-86k": (86016, "lars", 0.96, 13.0, 36, 0.0, "poly", 2.2, 0.0325, 0.0025, 1e-9, 5e-5, 0.1, 90),
    "nvidia-dle-rn50-v1.5": (2048, "sgd", 0.875, 2.048, 8, 0.0, "cosine", None, 0.0, None, None, 3.05e-5, 0.1, 90),
}


# the space's own cluster is 128 V100 16 GB; these recipes' batches are 504-672 per GPU there, more
# than a V100 holds, so they are tried on a cluster of their size (a whole number per GPU)
LARGER = {"google-mlperf-v0.7-64k": 2048, "nvidia-mlperf-v1.0-64k": 2080, "fujitsu-mlperf-v0.6-86k": 2048}
SPACE = REPO / "search_spaces" / "imagenet_resnet50.yaml"


@pytest.fixture(scope="module")
def space():
    return load_space(SPACE)


@functools.cache
def space_for(name: str):
    return load_space(SPACE, gpus=LARGER[name]) if name in LARGER else load_space(SPACE)


def test_every_confirmed_recipe_is_a_prior(space) -> None:
    assert {p.name for p in space.priors} == set(RECIPES) - set(LARGER) | {
        "goyal2017-8k-step-decay-unconfirmed", "fastai-diu-imagenet18"}
    for name, gpus in LARGER.items():  # left out on 128 V100, in on a cluster they fit
        assert name in {p.name for p in space_for(name).priors}
        assert space_for(name).constants["gpus"] == gpus
    assert not any(p.name.startswith(("you2017", "jia2018")) for p in space.priors)  # unconfirmed values


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_an_enqueued_recipe_materialises_to_the_recipe(name: str) -> None:
    space = space_for(name)
    (batch, optimizer, momentum, peak, warmup, start_lr, decay, power, end_lr, eta, eps, wd, smoothing,
     epochs) = RECIPES[name]
    study = optuna.create_study()
    study.enqueue_trial(next(p.params for p in space.priors if p.name == name))
    values = suggest(study.ask(), space)
    cfg = build_config(space, values, "target")

    assert [(p.epochs, p.resolution, p.batch_size) for p in cfg.phases] == [(epochs, 224, batch)]
    o, s = cfg.optimizer, cfg.schedule
    assert (o.name, o.label_smoothing) == (optimizer, smoothing)
    assert o.momentum == pytest.approx(momentum) and o.weight_decay == pytest.approx(wd)
    assert learning_rate(warmup, batch, cfg) == pytest.approx(peak, rel=1e-6)  # the peak, after warm-up
    assert learning_rate(0.0, batch, cfg) == pytest.approx(start_lr, abs=1e-12)
    assert s.warmup_epochs == warmup and s.warmup_shape == "linear" and warmup_start(s) == start_lr
    assert s.decay == decay
    assert learning_rate(epochs, batch, cfg) == pytest.approx(end_lr, rel=1e-6, abs=1e-12)
    if decay == "poly":
        assert s.poly_power == pytest.approx(power)
        middle = warmup + (epochs - warmup) / 2
        assert learning_rate(middle, batch, cfg) == pytest.approx(end_lr + (peak - end_lr) * 0.5**power, rel=1e-6)
    if optimizer == "lars":
        assert o.lars.trust_coefficient == eta and o.lars.eps == eps and o.lars.update == "reference"


def test_goyal_is_marked_unconfirmed_and_steps_at_30_60_80(space) -> None:
    prior = next(p for p in space.priors if p.name.startswith("goyal2017"))
    assert "unconfirmed" in prior.name
    cfg = build_config(space, prior.params, "target")
    assert cfg.schedule.decay == "step" and list(cfg.schedule.step_milestones) == [30, 60, 80]
    assert learning_rate(0.0, 8192, cfg) == pytest.approx(0.1)  # warm-up from 0.1, as the paper
    assert learning_rate(85, 8192, cfg) == pytest.approx(0.0032)


def test_a_64k_trial_at_the_proxy_rung_takes_at_least_min_steps() -> None:
    """At 10% of ImageNet a 64K batch is one step an epoch; the guard gives it the least data that
    makes 50 steps in the rung's 5 epochs (the space is loaded without its data here, so the
    count is set)."""
    import dataclasses

    space = space_for("google-mlperf-v0.7-64k")
    sized = dataclasses.replace(space, constants={**space.constants, "all_train_images": 1_281_167})
    prior = next(p for p in space.priors if p.name == "google-mlperf-v0.7-64k")
    proxy = build_config(sized, prior.params, "proxy")
    steps = sum(p.epochs * (int(1_281_167 * proxy.data.fraction) // p.batch_size) for p in proxy.phases)
    assert 50 <= steps <= 55 and proxy.total_epochs == 5 and 0.5 < proxy.data.fraction < 0.6
    own = load_space(SPACE)  # 128 GPUs: 2048 is 16 per GPU
    own = dataclasses.replace(own, constants={**own.constants, "all_train_images": 1_281_167})
    small = build_config(own, {**prior.params, "batch_size": 2048}, "proxy")
    assert small.data.fraction == pytest.approx(0.1) and small.total_epochs == 5  # enough steps as it is


def test_the_imagenet18_prior_is_fastai_diu_schedule(space) -> None:
    """diux-dev/imagenet18 train.py, sixteen_machines (128 GPUs), transcribed here on its own:
    per-GPU batch and size by epoch, and the LR at each of its points."""
    lr = 0.235 * 8
    phases = [(6, 128, 64 * 128), (10, 128, 128 * 128), (3, 224, 64 * 128), (18, 224, 192 * 128), (13, 288, 128 * 128)]
    expected = {0: lr, 3: 1.5 * lr, 6: 2 * lr, 10: 2 * lr, 16: lr, 18.5: lr, 19: 2 * lr / (10 / 1.5),
                30: 2 * lr / (10 / 1.5), 31: 2 * lr / (100 / 1.5), 37: 2 * lr / 100, 38: 2 * lr / 1000, 49.9: 2 * lr / 1000}
    prior = next(p for p in space.priors if p.name == "fastai-diu-imagenet18")
    study = optuna.create_study()
    study.enqueue_trial(prior.params)
    cfg = build_config(space, suggest(study.ask(), space), "target")
    assert [(p.epochs, p.resolution, p.batch_size) for p in cfg.phases] == phases
    assert (cfg.optimizer.name, cfg.optimizer.momentum, cfg.optimizer.weight_decay, cfg.optimizer.label_smoothing) == \
        ("sgd", 0.9, 1e-4, 0.0)
    starts = [sum(p[0] for p in phases[:i]) for i in range(len(phases))]
    for epoch, want in expected.items():
        batch = next(b for (_, _, b), start in reversed(list(zip(phases, starts, strict=True))) if epoch >= start)
        assert learning_rate(epoch, batch, cfg) == pytest.approx(want, rel=1e-3), epoch
