"""BatchNorm per GPU emulated in one process, against independent oracles: torch's own
BatchNorm applied to each GPU's share of the batch."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from tianfeng.trainers import grouped_bn_kernel, per_gpu_bn


@pytest.fixture(params=["kernel", "eager"])
def channels_last_path(request, monkeypatch) -> str:
    """Each channels_last test on both paths: the compiled CPU kernel (it must build on this
    machine: a C++ compiler and ninja are part of the setup) and the eager one it falls back to."""
    if request.param == "kernel":
        assert grouped_bn_kernel.kernel() is not None, "the per-GPU BatchNorm kernel did not build here"
    else:
        monkeypatch.setattr(grouped_bn_kernel, "kernel", lambda: None)
    return request.param


def _pair(bn: nn.Module, gpus: int) -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
    emulated = per_gpu_bn.convert(nn.Sequential(copy.deepcopy(bn)))
    per_gpu_bn.set_groups(emulated, gpus)
    return bn, emulated


def _gpu_by_gpu(bn: nn.Module, x: torch.Tensor, shares: list[list[int]]) -> tuple[torch.Tensor, list]:
    """Plain BatchNorm on each GPU's images with its own copy (as each GPU has one), put back in
    the batch's order; running stats of the first."""
    copies = [copy.deepcopy(bn) for _ in shares]
    parts = [c(x[idx]) for c, idx in zip(copies, shares, strict=True)]
    order = [i for idx in shares for i in idx]
    return torch.cat(parts)[torch.argsort(torch.tensor(order))], copies


def _in_turn(n: int, gpus: int) -> list[list[int]]:
    """Image i to GPU i mod gpus (as ranks are dealt a global batch)."""
    return [list(range(r, n, gpus)) for r in range(gpus)]


@pytest.mark.parametrize(("shape", "layout"), [((24, 6, 5, 5), torch.contiguous_format),
                                               ((24, 6, 5, 5), torch.channels_last), ((24, 6), None)])
def test_whole_groups_equal_batchnorm_applied_gpu_by_gpu(shape, layout, channels_last_path) -> None:
    bn = nn.BatchNorm2d(6) if len(shape) == 4 else nn.BatchNorm1d(6)
    bn, emulated = _pair(bn, gpus=6)
    x = torch.randn(shape) * 3 + 1
    if layout is not None:
        x = x.contiguous(memory_format=layout)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    expected, copies = _gpu_by_gpu(bn, xa, _in_turn(24, 6))
    got = emulated(xb)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    weight = torch.randn_like(expected)
    (expected * weight).sum().backward()
    (got * weight).sum().backward()
    torch.testing.assert_close(xb.grad, xa.grad, rtol=1e-4, atol=1e-5)
    layer = emulated[0]
    grads = [sum(c.weight.grad for c in copies), sum(c.bias.grad for c in copies)]
    torch.testing.assert_close(layer.weight.grad, grads[0], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(layer.bias.grad, grads[1], rtol=1e-4, atol=1e-5)
    # the running statistics are the first GPU's (DDP broadcasts rank 0's buffers)
    torch.testing.assert_close(layer.running_mean, copies[0].running_mean)
    torch.testing.assert_close(layer.running_var, copies[0].running_var)


@pytest.mark.parametrize("options", [{"momentum": None}, {"track_running_stats": False}])
def test_running_statistics_as_torch_keeps_them_over_steps(options, channels_last_path) -> None:
    """A cumulative average (momentum None) over three steps is GPU 0's, as on rank 0; a layer
    without running statistics keeps none and still normalises per GPU."""
    bn, emulated = _pair(nn.BatchNorm2d(4, **options), gpus=4)
    first = copy.deepcopy(bn)
    for step in range(3):
        x = (torch.randn(8, 4, 3, 3) * (step + 1) + step).contiguous(memory_format=torch.channels_last)
        expected, _ = _gpu_by_gpu(bn, x, _in_turn(8, 4))
        torch.testing.assert_close(emulated(x), expected, rtol=1e-5, atol=1e-5)
        first(x[0::4])  # GPU 0's images through GPU 0's own copy
    layer = emulated[0]
    if bn.track_running_stats:
        assert int(layer.num_batches_tracked) == 3
        torch.testing.assert_close(layer.running_mean, first.running_mean)
        torch.testing.assert_close(layer.running_var, first.running_var)
    else:
        assert layer.running_mean is None and layer.running_var is None


def test_a_remainder_joins_the_last_gpu() -> None:
    bn, emulated = _pair(nn.BatchNorm2d(3), gpus=3)
    x = torch.randn(17, 3, 4, 4)
    expected, copies = _gpu_by_gpu(bn, x, [[0, 3, 6, 9, 12], [1, 4, 7, 10, 13], [2, 5, 8, 11, 14, 15, 16]])
    torch.testing.assert_close(emulated(x), expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(emulated[0].running_var, copies[0].running_var)


def test_a_batch_smaller_than_the_gpus_is_refused() -> None:
    _, emulated = _pair(nn.BatchNorm2d(3), gpus=8)
    with pytest.raises(ValueError, match="a batch of 5 images cannot be shared by 8 GPUs"):
        emulated(torch.randn(5, 3, 4, 4))


def test_evaluation_and_a_single_gpu_are_plain_batchnorm() -> None:
    bn, emulated = _pair(nn.BatchNorm2d(3), gpus=1)
    x = torch.randn(8, 3, 4, 4)
    torch.testing.assert_close(emulated(x), bn(x))  # both update their running statistics
    emulated.eval()
    bn.eval()
    torch.testing.assert_close(emulated(x), bn(x))


@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last])
def test_autocast_keeps_the_statistics_in_fp32(layout, channels_last_path) -> None:
    bn, emulated = _pair(nn.BatchNorm2d(4), gpus=4)
    x = torch.randn(8, 4, 3, 3) * 100 + 50  # bf16 statistics would lose the variance here
    expected, _ = _gpu_by_gpu(bn, x, _in_turn(8, 4))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = emulated(x.bfloat16().contiguous(memory_format=layout))
    assert got.dtype == torch.bfloat16
    assert got.is_contiguous(memory_format=layout)
    torch.testing.assert_close(got.float(), expected, rtol=0.02, atol=0.05)


