"""The launcher's options checked before anything is written: Slurm time limits, and options
that go only with a scheduler."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tianfeng.core.errors import ConfigError, LaunchError
from tianfeng.launch.job_options import SchedulerOptions
from tianfeng.launch.slurm import sbatch_directives, time_limit_s
from tianfeng.promotion.options import PromoteOptions


@pytest.mark.parametrize(("text", "seconds"), [
    ("30", 1800), ("30:15", 1815), ("4:00:00", 14400), ("2-0", 172800), ("1-2:30", 95400), ("1-02:03:04", 93784),
])
def test_slurm_time_limits_in_every_form_slurm_takes(text: str, seconds: int) -> None:
    assert time_limit_s(text) == seconds


@pytest.mark.parametrize("text", ["", "4h", "1:2:3:4", "-5", "a-1"])
def test_bad_time_limits_are_refused(text: str) -> None:
    with pytest.raises(LaunchError, match="--time: must be a Slurm time limit"):
        time_limit_s(text)


def test_the_batch_script_is_requeueable_and_signalled_before_its_limit(tmp_path) -> None:
    lines = sbatch_directives(SchedulerOptions(partition="gpu", account="proj", time="4:00:00", signal_s=90), tmp_path)
    assert lines == [f"#SBATCH --output={tmp_path}/slurm-%j.out", "#SBATCH --open-mode=append", "#SBATCH --requeue",
                     "#SBATCH --signal=B:USR1@90", "#SBATCH --partition=gpu", "#SBATCH --account=proj",
                     "#SBATCH --time=4:00:00"]


@pytest.mark.parametrize(("changes", "expected"), [
    ({"launcher": "slurm"}, "--launcher: slurm needs --nodes and --gpus-per-node"),
    ({"launcher": "kube", "nodes": 2, "gpus_per_node": 8}, "--launcher: must be one of local, slurm, ray; got 'kube'"),
    ({"partition": "gpu", "nodes": 2, "gpus_per_node": 8}, "--partition: goes with --launcher slurm"),
    ({"time": "4h", "launcher": "slurm", "nodes": 2, "gpus_per_node": 8}, "--time: must be a Slurm time limit"),
    ({"time": "30", "launcher": "ray", "nodes": 2, "gpus_per_node": 8}, "--time: goes with --launcher slurm"),
    ({"jobs_address": "http://head:8265", "launcher": "slurm", "nodes": 2, "gpus_per_node": 8},
     "--jobs-address: goes with --launcher ray"),
    ({"launcher": "ray"}, "--launcher: ray needs --nodes and --gpus-per-node"),
])
def test_promotion_launcher_options_are_checked(changes: dict, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        PromoteOptions().changed(**changes).checked(3)
    assert expected in str(info.value) and "\n" not in str(info.value)


def test_a_time_limit_below_the_runs_own_prediction_is_refused_unless_it_is_meant() -> None:
    """The run's own prediction: its config on the space's devices at the launch's world (here two
    V100 nodes, far slower than the 128 GPUs the search predicted for), not the trial's."""
    from tianfeng.hpo.running.objective import predict_config
    from tianfeng.hpo.space.materialize import build_config
    from tianfeng.hpo.space.read import load_space
    from tianfeng.promotion.run import Launch, _refuse_if_short

    space = load_space("tianfeng/spaces/imagenet_resnet50.yaml", data="digits")  # ImageNet-sized by its cluster
    full = build_config(space, space.priors[0].params, "target")
    on_two = predict_config(full, replace(space.cluster, gpus=16, gpus_per_node=8), space, memory=False).seconds
    assert on_two > 2 * predict_config(full, space.cluster, space).seconds
    minutes = int(on_two // 60)  # a limit just under the run on two nodes, above the search's prediction
    short = Launch(2, 8, options=SchedulerOptions(launcher="slurm", time=str(minutes)))
    with pytest.raises(LaunchError) as info:
        _refuse_if_short(full, space, short)
    message = str(info.value)
    assert message.startswith(f"--time: {minutes} ({minutes * 60} s) is shorter than this run's predicted "
                              f"{on_two:.0f} s on 2 x 8 v100") and "--requeue-at-limit" in message, message
    _refuse_if_short(full, space, replace(short, requeue_at_limit=True))  # meant: trains in pieces
    _refuse_if_short(full, space, replace(short, device="cpu"))  # no prediction of a CPU run
    _refuse_if_short(full, space, replace(short, options=SchedulerOptions(launcher="slurm", time=str(minutes + 3))))


def test_slurm_times_are_written_in_slurms_format_rounded_up_to_the_minute() -> None:
    from tianfeng.launch.gate import slurm_time_s
    from tianfeng.launch.slurm import slurm_time

    assert [slurm_time(s) for s in (59, 60, 3601, 86400 + 61)] == ["00:01:00", "00:01:00", "01:01:00", "1-00:02:00"]
    assert all(slurm_time_s(slurm_time(s)) >= s for s in (1, 119, 7261, 200000))


def test_the_ray_jobs_address_comes_from_the_flag_or_rays_own_variable(monkeypatch) -> None:
    from tianfeng.launch.ray_jobs import jobs_address

    monkeypatch.setenv("RAY_ADDRESS", "http://env-head:8265")
    assert jobs_address(SchedulerOptions(jobs_address="http://flag-head:8265")) == "http://flag-head:8265"
    assert jobs_address(SchedulerOptions()) == "http://env-head:8265"
    monkeypatch.delenv("RAY_ADDRESS")
    with pytest.raises(LaunchError, match="--launcher ray: needs --jobs-address"):
        jobs_address(SchedulerOptions())


def test_a_ray_working_dir_is_uploaded_as_the_jobs_runtime_env_and_checked_first(tmp_path, monkeypatch) -> None:
    """With --working-dir Ray uploads the folder to every node and starts the job and its workers
    in their copy (tianfeng's code folder); without it the code folder travels as PYTHONPATH."""
    from tianfeng.launch.ray_jobs import runtime_env

    code = tmp_path / "code"
    code.mkdir()
    assert runtime_env(SchedulerOptions(working_dir=str(code))) == {"working_dir": str(code.resolve())}
    monkeypatch.setenv("PYTHONPATH", "/shared/models")
    assert runtime_env(SchedulerOptions()) == {"env_vars": {"PYTHONPATH": "/shared/models"}}
    monkeypatch.delenv("PYTHONPATH")
    assert runtime_env(SchedulerOptions()) is None
    ray = {"launcher": "ray", "nodes": 1, "gpus_per_node": 1}
    PromoteOptions().changed(**ray, working_dir=str(code)).checked(3)
    for changes, expected in (({**ray, "working_dir": str(tmp_path / "nosuch")}, "--working-dir: "),
                              ({"launcher": "slurm", "nodes": 1, "gpus_per_node": 1, "working_dir": str(code)},
                               "--working-dir: goes with --launcher ray")):
        with pytest.raises(LaunchError) as info:
            PromoteOptions().changed(**changes).checked(3)
        assert str(info.value).startswith(expected) and "\n" not in str(info.value), info.value


def test_one_options_type_and_one_batch_script_writer() -> None:
    """A scheduler value has one type from the flag to the script, and one writer holds the
    requeue trap: a second options class declaring `partition`, or a second script that requeues,
    fails here."""
    import ast

    package = Path(__file__).resolve().parents[2] / "tianfeng"
    declaring, requeuing = [], []
    for path in package.rglob("*.py"):
        text = path.read_text()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and any(isinstance(s, ast.AnnAssign) and ast.unparse(s.target) ==
                                                      "partition" for s in node.body):
                declaring.append(f"{path.name}:{node.name}")
        if "scontrol requeue" in text:
            requeuing.append(path.name)
    assert declaring == ["job_options.py:SchedulerOptions"]
    assert requeuing == ["slurm.py"]
