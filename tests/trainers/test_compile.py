"""engine.compile: the same training compiled or not, divergence still caught, and `auto`
compiling only when the steps left pay for it, from measurements kept for later runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import make_config
from tianfeng.trainers import compilation
from tianfeng.trainers.engine import train

CPU = torch.device("cpu")


def test_compiled_and_eager_runs_give_the_same_losses(tmp_path: Path, caplog) -> None:
    runs = {}
    for setting in ("off", "on"):
        cfg = make_config(tmp_path / setting, engine={"compile": setting}, memory_format="contiguous")
        with caplog.at_level("INFO", logger="tianfeng.engine"):
            runs[setting] = train(cfg)
    assert "compile on (as configured, mode default)" in caplog.text
    off, on = (runs[s].epochs for s in ("off", "on"))
    assert len(on) == len(off) == 2
    # inductor fuses and reorders float32 reductions: equal to rounding, not bit for bit
    for a, b in zip(off, on, strict=True):
        assert b.train_loss == pytest.approx(a.train_loss, rel=2e-3)
        assert b.val_loss == pytest.approx(a.val_loss, rel=2e-3)


def test_a_compiled_run_still_stops_on_divergence(tmp_path: Path) -> None:
    result = train(make_config(tmp_path, optimizer={"lr": 1e9, "weight_decay": 0.0}, engine={"compile": "on"},
                               memory_format="contiguous"))
    assert result.status == "diverged"
    assert "stopped instead of training on garbage" in result.message


@pytest.mark.alone
def test_auto_stays_eager_when_the_run_is_too_short_to_pay(tmp_path: Path, caplog) -> None:
    cfg = make_config(tmp_path, data={"source": "digits", "cache_dir": str(tmp_path / "cache")})
    with caplog.at_level("INFO", logger="tianfeng.engine"):
        result = train(cfg)
    assert result.status == "completed"
    line = next(r.message for r in caplog.records if r.message.startswith("compile auto"))
    assert line.startswith("compile auto: off (") and "priors" in line
    assert not (tmp_path / "cache" / "compile.json").exists()  # nothing compiled, nothing measured


@pytest.mark.alone
def test_auto_compiles_when_it_pays_and_records_what_it_measured(tmp_path: Path, caplog,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    # as if earlier runs had measured a large speedup and a free compile for this model
    monkeypatch.setattr(compilation, "estimate", lambda shapes, shape, device: compilation.Estimate(5.0, 0.0, "test"))
    cfg = make_config(tmp_path, data={"source": "digits", "cache_dir": str(cache)}, memory_format="contiguous",
                      phases=[{"epochs": 2, "resolution": 8, "batch_size": 32}])
    with caplog.at_level("INFO", logger="tianfeng.engine"):
        result = train(cfg)
    assert result.status == "completed"
    assert "compile auto: on (" in caplog.text
    records = json.loads((cache / "compile.json").read_text())
    (model, shapes), = records.items()
    assert model.startswith("cpu:resnet_small:8:1:2:fp32:contiguous:world1:")
    assert list(shapes) == ["8px x 32"]
    entry = shapes["8px x 32"]
    assert entry["compiles"] == 1 and entry["speedup"] > 0 and entry["cold_s"] >= 0
    assert "warm_s" not in entry  # only a second compile of the shape measures a warm one



def test_auto_counts_only_the_steps_a_stopped_run_will_train(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A screen stopped after its first epoch weighs the compile against that epoch's steps and
    shape, not against the full schedule it will not train."""
    seen = []
    real_pays = compilation.pays

    def spy(eager_step_s, steps_left, shapes_left, shapes, device):
        seen.append((steps_left, list(shapes_left)))
        return real_pays(eager_step_s, steps_left, shapes_left, shapes, device)

    monkeypatch.setattr(compilation, "pays", spy)
    phases = [{"epochs": 1, "resolution": 8, "batch_size": 32}, {"epochs": 2, "resolution": 12, "batch_size": 32}]
    for stop in (0, 1):
        cfg = make_config(tmp_path / str(stop), phases=phases, engine={"stop_after_epochs": stop},
                          data={"source": "digits", "cache_dir": str(tmp_path / "cache")}, memory_format="contiguous")
        train(cfg)
    (whole, whole_shapes), (screen, screen_shapes) = seen
    # both phases train at batch 32: the steps the stop leaves out are two epochs', and what the
    # screen has left when it decides is less than its one epoch
    steps_per_epoch = (whole - screen) // 2
    assert whole - screen == 2 * steps_per_epoch and 0 < screen < steps_per_epoch
    assert whole_shapes == ["8px x 32", "12px x 32"] and screen_shapes == ["8px x 32"]


