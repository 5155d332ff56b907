"""The engine end to end on tiny real runs: accuracy, divergence, fp16 overflow, pruning, resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from tests.conftest import make_config
from tianfeng.core.run_config import PrecisionConfig, config_to_dict
from tianfeng.trainers import checkpoint
from tianfeng.trainers.engine import StopTraining, train
from tianfeng.trainers.precision import build_precision, resolve_mode


def test_auto_precision_on_cpu_follows_the_bf16_hardware_and_says_why(monkeypatch) -> None:
    from tianfeng.trainers import precision

    monkeypatch.setattr(precision, "cpu_has_bf16_hardware", lambda: False)
    mode, reason = resolve_mode("auto", torch.device("cpu"))
    assert mode == "fp32" and "bf16" in reason and "slower" in reason
    monkeypatch.setattr(precision, "cpu_has_bf16_hardware", lambda: True)
    mode, reason = resolve_mode("auto", torch.device("cpu"))
    assert mode == "bf16" and "matrix instructions" in reason
    assert resolve_mode("fp32", torch.device("cpu"))[0] == "fp32"


def test_fp16_overflow_step_is_skipped_and_scale_halves() -> None:
    p = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.SGD([p], lr=0.1)
    precision = build_precision(PrecisionConfig(mode="fp16", loss_scale_init=1024.0), torch.device("cpu"))
    loss = (p * torch.tensor([1.0, float("inf"), 1.0])).sum()
    precision.scaler.scale(loss).backward()
    precision.scaler.step(opt)
    precision.scaler.update()
    assert torch.equal(p.detach(), torch.ones(3))  # the step was skipped
    assert precision.scaler.get_scale() == 512.0


def test_engine_fp16_counts_overflow_skips_and_still_learns(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, precision={"mode": "fp16", "loss_scale_init": 2.0**40},
                      phases=[{"epochs": 3, "resolution": 8, "batch_size": 32}])
    result = train(cfg)
    assert result.status == "completed" and result.precision == "fp16"
    # fp16 overflows at 65504: a 2**40 scale halves ~25 times before scaled gradients fit
    assert 15 <= result.final.skipped_steps <= 40
    assert result.final.val_top1 > 15  # it trained once the scale came down


def test_bf16_autocast_numerics_track_fp32_on_a_tiny_model(tmp_path: Path) -> None:
    fp32 = train(make_config(tmp_path / "a", phases=[{"epochs": 1, "resolution": 8, "batch_size": 128}]))
    bf16 = train(make_config(tmp_path / "b", precision={"mode": "bf16"},
                             phases=[{"epochs": 1, "resolution": 8, "batch_size": 128}]))
    assert bf16.precision == "bf16"
    assert bf16.final.train_loss == pytest.approx(fp32.final.train_loss, rel=0.05)


def test_divergence_stops_the_run(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, optimizer={"lr": 1e9, "weight_decay": 0.0})
    result = train(cfg)
    assert result.status == "diverged"
    assert "stopped instead of training on garbage" in result.message
    saved = json.loads((cfg.resolved_run_dir / "result.json").read_text())
    assert saved["status"] == "diverged"


def test_divergence_read_every_few_steps_stops_late_but_never_saves_a_diverged_model(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tianfeng.trainers import engine

    real_build, forwards = engine.build_model, {"n": 0}

    def poisoned(*args):  # the output turns inf from the 7th training step (index 6) on
        model = real_build(*args)

        def hook(module, inputs, output):
            forwards["n"] += module.training
            return output * float("inf") if module.training and forwards["n"] >= 7 else None

        model.register_forward_hook(hook)
        return model

    monkeypatch.setattr(engine, "build_model", poisoned)
    monkeypatch.setattr(engine, "divergence_check_steps", lambda device: 4)  # as on an accelerator
    # one forward per step: the noise scale's two-half steps would count twice
    # and a set layout: timing the layouts would run the hooked model before training (when the
    # machine's measurement is not cached yet)
    cfg = make_config(tmp_path, checkpoint={"every_steps": 3}, noise_scale_every=0, memory_format="contiguous")
    result = train(cfg)
    # read at step 8 (every 4 steps; before the checkpoint after step 8 too), 2 steps late
    assert result.status == "diverged" and "by epoch 1, step 8 " in result.message, result.message
    saved = torch.load(cfg.resolved_checkpoint_dir / "last.pt", weights_only=True)
    assert saved["position"]["global_step"] == 6  # the one written after step 5, before the poison
    assert all(torch.isfinite(t).all() for t in saved["model"].values() if t.is_floating_point())


def test_callback_can_prune_and_sees_every_epoch(tmp_path: Path) -> None:
    seen = []

    def callback(m):
        seen.append(m)
        if m.epoch == 2:
            raise StopTraining("pruned", "pruned at epoch 2")

    cfg = make_config(tmp_path, phases=[{"epochs": 4, "resolution": 8, "batch_size": 64}])
    result = train(cfg, callback)
    assert result.status == "pruned" and [m.epoch for m in seen] == [1, 2]
    # the callback sees each epoch as the run records it, before the run goes on
    recorded = [json.loads(line) for line in (Path(cfg.run_dir) / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in recorded] == [1, 2]
    for m, r in zip(seen, recorded, strict=True):
        assert (m.val_top1, m.train_loss, m.lr) == (r["val_top1"], r["train_loss"], r["lr"])
    assert seen[-1].val_top5 >= seen[-1].val_top1


def test_multi_phase_run_changes_resolution_and_batch(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, phases=[{"epochs": 1, "resolution": 8, "batch_size": 128},
                                        {"epochs": 1, "resolution": 12, "batch_size": 64}],
                      optimizer={"name": "lars", "lr": 2.0}, schedule={"warmup_epochs": 0.5})
    result = train(cfg)
    assert [(m.resolution, m.batch_size) for m in result.epochs] == [(8, 128), (12, 64)]
    assert result.status == "completed"



def test_stop_after_epochs_ends_early_and_the_full_run_continues_from_there(tmp_path: Path) -> None:
    """A screen: the run's own schedule, stopped after its first epoch with a checkpoint there;
    the same run without the stop takes it up and ends where an unstopped run does."""
    phases = [{"epochs": 1, "resolution": 8, "batch_size": 64}, {"epochs": 2, "resolution": 12, "batch_size": 64}]
    # a checkpoint every 2 epochs: the stop's epoch gets one all the same
    stopped = make_config(tmp_path / "run", phases=phases, engine={"stop_after_epochs": 1},
                          checkpoint={"every_epochs": 2})
    screen = train(stopped)
    assert screen.status == "stopped" and [m.epoch for m in screen.epochs] == [1]
    assert screen.message == "stopped after epoch 1 of 3 (engine.stop_after_epochs)"
    assert torch.load(stopped.resolved_checkpoint_dir / checkpoint.LAST, weights_only=False)["position"]["epoch"] == 1
    assert train(stopped).status == "stopped"  # resumed at its stop: nothing more to train

    rest = train(make_config(tmp_path / "run", phases=phases, checkpoint={"every_epochs": 2}))
    whole = train(make_config(tmp_path / "whole", phases=phases, checkpoint={"every_epochs": 2}))
    assert rest.status == whole.status == "completed"
    assert [m.epoch for m in rest.epochs] == [1, 2, 3]  # the first as the screen trained it
    for a, b in zip(whole.epochs, rest.epochs, strict=True):
        assert (a.train_loss, a.val_top1) == pytest.approx((b.train_loss, b.val_top1), rel=1e-5)


@pytest.mark.slow
def test_digits_default_recipe_reaches_95_percent(tmp_path: Path) -> None:
    from tianfeng.core.run_config import load_config
    from tianfeng.recipes import DEFAULT_RECIPE

    cfg = load_config(DEFAULT_RECIPE, [f"run_dir={tmp_path / 'digits'}"])
    result = train(cfg)
    assert result.final.val_top1 >= 95.0, result.final


def _launch(config_path: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tianfeng.cli", "train", "--config", str(config_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=os.environ.copy())


# what a resume must restore besides weights and data order: LARS's momentum in fp32; LAMB's two
# moments; fp16's loss scale mid-way through its growth and back-off (a huge initial scale that
# overflows, grown again every 3 steps); the noise-scale split steps every 2 steps, whose
# estimate (a running average) is compared too
RESUMED_RECIPES = {
    "lars-fp32": {"optimizer": {"name": "lars", "lr": 2.0}},
    "lamb": {"optimizer": {"name": "lamb", "lr": 0.01}},
    "fp16-loss-scaling": {"optimizer": {"name": "lars", "lr": 2.0},
                          "precision": {"mode": "fp16", "loss_scale_init": 2.0**30, "growth_interval": 3}},
    "noise-scale-steps": {"optimizer": {"name": "sgd", "lr": 0.2}, "noise_scale_every": 2},
}


@pytest.mark.slow
@pytest.mark.parametrize("recipe", sorted(RESUMED_RECIPES))
def test_kill_mid_epoch_then_resume_matches_uninterrupted_run(tmp_path: Path, recipe: str) -> None:
    def config(name: str) -> Path:
        cfg = make_config(tmp_path / name, phases=[{"epochs": 2, "resolution": 8, "batch_size": 16},
                                                   {"epochs": 1, "resolution": 12, "batch_size": 32}],
                          checkpoint={"every_steps": 3}, **RESUMED_RECIPES[recipe])
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config_to_dict(cfg)))
        return path

    reference = _launch(config("reference"))
    assert reference.wait(timeout=300) == 0, reference.stderr.read().decode()

    victim_config = config("victim")
    victim = _launch(victim_config)
    ckpt_dir = tmp_path / "victim" / "run" / "checkpoints"
    deadline = time.time() + 120
    killed_at = None
    while time.time() < deadline:  # wait for a mid-epoch checkpoint in the second epoch
        try:
            state = torch.load(ckpt_dir / checkpoint.LAST, weights_only=False)["position"]
        except (FileNotFoundError, EOFError, RuntimeError):
            state = None
        if state and state["epoch"] == 1 and state["step"] > 0:
            victim.send_signal(signal.SIGKILL)
            killed_at = state
            break
        time.sleep(0.01)
    assert killed_at is not None, "the run never wrote a mid-epoch checkpoint"
    assert victim.wait(timeout=30) == -signal.SIGKILL

    resumed = _launch(victim_config)
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err.decode()
    assert "resumed from" in err.decode()

    def metrics(name: str) -> list[dict]:
        lines = (tmp_path / name / "run" / "metrics.jsonl").read_text().splitlines()
        return [json.loads(line) for line in lines]

    ref, res = metrics("reference"), metrics("victim")
    assert len(ref) == len(res) == 3
    for a, b in zip(ref, res, strict=True):
        for key in ("train_loss", "val_loss", "val_top1", "val_top5", "lr", "noise_scale", "skipped_steps"):
            if a[key] is None:
                assert b[key] is None, (key, a, b)
            else:
                assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-7), (key, a, b)


def test_a_checkpoint_holding_other_objects_is_refused_in_our_words(tmp_path) -> None:
    """torch's safe loader refuses it; the error names the file and what it held, and never
    quotes torch's advice to load it unsafely (which reads as if tianfeng had done so)."""
    import torch

    from tianfeng.core.errors import ConfigError
    from tianfeng.trainers import checkpoint

    (tmp_path / checkpoint.LAST).parent.mkdir(parents=True, exist_ok=True)
    torch.save({"model": {}, "planted": object()}, tmp_path / checkpoint.LAST)
    with pytest.raises(ConfigError) as info:
        checkpoint.load(tmp_path)
    text = str(info.value)
    assert str(tmp_path / checkpoint.LAST) in text and "it holds a Python object of type" in text, text
    assert "weights_only" not in text and "Re-running" not in text and "\n" not in text
