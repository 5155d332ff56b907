"""The gate every value passes on its way to a scheduler (tianfeng.launch.gate): a hostile value
is refused in one line before any script, directive or command holds it."""

from __future__ import annotations

import pytest

from tianfeng.core.errors import ConfigError, LaunchError
from tianfeng.launch import gate
from tianfeng.launch.job_options import SchedulerOptions
from tianfeng.launch.scheduler import JobState
from tianfeng.launch.slurm import array_state, sbatch_directives
from tianfeng.promotion.options import PromoteOptions

HOSTILE = ["x\ntouch pwned", "x;touch pwned", "$(touch pwned)", "`touch pwned`", "a b", "x\rtouch", "--user=root", ""]


@pytest.mark.parametrize("field", ["partition", "account", "qos"])
@pytest.mark.parametrize("value", HOSTILE)
def test_a_hostile_scheduler_name_never_reaches_a_directive(tmp_path, field: str, value: str) -> None:
    options = SchedulerOptions(**{field: value})
    if not value:  # empty: the directive is left out, not written empty
        assert not any(f"--{field}=" in line for line in sbatch_directives(options, tmp_path))
        return
    with pytest.raises(LaunchError) as info:
        sbatch_directives(options, tmp_path)
    assert f"--{field}: " in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("value", ["x\ntouch pwned", "a b", "$(id)", "-x"])
def test_a_hostile_job_name_or_memory_is_refused(tmp_path, value: str) -> None:
    for options, flag in ((SchedulerOptions(job_name=value), "--job-name"), (SchedulerOptions(mem=value), "--mem")):
        with pytest.raises(LaunchError, match=f"^{flag}: "):
            sbatch_directives(options, tmp_path)


def test_every_typed_option_lands_as_one_directive(tmp_path) -> None:
    lines = sbatch_directives(SchedulerOptions(partition="gpu", account="proj-1", qos="high", time="1-02:00:00",
                                               job_name="resnet.lb", mem="64G", cpus_per_task=8), tmp_path)
    assert lines[4:] == ["#SBATCH --partition=gpu", "#SBATCH --account=proj-1", "#SBATCH --qos=high",
                         "#SBATCH --time=1-02:00:00", "#SBATCH --job-name=resnet.lb", "#SBATCH --mem=64G",
                         "#SBATCH --cpus-per-task=8"]


@pytest.mark.parametrize("folder", ["runs dir", "runs$HOME", "runs%j", "runs\nx"])
def test_a_runs_folder_the_directives_cannot_hold_is_refused(tmp_path, folder: str) -> None:
    with pytest.raises(LaunchError, match="^--runs-dir: "):
        sbatch_directives(SchedulerOptions(), tmp_path / folder)


@pytest.mark.parametrize("text", ["99999999", "1:99:99", "1-24:00:00", "0", "0:0", "400-00:00:00", "5:60", "4:00:00\n"])
def test_time_limits_out_of_range_are_refused(text: str) -> None:
    with pytest.raises(LaunchError, match="^--time: must (be a Slurm time limit|not hold control characters)"):
        gate.slurm_time_s(text)


def test_a_limit_within_the_checkpoint_signal_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^--time: 2 \(120 s\) leaves no time to train"):
        PromoteOptions().changed(launcher="slurm", nodes=1, gpus_per_node=1, time="2").checked(1)
    PromoteOptions().changed(launcher="slurm", nodes=1, gpus_per_node=1, time="3").checked(1)


@pytest.mark.parametrize(("changes", "flag"), [
    ({"nodes": 0, "gpus_per_node": 1, "dry_run": True}, "--nodes"),
    ({"nodes": 2, "gpus_per_node": 0}, "--gpus-per-node"),
    ({"nodes": 2, "gpus_per_node": 1, "min_nodes": 0}, "--min-nodes"),
    ({"nodes": 2, "gpus_per_node": 1, "launcher": "slurm", "account": "x\ntouch pwned"}, "--account"),
    ({"nodes": 2, "gpus_per_node": 1, "launcher": "slurm", "account": "proj_a"}, None),
])
def test_promote_refuses_counts_below_one_and_hostile_accounts(changes: dict, flag: str | None) -> None:
    options = PromoteOptions().changed(**changes)
    if flag is None:
        options.checked(1)
        return
    with pytest.raises(ConfigError) as info:
        options.checked(1)
    assert str(info.value).startswith(f"{flag}: ") and "\n" not in str(info.value)


@pytest.mark.parametrize(("launcher", "value"), [
    ("slurm", "--user=root"), ("slurm", "12 13"), ("slurm", "-1"), ("slurm", "0"), ("slurm", "12\n"),
    ("ray", "--all"), ("ray", "tianfeng-xyz"), ("kube", "12")])
def test_a_job_id_no_scheduler_gives_is_refused(launcher: str, value: str) -> None:
    with pytest.raises(LaunchError, match="refusing to pass it to the scheduler"):
        gate.job_id(launcher, value)


@pytest.mark.parametrize(("launcher", "value"), [("slurm", "42"), ("slurm", "42_3"), ("ray", "tianfeng-0123456789ab"),
                                                 ("ray", "raysubmit_AbC123")])
def test_job_ids_the_schedulers_give_pass(launcher: str, value: str) -> None:
    assert gate.job_id(launcher, value) == value


def test_the_slurm_commands_refuse_a_planted_job_id_before_running() -> None:
    from tianfeng.launch.slurm import Slurm

    for call in (Slurm().cancel, Slurm().state):
        with pytest.raises(LaunchError, match="'--user=root'"):
            call("--user=root")


def _tasks(*states: str) -> list[JobState]:
    return [JobState(s, "why" if s != "running" else "", 0 if s == "completed" else None) for s in states]


@pytest.mark.parametrize(("tasks", "folded"), [
    (("running", "cancelled"), "running"),  # one task cancelled, the other still runs
    (("cancelled", "running"), "running"),
    (("pending", "completed"), "pending"),
    (("completed", "cancelled"), "cancelled"),
    (("cancelled", "failed", "completed"), "failed"),
    (("completed", "completed"), "completed"),
])
def test_an_arrays_state_folds_every_task(tasks: tuple[str, ...], folded: str) -> None:
    assert array_state(_tasks(*tasks)).state == folded


@pytest.mark.parametrize(("check", "allowed"), [(gate.slurm_name, "a Slurm name (letters, digits"),
                                                (gate.job_name, "letters, digits, '_', '.', '+', '-'"),
                                                (gate.memory, "a size such as 64G")])
def test_a_refused_name_or_size_says_what_is_allowed_and_what_it_got(check, allowed: str) -> None:
    with pytest.raises(LaunchError) as info:
        check("--flag", "a b")
    assert str(info.value).startswith(f"--flag: must be {allowed}") and str(info.value).endswith("got 'a b'")
    assert check("--flag", "64G") == "64G"