@pytest.mark.parametrize(("compiled_s", "kept"), [(0.030, False), (0.005, True)])
def test_auto_drops_a_compile_that_measured_slower_than_eager(tmp_path: Path, caplog, monkeypatch, compiled_s,
                                                              kept) -> None:
    """The estimate said compile; the compiled steps then measured 3x slower (as a per-GPU
    BatchNorm model did on a CPU): the run goes on eagerly, and the record keeps the slowdown
    so later runs do not compile it. A faster compile stays."""
    monkeypatch.setattr(compilation, "estimate", lambda shapes, shape, device: compilation.Estimate(5.0, 0.0, "test"))
    eager = torch.nn.Linear(2, 2)
    policy = compilation.CompilePolicy("auto", "default", eager, CPU, is_main=True, share=lambda verdict: verdict,
                                       cache_dir=tmp_path, model_key="m")
    shapes = ["8px x 32"]
    with caplog.at_level("INFO", logger="tianfeng.engine"):
        for _ in range(compilation.WARMUP_STEPS + compilation.EAGER_STEPS):
            policy.step_done(0.010, timed=True, steps_left=10_000, shapes_left=shapes)
        assert policy.model is not eager  # compiled, on the estimate
        policy.step_done(1.0, timed=True, steps_left=10_000, shapes_left=shapes)  # the first: compiling
        for _ in range(compilation.COMPILED_STEPS):
            policy.step_done(compiled_s, timed=True, steps_left=10_000, shapes_left=shapes)
    assert not policy.timing
    assert (policy.model is not eager) == kept
    assert ("eager for the rest of the run" in caplog.text) != kept
    speedup = json.loads((tmp_path / "compile.json").read_text())["m"]["8px x 32"]["speedup"]
    assert speedup == pytest.approx(0.010 / compiled_s, rel=1e-3)


def test_estimates_prefer_this_shape_then_the_model_then_the_priors() -> None:
    assert compilation.estimate({}, "8px x 32", CPU) == compilation.Estimate(
        compilation.PRIOR_SPEEDUP["cpu"], compilation.PRIOR_COMPILE_S["cpu"], "priors")
    shapes = {"8px x 32": {"speedup": 1.3, "compiles": 1, "cold_s": 20.0},
              "16px x 64": {"speedup": 1.5, "compiles": 2, "cold_s": 25.0, "warm_s": 1.5}}
    cold_only = compilation.estimate(shapes, "8px x 32", CPU)
    assert (cold_only.speedup, cold_only.compile_s) == (1.3, compilation.PRIOR_WARM_S)
    warm = compilation.estimate(shapes, "16px x 64", CPU)
    assert (warm.speedup, warm.compile_s) == (1.5, 1.5)
    other = compilation.estimate(shapes, "12px x 48", CPU)  # a new shape: the slowest first compile
    assert (other.speedup, other.compile_s) == (1.4, 25.0)
    # a compile that found its graph already in the process (~0 s) does not promise a free one
    same_process = {"8px x 32": {"speedup": 1.3, "compiles": 2, "cold_s": 20.0, "warm_s": 0.01}}
    assert compilation.estimate(same_process, "8px x 32", CPU).compile_s == compilation.MIN_WARM_S


def test_pays_weighs_the_saving_against_every_shape_left_to_compile() -> None:
    shapes = {"8px x 32": {"speedup": 2.0, "compiles": 2, "cold_s": 20.0, "warm_s": 1.0}}
    # 1000 steps of 10 ms at 2x save 5 s; one cached shape costs 1 s
    ok, why = compilation.pays(0.010, 1000, ["8px x 32"], shapes, CPU)
    assert ok and "save ~5.0 s" in why and "costs ~1.0 s" in why
    # a second phase at a new shape adds a 20 s first compile
    ok, why = compilation.pays(0.010, 1000, ["8px x 32", "16px x 32"], shapes, CPU)
    assert not ok and "2 shape(s) costs ~21.0 s" in why
    # the same shape in two phases compiles once
    assert compilation.pays(0.010, 1000, ["8px x 32", "8px x 32"], shapes, CPU)[0]


def test_records_keep_the_first_compile_and_the_latest_warm_one(tmp_path: Path) -> None:
    records = compilation.CompileRecords(tmp_path)
    records.write("m", "8px x 32", compilation.Record(compile_s=20.0, speedup=1.3))
    records.write("m", "8px x 32", compilation.Record(compile_s=1.2, speedup=1.35))
    records.write("m", "8px x 32", compilation.Record(compile_s=0.9, speedup=1.33))
    assert records.read() == {"m": {"8px x 32": {"speedup": 1.33, "compiles": 3, "cold_s": 20.0, "warm_s": 0.9}}}


def test_inductor_caches_go_under_the_tianfeng_cache_unless_the_user_chose(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", default_cache_dir())  # what torch writes when it asks first
    compilation.use_cache_dir(tmp_path)
    assert Path(compilation.os.environ["TORCHINDUCTOR_CACHE_DIR"]) == (tmp_path / "inductor").resolve()
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    compilation.use_cache_dir(tmp_path / "other")
    assert compilation.os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "mine")


def test_yaml_on_and_off_read_as_the_settings(tmp_path: Path) -> None:
    from tianfeng.core.run_config import load_config

    path = tmp_path / "run.yaml"
    path.write_text("engine: {compile: on}\n")
    assert load_config(path).engine.compile == "on"
    path.write_text("engine: {compile: off}\n")
    assert load_config(path).engine.compile == "off"


@pytest.mark.skipif(torch.cuda.is_available(), reason="the warning is that of a machine without a GPU")
def test_a_compile_on_a_machine_without_a_gpu_prints_no_cuda_warning(tmp_path: Path) -> None:
    # a process of its own: torch warns once per process, when inductor first imports its builder
    script = ("import torch\nfrom torch import nn\nfrom tianfeng.trainers.compilation import compile_model\n"
              "model = compile_model(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), 'default')\n"
              "model(torch.randn(2, 4)).sum().backward()\nprint('trained')\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")})
    assert out.returncode == 0 and out.stdout.strip() == "trained", out.stderr[-2000:]
    assert "No CUDA runtime" not in out.stderr, out.stderr[-2000:]
