"""The launcher's options checked before anything is written: Slurm time limits, and options
that go only with a scheduler."""

from __future__ import annotations

import pytest

from tianfeng.launch.scheduler import LaunchError, SchedulerOptions
from tianfeng.launch.slurm import sbatch_directives, time_limit_s
from tianfeng.promotion.options import PromoteOptions
from tianfeng.trainers.config import ConfigError


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


def test_a_time_limit_below_the_predicted_run_is_said_with_both_numbers(caplog) -> None:
    from tianfeng.promotion.run import Launch, _warn_if_short

    launch = Launch(2, 8, launcher="slurm", options=SchedulerOptions(time="30"))
    with caplog.at_level("WARNING", logger="tianfeng.promote"):
        _warn_if_short(launch, {"seconds": 5400.0, "cluster": "16 x A100"})
        _warn_if_short(launch, {"seconds": 1200.0, "cluster": "16 x A100"})  # fits in 30 minutes: no word
    assert [r.getMessage() for r in caplog.records] == [
        "--time 30 (1800 s) is shorter than the full run's predicted 5400 s on 16 x A100: the job will reach "
        "its limit and be requeued from its last checkpoint"]


def test_the_ray_jobs_address_comes_from_the_flag_or_rays_own_variable(monkeypatch) -> None:
    from tianfeng.launch.ray_jobs import jobs_address

    monkeypatch.setenv("RAY_ADDRESS", "http://env-head:8265")
    assert jobs_address(SchedulerOptions(address="http://flag-head:8265")) == "http://flag-head:8265"
    assert jobs_address(SchedulerOptions()) == "http://env-head:8265"
    monkeypatch.delenv("RAY_ADDRESS")
    with pytest.raises(LaunchError, match="--launcher ray: needs --jobs-address"):
        jobs_address(SchedulerOptions())