def test_channels_last_without_affine_parameters_and_with_a_large_mean(channels_last_path) -> None:
    """The channels_last path computes its own statistics: centred before squaring, so a mean
    600 standard deviations from zero does not swamp the variance (E[x^2] - E[x]^2 in fp32 would
    be off by ~2%); no weight and bias is weight 1 and bias 0. The oracle works in float64: at
    this mean fp32 inputs themselves carry ~1e-4 of the output's error, whatever the algorithm."""
    bn = nn.BatchNorm2d(5, affine=False)
    emulated = per_gpu_bn.convert(nn.Sequential(copy.deepcopy(bn)))
    per_gpu_bn.set_groups(emulated, 4)
    x = (torch.randn(16, 5, 4, 4) * 0.5 + 300).contiguous(memory_format=torch.channels_last)
    xa, xb = x.double().requires_grad_(), x.clone().requires_grad_()
    expected, copies = _gpu_by_gpu(bn.double(), xa, _in_turn(16, 4))
    got = emulated(xb)
    torch.testing.assert_close(got.double(), expected, rtol=1e-3, atol=1e-3)
    weight = torch.randn_like(got)
    (expected * weight.double()).sum().backward()
    (got * weight).sum().backward()
    torch.testing.assert_close(xb.grad.double(), xa.grad, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(emulated[0].running_var.double(), copies[0].running_var, rtol=1e-4, atol=1e-6)


def test_channels_last_gradients_match_finite_differences() -> None:
    bn, emulated = _pair(nn.BatchNorm2d(3), gpus=2)
    layer = emulated[0].double()
    x = torch.randn(4, 3, 2, 3, dtype=torch.float64).contiguous(memory_format=torch.channels_last)

    def normalise(x, weight, bias):
        return torch.func.functional_call(layer, {"weight": weight, "bias": bias}, (x,))

    inputs = (x.requires_grad_(), layer.weight.detach().clone().requires_grad_(),
              layer.bias.detach().clone().requires_grad_())
    assert torch.autograd.gradcheck(normalise, inputs)


def test_a_small_per_gpu_batch_changes_what_the_model_computes() -> None:
    """The point of it: two images per GPU normalise very differently from 32 in one batch."""
    bn, emulated = _pair(nn.BatchNorm2d(4), gpus=16)
    x = torch.randn(32, 4, 3, 3)
    assert not torch.allclose(emulated(x), copy.deepcopy(bn)(x), atol=1e-2)


def test_the_engine_trains_with_batchnorm_per_emulated_gpu(tmp_path, caplog) -> None:
    from tests.conftest import make_config
    from tianfeng.core.errors import ConfigError
    from tianfeng.trainers.engine import train

    phases = [{"epochs": 1, "resolution": 8, "batch_size": 64}, {"epochs": 1, "resolution": 8, "batch_size": 32}]
    with caplog.at_level("INFO", logger="tianfeng.engine"):
        emulated = train(make_config(tmp_path / "e", phases=phases, distributed={"emulate_gpus": 16}))
    assert "BatchNorm per GPU of 16: groups of 4/2 images" in caplog.text
    plain = train(make_config(tmp_path / "p", phases=phases))
    assert emulated.status == plain.status == "completed"
    assert emulated.epochs[-1].train_loss != pytest.approx(plain.epochs[-1].train_loss, rel=1e-3)
    with pytest.raises(ConfigError, match=r"phases.1.batch_size: must be at least distributed.emulate_gpus \(48\)"):
        train(make_config(tmp_path / "x", phases=phases, distributed={"emulate_gpus": 48}))


def test_node_scope_sync_batchnorm_is_emulated_over_each_nodes_share(tmp_path, caplog) -> None:
    """8 GPUs in 2 nodes with SyncBatchNorm inside each node normalise over a node's 32 of 64
    images: the same statistics as 2 GPUs of 32 images each, so the two runs train alike."""
    from tests.conftest import make_config
    from tianfeng.core.errors import ConfigError
    from tianfeng.trainers.engine import train

    phases = [{"epochs": 1, "resolution": 8, "batch_size": 64}]
    node_scope = {"emulate_gpus": 8, "emulate_gpus_per_node": 4, "sync_bn": True, "sync_bn_scope": "node"}
    same = {"phases": phases, "memory_format": "contiguous"}  # one layout: its rounding differs from the other's
    with caplog.at_level("INFO", logger="tianfeng.engine"):
        nodes = train(make_config(tmp_path / "n", distributed=node_scope, **same))
    assert "BatchNorm per node of 2 (4 GPUs each, node-scope SyncBatchNorm): groups of 32 images" in caplog.text
    two_gpus = train(make_config(tmp_path / "g", distributed={"emulate_gpus": 2}, **same))
    per_gpu = train(make_config(tmp_path / "p", distributed={"emulate_gpus": 8}, **same))
    loss = nodes.epochs[-1].train_loss
    assert loss == pytest.approx(two_gpus.epochs[-1].train_loss, rel=1e-6)
    assert abs(loss - per_gpu.epochs[-1].train_loss) > 1e-4  # groups of 8 images normalise otherwise
    with pytest.raises(ConfigError, match=r"distributed.emulate_gpus_per_node: must be set"):
        train(make_config(tmp_path / "x", distributed={**node_scope, "emulate_gpus_per_node": 0}, **same))
    with pytest.raises(ConfigError, match=r"distributed.emulate_gpus_per_node: must divide the GPUs each"):
        train(make_config(tmp_path / "y", distributed={**node_scope, "emulate_gpus_per_node": 3}, **same))


def test_a_batchnorm_group_of_two_gpus_is_emulated_over_two_gpus_share(tmp_path, caplog) -> None:
    """8 GPUs with sync_bn_group 2 (MLPerf's BN_GROUP) normalise over 2 GPUs' 16 of 64 images:
    as 4 GPUs of 16 images each train. Bug caught: the group ignored (per-GPU statistics of 8)."""
    from tests.conftest import make_config
    from tianfeng.core.errors import ConfigError
    from tianfeng.trainers.engine import train

    phases = [{"epochs": 1, "resolution": 8, "batch_size": 64}]
    grouped = {"emulate_gpus": 8, "sync_bn": True, "sync_bn_group": 2}
    same = {"phases": phases, "memory_format": "contiguous"}
    with caplog.at_level("INFO", logger="tianfeng.engine"):
        pairs = train(make_config(tmp_path / "n", distributed=grouped, **same))
    assert "BatchNorm per group of 4 (2 GPUs each, SyncBatchNorm groups): groups of 16 images" in caplog.text
    four_gpus = train(make_config(tmp_path / "g", distributed={"emulate_gpus": 4}, **same))
    per_gpu = train(make_config(tmp_path / "p", distributed={"emulate_gpus": 8}, **same))
    loss = pairs.epochs[-1].train_loss
    assert loss == pytest.approx(four_gpus.epochs[-1].train_loss, rel=1e-6)
    assert abs(loss - per_gpu.epochs[-1].train_loss) > 1e-4
    with pytest.raises(ConfigError, match=r"distributed.sync_bn_group: must divide the GPUs each of the 1 "
                                          r"process\(es\) emulates \(8\), got 3"):
        train(make_config(tmp_path / "x", distributed={**grouped, "sync_bn_group": 3}, **same))
    with pytest.raises(ConfigError, match=r"distributed.sync_bn_group: needs sync_bn: true"):
        train(make_config(tmp_path / "y", distributed={**grouped, "sync_bn": False}, **same))


def _fresh_versions(monkeypatch) -> None:
    """torch's builder remembers, per process, what it built under each name and builds again
    under a new one when asked twice: a test's second build starts from a new process's memory."""
    from torch.utils import _cpp_extension_versioner, cpp_extension

    monkeypatch.setattr(cpp_extension, "JIT_EXTENSION_VERSIONER", _cpp_extension_versioner.ExtensionVersioner())


def test_the_kernel_takes_even_channels_last_cpu_batches_of_training_precisions() -> None:
    weight = torch.ones(4)
    channels_last = torch.randn(8, 4, 3, 3).contiguous(memory_format=torch.channels_last)
    assert grouped_bn_kernel.usable(channels_last, weight, 4)
    assert grouped_bn_kernel.usable(channels_last.bfloat16(), weight, 2)
    assert not grouped_bn_kernel.usable(channels_last.double(), weight, 4)  # float64 stays float64: eager
    assert not grouped_bn_kernel.usable(channels_last, weight, 3)  # 8 images do not deal to 3 evenly
    assert not grouped_bn_kernel.usable(channels_last.contiguous(), weight, 4)
    assert not grouped_bn_kernel.usable(channels_last, weight.double(), 4)


def test_a_kernel_that_does_not_build_leaves_the_eager_path_and_says_so_once(tmp_path, monkeypatch, caplog) -> None:
    broken = tmp_path / "grouped_bn.cpp"
    broken.write_text("this is not C++\n")
    monkeypatch.setattr(grouped_bn_kernel, "SOURCE", broken)
    monkeypatch.setattr(grouped_bn_kernel, "build_directory", lambda: tmp_path / "build")
    monkeypatch.setattr(grouped_bn_kernel, "_loaded", {})
    _fresh_versions(monkeypatch)
    with caplog.at_level("WARNING", logger="tianfeng.engine"):
        assert grouped_bn_kernel.kernel() is None
        assert grouped_bn_kernel.kernel() is None  # not built again
    said = [r.getMessage() for r in caplog.records if "could not be built" in r.getMessage()]
    assert len(said) == 1 and "the slower eager path runs" in said[0], caplog.text
    bn, emulated = _pair(nn.BatchNorm2d(3), gpus=2)  # and per-GPU BatchNorm still trains, eagerly
    x = torch.randn(8, 3, 4, 4).contiguous(memory_format=torch.channels_last)
    expected, _ = _gpu_by_gpu(bn, x, _in_turn(8, 2))
    torch.testing.assert_close(emulated(x), expected, rtol=1e-5, atol=1e-5)


def test_an_install_elsewhere_loads_the_kernel_built_before(tmp_path, monkeypatch) -> None:
    """tianfeng installed at another path against the same torch (a wheel beside the checkout:
    the same source text elsewhere) finds the checkout's build, and neither rebuilds the other's."""
    assert grouped_bn_kernel.kernel() is not None
    folder = grouped_bn_kernel.build_directory()
    built = {p.name: p.stat().st_mtime_ns for p in folder.glob("*.so")}
    elsewhere = tmp_path / "site-packages" / "tianfeng" / "grouped_bn.cpp"
    elsewhere.parent.mkdir(parents=True)
    elsewhere.write_bytes(grouped_bn_kernel.SOURCE.read_bytes())
    monkeypatch.setattr(grouped_bn_kernel, "SOURCE", elsewhere)
    monkeypatch.setattr(grouped_bn_kernel, "_loaded", {})
    _fresh_versions(monkeypatch)  # as in the other venv's process
    assert grouped_bn_kernel.build_directory() == folder
    assert grouped_bn_kernel.kernel() is not None
    assert {p.name: p.stat().st_mtime_ns for p in folder.glob("*.so")} == built


def test_each_torch_install_builds_into_a_folder_of_its_own(monkeypatch) -> None:
    """The build command names torch's headers by path, so ninja rebuilds a folder whose last
    build came from another torch install (another venv): two venvs sharing one folder would
    rebuild it in turn, a minute each time. Another install gets another folder."""
    from torch.utils.cpp_extension import include_paths

    assert grouped_bn_kernel.kernel() is not None
    folder = grouped_bn_kernel.build_directory()
    assert include_paths()[0] in (folder / "build.ninja").read_text()  # the build this folder holds
    monkeypatch.setattr(torch, "__file__", "/elsewhere/venv/lib/python3.11/site-packages/torch/__init__.py")
    elsewhere = grouped_bn_kernel.build_directory()
    assert elsewhere != folder and elsewhere.parent == folder.parent
    monkeypatch.undo()
    assert grouped_bn_kernel.build_directory() == folder


def test_a_compiled_model_traces_per_gpu_batchnorm_whole_and_computes_what_the_kernel_does() -> None:
    assert grouped_bn_kernel.kernel() is not None, "the per-GPU BatchNorm kernel did not build here"
    torch.manual_seed(0)
    model = per_gpu_bn.convert(nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 1)))
    per_gpu_bn.set_groups(model, 4)
    model = model.to(memory_format=torch.channels_last).train()
    compiled_copy = copy.deepcopy(model)
    x = torch.randn(8, 3, 6, 6).to(memory_format=torch.channels_last)
    # the kernel is opaque to torch.compile's tracer: it must not be called while tracing
    explained = torch._dynamo.explain(copy.deepcopy(model))(x)
    assert explained.graph_count == 1 and not explained.break_reasons, explained.break_reasons
    torch._dynamo.reset()
    compiled = torch.compile(compiled_copy, backend="aot_eager")  # traced forward and backward, no C++ build
    for net in (model, compiled):  # model: eager, through the kernel
        net(x).square().sum().backward()
    bn, traced_bn = model[1], compiled_copy[1]
    torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(traced_bn.weight.grad, bn.weight.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(compiled_copy[0].weight.grad, model[0].weight.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(traced_bn.running_var, bn.running_var, rtol=1e-5, atol=1e-6)
    assert int(traced_bn.num_batches_tracked) == int(bn.num_batches_tracked) == 2


def test_another_ninja_on_path_loads_the_build_without_rebuilding(tmp_path) -> None:
    """A shell without the venv active finds the system's ninja, another version, whose log reads
    the venv ninja's build as stale: the build is loaded without asking the build tool at all. A
    `ninja` that would record being run stands first on PATH."""
    import os
    import subprocess
    import sys

    assert grouped_bn_kernel.kernel() is not None
    folder = grouped_bn_kernel.build_directory()
    built = {p.name: p.stat().st_mtime_ns for p in folder.glob("*.so")}
    bin_dir, marker = tmp_path / "bin", tmp_path / "ninja-ran"
    bin_dir.mkdir()
    (bin_dir / "ninja").write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    (bin_dir / "ninja").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    out = subprocess.run([sys.executable, "-c", "from tianfeng.trainers.grouped_bn_kernel import kernel; "
                          "assert kernel() is not None"], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0 and "building" not in out.stderr, out.stderr
    assert not marker.exists()
    assert {p.name: p.stat().st_mtime_ns for p in folder.glob("*.so")} == built


def test_each_compiler_builds_into_a_folder_of_its_own(monkeypatch) -> None:
    folder = grouped_bn_kernel.build_directory()
    monkeypatch.setattr(grouped_bn_kernel, "compiler", lambda: "c++ (Debian 99.0.0) 99.0.0")
    assert grouped_bn_kernel.build_directory() != folder
