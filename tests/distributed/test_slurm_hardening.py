"""The cluster paths under hostile and awkward input, on a real Slurm started on this machine
(tests/slurm.py): no value reaches the batch shell unchecked, a planted job id is refused, and a
run is never left half-recorded (a second promote of a live run, a job array with one task
cancelled, a refused submission, a cancelled run's epochs)."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.distributed.submitted_runs import (
    cli,
    promote,
    runs,
    scontrol_job,
    searched_study,
    study_copy,
    wait_until,
    with_venv_path,
)
from tests.search.conftest import TINY_SPACE, write_space
from tests.slurm import slurm_cluster
from tianfeng.launch.slurm import Slurm
from tianfeng.storage.runs import RunRecordStatus, RunStore

pytestmark = [pytest.mark.slow, pytest.mark.alone, pytest.mark.timeout(1200)]
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED")


@pytest.fixture(scope="module")
def slurm_env() -> Iterator[dict[str, str]]:
    with slurm_cluster() as env:
        yield with_venv_path(env)


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return searched_study(tmp_path_factory.mktemp("hardening-study"))


def _sleeper(env: dict[str, str], *args: str) -> str:
    """A job of root's that a stray `scancel --user=root` would end."""
    # its log nowhere: by default sbatch writes slurm-<job>.out into the folder it was called from
    out = subprocess.run(["sbatch", "--parsable", "--output=/dev/null", *args, "--wrap", "sleep 300"],
                         capture_output=True, text=True, env=env, check=True)
    return out.stdout.strip().split(";")[0]


@pytest.mark.parametrize(("flag", "value"), [
    ("--account", "x\ntouch {marker}"), ("--partition", "debug\ntouch {marker}"), ("--qos", "normal;touch {marker}"),
    ("--job-name", "x\ntouch {marker}"), ("--time", "20\ntouch {marker}"), ("--mem", "1G\ntouch {marker}"),
    ("--sbatch-arg", "--comment=x\ntouch {marker}"), ("--cpus-per-task", "0"),
])
def test_a_hostile_value_is_refused_before_anything_is_written(slurm_env, searched, tmp_path, flag, value) -> None:
    marker = tmp_path / "pwned"
    storage = study_copy(searched, tmp_path, "hostile")
    out = promote(slurm_env, tmp_path, storage, "slurm", f"{flag}={value.format(marker=marker)}")
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith(f"tianfeng: error: {flag}: "), out.stderr
    assert RunStore(storage).jobs() == {} and RunStore(storage).runs() == []
    assert not list(Path(storage.removeprefix("sqlite:///")).parent.glob("runs/*/*/launch/sbatch.sh"))
    assert not marker.exists()


def test_a_runs_folder_the_directives_cannot_hold_is_refused_and_nothing_planned(slurm_env, searched, tmp_path) -> None:
    storage = study_copy(searched, tmp_path, "spaced")
    out = cli(slurm_env, tmp_path, "promote", "0", "--study", "s", "--storage", storage, "--nodes", "1",
              "--gpus-per-node", "2", "--device", "cpu", "--launcher", "slurm", "--runs-dir", str(tmp_path / "my runs"))
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "--runs-dir: " in out.stderr, out.stderr
    assert all(r["status"] != RunRecordStatus.PLANNED for r in RunStore(storage).runs())


def test_time_limits_beyond_the_partitions_maxtime_are_refused(slurm_env, searched, tmp_path) -> None:
    subprocess.run(["scontrol", "update", "PartitionName=far", "MaxTime=30"], check=True, env=slurm_env)
    storage = study_copy(searched, tmp_path, "maxtime")
    out = promote(slurm_env, tmp_path, storage, "slurm", "--partition", "far", "--time", "1:00:00")
    assert out.returncode == 2 and "--time: 1:00:00 is beyond partition far's MaxTime 30:00" in out.stderr, out.stderr
    assert RunStore(storage).runs() == []


def test_a_planted_job_id_is_refused_and_no_other_job_is_touched(slurm_env, searched, tmp_path) -> None:
    storage = study_copy(searched, tmp_path, "planted")
    bystander = _sleeper(slurm_env)
    store = RunStore(storage)
    run_id, _ = store.open_run(study="s", trial_number=0, config_hash="x", kind="promote",
                               run_dir=str(tmp_path / "run"), config_yaml="", proxy_score=None)
    store.record_job(run_id, launcher="slurm", job_id="--user=root", state="running")
    store.update(run_id, status=RunRecordStatus.SUBMITTED)
    out = cli(slurm_env, tmp_path, "runs", "--storage", storage, "--cancel", str(run_id))
    assert out.returncode == 2 and "job id '--user=root'" in out.stderr and out.stderr.count("\n") == 1, out.stderr
    listed = cli(slurm_env, tmp_path, "runs", "--storage", storage, "--json")  # the other commands still work
    assert listed.returncode == 0 and "job id '--user=root'" in listed.stderr, listed.stderr
    assert scontrol_job(slurm_env, bystander)["JobState"] in ("RUNNING", "PENDING")
    subprocess.run(["scancel", bystander], env=slurm_env, check=True)


