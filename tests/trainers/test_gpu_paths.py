"""The branches that only a GPU machine takes, run here with the device abstracted: what they
call, in which order and with which arguments. (No GPU is lent to this project: what these
cannot show, scripts/gpu_check.sh is for, on the first GPU machine.)"""

from __future__ import annotations

import torch

from tianfeng.hpo.running.runner import worker_gpus
from tianfeng.trainers import distributed
from tianfeng.trainers.data import dali
from tianfeng.trainers.precision import resolve_mode


def test_auto_precision_on_a_gpu_ignores_emulated_bf16(monkeypatch) -> None:
    cuda = torch.device("cuda", 0)
    # a V100: bf16 only through emulation (torch's default answer counts it)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: including_emulation)
    assert resolve_mode("auto", cuda)[0] == "fp16"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)  # A100, H100
    assert resolve_mode("auto", cuda)[0] == "bf16"


def test_each_rank_binds_its_gpu_before_joining_the_group(monkeypatch) -> None:
    calls = []
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "3")
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: calls.append(("set_device", device)))
    monkeypatch.setattr(distributed.dist, "init_process_group",
                        lambda **kw: calls.append(("init", kw["backend"], kw["device_id"])))
    distributed.init("auto", torch.device("cuda", 3))
    assert calls == [("set_device", torch.device("cuda", 3)), ("init", "nccl", torch.device("cuda", 3))]
    calls.clear()
    distributed.init("auto", torch.device("cpu"))
    assert calls == [("init", "gloo", None)]


def test_search_workers_get_a_gpu_each_round_robin() -> None:
    assert worker_gpus(3, visible="4,5") == ["4", "5", "4"]
    assert worker_gpus(2, visible=None, count=0) == [None, None]
    assert worker_gpus(2, visible=None, count=4) == ["0", "1"]


def test_ray_trials_get_a_gpu_where_the_cluster_has_them() -> None:
    # imported here: without Ray (an optional extra) this test fails, the rest of the module runs
    from tianfeng.hpo.running.ray_backend import RayOptions, default_gpus

    assert default_gpus(RayOptions(), {"CPU": 64, "GPU": 8}).gpus_per_trial == 1
    assert default_gpus(RayOptions(), {"CPU": 2}).gpus_per_trial == 0
    assert default_gpus(RayOptions(gpus_per_trial=0.5), {"GPU": 8}).gpus_per_trial == 0.5


def test_dali_threads_share_the_cores_between_a_nodes_ranks(monkeypatch) -> None:
    monkeypatch.setattr(dali.os, "sched_getaffinity", lambda pid: set(range(64)))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert dali.dali_threads() == 8
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert dali.dali_threads() == 64


def test_a_gpu_checkpoint_loads_on_the_cpu_first(tmp_path, monkeypatch) -> None:
    """torch.load maps every tensor to the CPU (a CUDA RNG state would be refused by
    torch.set_rng_state); the model and optimizer then move what they load to their device."""
    from tianfeng.trainers import checkpoint

    seen = {}
    real_load = torch.load

    def spy(path, **kw):
        seen.update(kw)
        return real_load(path, **kw)

    checkpoint.save(tmp_path, {"model": {}, "optimizer": {}, "rng": checkpoint.rng_state(), "position": {},
                               "config": {}, "scaler": {}})
    monkeypatch.setattr(torch, "load", spy)
    payload = checkpoint.load(tmp_path)
    assert seen == {"map_location": "cpu", "weights_only": True}
    checkpoint.restore_rng(payload["rng"])  # plain values and CPU tensors only


def test_gpu_check_says_there_is_no_gpu_and_runs_nothing() -> None:
    import subprocess
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    # five checks of up to 10 minutes each on a GPU machine; seconds without one
    out = subprocess.run(["bash", str(repo / "scripts" / "gpu_check.sh")], capture_output=True, text=True,
                         timeout=3600 if torch.cuda.is_available() else 120)
    if torch.cuda.is_available():  # on a GPU machine this test is the script itself: every check passes
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        assert "FAIL" not in out.stdout and out.stdout.count("PASS") >= 5, out.stdout[-3000:]
    else:
        assert out.returncode == 0 and "no CUDA GPU visible" in out.stdout and "nothing was run" in out.stdout
        assert "PASS" not in out.stdout and "FAIL" not in out.stdout


def test_the_dali_extra_is_built_for_the_cuda_of_the_pinned_torch() -> None:
    """DALI's wheels are per CUDA major version; the extra's must be the pinned torch's, or DALI's
    GPU decode and torch load two CUDA runtimes on one GPU."""
    import re
    import tomllib
    from pathlib import Path

    import torch

    root = Path(__file__).resolve().parents[2]
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    pins = {m.group(1) for group in ("dali", "dev") for req in extras[group]
            if (m := re.match(r"nvidia-dali-cuda(\d+)", req))}
    pinned_torch = re.search(r"^torch==\S+", (root / "constraints.txt").read_text(), re.MULTILINE)
    assert pinned_torch and torch.__version__.split("+")[0] == pinned_torch.group(0).split("==")[1]
    cuda = torch.version.cuda  # this install is the pinned build: its CUDA is the pin's
    assert cuda is not None, "the pinned torch is a CUDA build"
    assert pins == {f"{cuda.split('.')[0]}0"}, (pins, cuda)