def test_an_arrays_state_is_running_while_any_task_runs(slurm_env, monkeypatch) -> None:
    monkeypatch.setenv("SLURM_CONF", slurm_env["SLURM_CONF"])  # Slurm() asks scontrol from this process
    job = _sleeper(slurm_env, "--array=0-1", "--cpus-per-task=1")
    wait_until(lambda: Slurm().state(job).state == "running", f"array {job} running")
    subprocess.run(["scancel", f"{job}_1"], env=slurm_env, check=True)
    wait_until(lambda: scontrol_job(slurm_env, f"{job}_1").get("JobState") == "CANCELLED", "task 1 cancelled")
    assert Slurm().state(job).state == "running"  # task 0 still runs
    subprocess.run(["scancel", job], env=slurm_env, check=True)
    wait_until(lambda: Slurm().state(job).state == "cancelled", f"array {job} cancelled")


def test_a_refused_search_submission_creates_no_study(slurm_env, tmp_path) -> None:
    space = write_space(tmp_path, dict(TINY_SPACE))
    storage = f"sqlite:///{tmp_path / 'search.db'}"
    args = ["search", "--space", str(space), "--storage", storage, "--study", "d4", "--trials", "2",
            "--launcher", "slurm", "--workers", "1", "--runs-dir", str(tmp_path / "runs")]
    bad = cli(slurm_env, tmp_path, *args, "--partition", "nosuch")
    assert bad.returncode == 2 and "--partition: nosuch: no such partition" in bad.stderr, bad.stderr
    throttled = cli(slurm_env, tmp_path, *args, "--partition", "debug", "--array-throttle", "1")
    assert throttled.returncode == 0, throttled.stderr[-3000:]  # the corrected command, as it was, not "already exists"
    script = (tmp_path / "runs" / "d4" / "slurm" / "search-workers.sh").read_text()
    assert "#SBATCH --array=0-0%1\n" in script
    job = json.loads(subprocess.run(
        [str(Path(__import__("sys").executable)), "-c",
         f"import optuna, json; print(json.dumps(optuna.load_study(study_name='d4', storage='{storage}')"
         ".user_attrs['workers_job']))"], capture_output=True, text=True, check=True).stdout)
    subprocess.run(["scancel", job["job"]], env=slurm_env, check=True)


def test_a_second_promote_of_a_live_run_leaves_it_submitted_then_cancel_keeps_its_epochs(slurm_env, searched,
                                                                                            tmp_path) -> None:
    storage = study_copy(searched, tmp_path, "live")
    marker = tmp_path / "pwned"
    # a value sbatch takes as it is: it reaches sbatch as one argument, never a shell
    extra = ("--set", "phases.0.epochs=200", "--sbatch-arg", f"--comment=$(touch {marker})", "--json")
    first = promote(slurm_env, tmp_path, storage, "slurm", *extra)
    assert first.returncode == 0, first.stderr[-3000:]
    job, launch = json.loads(first.stdout)["job"], Path(json.loads(first.stdout)["launch"])
    metrics = launch.parent / "metrics.jsonl"
    wait_until(lambda: metrics.exists() and len(metrics.read_text().splitlines()) >= 2, f"two epochs of job {job}")
    script = (launch / "sbatch.sh").read_text()
    second = promote(slurm_env, tmp_path, storage, "slurm", *extra)
    assert second.returncode == 0, second.stderr[-3000:]
    again = json.loads(second.stdout)
    assert again["status"] == "submitted" and again["job"] == job, again
    assert (launch / "sbatch.sh").read_text() == script  # the live job's plan is not rewritten
    run = runs(slurm_env, tmp_path, storage)[0]
    assert run["status"] == "submitted" and run["job"]["job_id"] == job, run
    assert run["job"]["log"] == str(launch / f"slurm-{job}.out") and Path(run["job"]["log"]).exists()
    out = cli(slurm_env, tmp_path, "runs", "--storage", storage, "--cancel", str(run["id"]), "--json")
    assert out.returncode == 0, out.stderr[-3000:]
    cancelled = runs(slurm_env, tmp_path, storage)[0]
    assert cancelled["status"] == "interrupted" and len(cancelled["epochs"]) >= 2, cancelled
    assert cancelled["checkpoint"] and Path(cancelled["checkpoint"]).exists()
    assert scontrol_job(slurm_env, job)["JobState"] == "CANCELLED"
    assert not marker.exists()
    time.sleep(0.5)
