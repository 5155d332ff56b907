"""Promoted runs on a real Slurm cluster started on this machine (tests/slurm.py): submitted,
watched through scontrol, collected into the study by `tianfeng runs`; a job signalled before its
time limit is requeued and resumes from its checkpoint to the uninterrupted run's metrics; the
scheduler's refusals are one line, exit 2, nothing recorded."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.distributed.submitted_runs import (
    cli,
    promote,
    runs,
    runs_dir,
    scontrol_job,
    searched_study,
    study_copy,
    wait_until,
    with_venv_path,
)
from tests.search.conftest import TINY_SPACE, write_space
from tests.slurm import slurm_cluster
from tianfeng.storage.runs import RunStore

# one Slurm for the module; its jobs take the machine; each test waits for whole jobs
pytestmark = [pytest.mark.slow, pytest.mark.alone, pytest.mark.timeout(1200)]
EPOCHS = 8  # the run the signal cuts: long enough to be cut mid-run and still be running after


@pytest.fixture(scope="module")
def slurm_env() -> Iterator[dict[str, str]]:
    with slurm_cluster() as env:
        yield with_venv_path(env)


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return searched_study(tmp_path_factory.mktemp("slurm-study"))


def _promote(env, tmp_path: Path, storage: str, *extra: str) -> subprocess.CompletedProcess:
    return promote(env, tmp_path, storage, "slurm", *extra)


def _over(env, job: str) -> bool:
    """Whether Slurm says the job ended (a requeued job is not over)."""
    return scontrol_job(env, job).get("JobState") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL",
                                                   "OUT_OF_MEMORY", "PREEMPTED")


def test_a_submitted_promotion_is_watched_and_collected_into_the_study(slurm_env, searched, tmp_path) -> None:
    storage = study_copy(searched, tmp_path, "plain")
    out = _promote(slurm_env, tmp_path, storage, "--time", "20", "--json")
    assert out.returncode == 0, out.stderr[-3000:]
    submitted = json.loads(out.stdout)
    assert submitted["status"] == "submitted" and submitted["launcher"] == "slurm" and submitted["job"].isdigit()
    job = submitted["job"]
    script = (Path(submitted["launch"]) / "sbatch.sh").read_text()
    assert "#SBATCH --requeue" in script and "#SBATCH --signal=B:USR1@120" in script and "#SBATCH --time=20" in script
    assert "--max-restarts=3" in script
    wait_until(lambda: _over(slurm_env, job), f"ended job {job}")
    run = runs(slurm_env, tmp_path, storage)[0]
    # collected by `tianfeng runs` with no second promote: the engine's epochs and the full score
    assert run["status"] == "completed" and run["final_score"] is not None, run
    assert len(run["epochs"]) == 3 and run["job"]["job_id"] == job and run["job"]["state"] == "completed"
    assert run["final_score"] == json.loads((Path(run["run_dir"]) / "result.json").read_text())["final"]["val_top1"]
    # the scheduler's own view agrees
    view = scontrol_job(slurm_env, job)
    assert view["JobState"] == "COMPLETED" and view["ExitCode"] == "0:0" and view["Requeue"] == "1"
    assert view["TimeLimit"] == "00:20:00"
    log = Path(submitted["launch"]) / f"slurm-{job}.out"
    assert "completed: val_top1" in log.read_text()


@pytest.fixture(scope="module")
def uncut(slurm_env, searched, tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """The epochs of the longer promotion run through Slurm without a cut: what a cut one must end with."""
    tmp_path = tmp_path_factory.mktemp("uncut")
    whole_db = study_copy(searched, tmp_path, "whole")
    out = _promote(slurm_env, tmp_path, whole_db, "--set", f"phases.0.epochs={EPOCHS}", "--json")
    assert out.returncode == 0, out.stderr[-3000:]
    wait_until(lambda: _over(slurm_env, json.loads(out.stdout)["job"]), "ended the uncut job")
    whole = runs(slurm_env, tmp_path, whole_db)[0]
    assert whole["status"] == "completed"
    return whole["epochs"]


@pytest.mark.parametrize("cut_by", ["pre-timeout signal", "scontrol requeue"])
def test_a_job_cut_mid_run_is_requeued_and_resumes_exactly(slurm_env, searched, uncut, tmp_path, cut_by) -> None:
    """Two ways a job is cut and requeued: the signal Slurm sends the batch shell before the time
    limit (--signal=B:USR1@120; the shell's trap requeues it), and `scontrol requeue` (an admin,
    or a preemption with PreemptMode=REQUEUE: SIGTERM to every process, then the job queued
    again). Either way the engine checkpoints and the job, started again, resumes there."""
    cut_db = study_copy(searched, tmp_path, "cut")
    out = _promote(slurm_env, tmp_path, cut_db, "--set", f"phases.0.epochs={EPOCHS}", "--json")
    assert out.returncode == 0, out.stderr[-3000:]
    submitted = json.loads(out.stdout)
    job, metrics = submitted["job"], Path(submitted["launch"]).parent / "metrics.jsonl"

    def epochs_done() -> int:
        return metrics.read_text().count("\n") if metrics.exists() else 0

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and epochs_done() < 2:
        time.sleep(0.1)
    if cut_by == "pre-timeout signal":
        subprocess.run(["scancel", "--batch", "--signal=USR1", job], check=True, env=slurm_env)
    else:
        subprocess.run(["scontrol", "requeue", job], check=True, env=slurm_env)
    assert 2 <= epochs_done() < EPOCHS, epochs_done()
    live = runs(slurm_env, tmp_path, cut_db)[0]  # requeued, so not over: the job's state and epochs so far
    assert live["status"] == "submitted" and live["job"]["state"] in ("pending", "running"), live
    assert len(live["epochs"]) >= 2 and live["job"]["job_id"] == job
    wait_until(lambda: _over(slurm_env, job), f"ended requeued job {job}", timeout_s=420)
    cut = runs(slurm_env, tmp_path, cut_db)[0]
    assert cut["status"] == "completed" and cut["job"]["job_id"] == job
    assert int(scontrol_job(slurm_env, job)["Restarts"]) >= 1  # the same job, started again
    log = (Path(cut["run_dir"]) / "launch" / f"slurm-{job}.out").read_text()
    assert "resumed from" in log
    if cut_by == "pre-timeout signal":
        assert "requeued, it resumes from the last checkpoint" in log
    # resumed from its checkpoint: the uninterrupted run's metrics, epoch by epoch
    assert [e["epoch"] for e in cut["epochs"]] == list(range(1, EPOCHS + 1))
    for a, b in zip(cut["epochs"], uncut, strict=True):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-6) and a["val_top1"] == b["val_top1"]


def test_the_schedulers_refusals_are_one_line_and_record_nothing(slurm_env, searched, tmp_path) -> None:
    storage = study_copy(searched, tmp_path, "bad")
    out = _promote(slurm_env, tmp_path, storage, "--partition", "nosuch")
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "--partition: nosuch: no such partition; the cluster has debug, far" in out.stderr
    # sbatch's own refusal, after the transfer is shown: its message is the last line
    out = _promote(slurm_env, tmp_path, storage, "--sbatch-arg=--partition=other")  # past our own check: the controller refuses it
    assert out.returncode == 2 and out.stderr.splitlines()[-1].startswith("tianfeng: error: sbatch: "), out.stderr
    assert RunStore(storage).jobs() == {}
    assert all(r["status"] != "submitted" for r in RunStore(storage).runs())
    out = _promote({**slurm_env, "PATH": "/nonexistent"}, tmp_path, storage)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "sbatch is not on PATH" in out.stderr
    # search workers that may run on another machine, on a SQLite study: refused before it exists
    search_db = tmp_path / "workers.db"
    out = cli(slurm_env, tmp_path, "search", "--space", str(write_space(tmp_path, dict(TINY_SPACE))),
              "--storage", f"sqlite:///{search_db}", "--study", "far", "--launcher", "slurm", "--workers", "2",
              "--partition", "far", "--runs-dir", str(tmp_path / "runs"))
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "--storage: a SQLite study cannot take workers on other machines (far1)" in out.stderr
    assert not search_db.exists()


def test_search_workers_run_as_a_job_array_and_a_signalled_task_requeues_its_trial(slurm_env, tmp_path) -> None:
    """`tianfeng search --launcher slurm --workers 2`: the study is created here and two array
    tasks spend its budget; the pre-timeout signal stops each task's worker as Ctrl-C does (its
    cut trial queued again from its checkpoint) and requeues the task, which continues it."""
    import optuna
    from optuna.trial import TrialState

    space = copy.deepcopy(TINY_SPACE)
    space["base"]["phases"][0]["epochs"] = 12  # trials long enough to be cut mid-run
    space_file = write_space(tmp_path, space)
    storage = f"sqlite:///{tmp_path / 'search.db'}"
    out = cli(slurm_env, tmp_path, "search", "--space", str(space_file), "--storage", storage, "--study", "arr",
               "--fidelity", "target", "--trials", "4", "--sampler", "random", "--pruner", "none",
               "--launcher", "slurm", "--workers", "2", "--time", "20", "--runs-dir", str(tmp_path / "runs"))
    assert out.returncode == 0, out.stderr[-3000:]
    study = optuna.load_study(study_name="arr", storage=storage)
    job = study.user_attrs["workers_job"]
    assert job["launcher"] == "slurm" and job["workers"] == 2 and f"job {job['job']}" in out.stdout

    def running_with_epochs() -> bool:
        trials = optuna.load_study(study_name="arr", storage=storage).get_trials(deepcopy=False)
        return any(t.state == TrialState.RUNNING and len(t.intermediate_values) >= 2 for t in trials)

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not running_with_epochs():
        time.sleep(0.2)
    assert running_with_epochs()
    subprocess.run(["scancel", "--batch", "--signal=USR1", job["job"]], check=True, env=slurm_env)  # every task

    def tasks() -> list[dict[str, str]]:
        out = subprocess.run(["scontrol", "show", "job", "-o", job["job"]], capture_output=True, text=True,
                             env=slurm_env)
        return [dict(f.split("=", 1) for f in line.split() if "=" in f) for line in out.stdout.splitlines()]

    deadline = time.monotonic() + 420
    while time.monotonic() < deadline and not (len(tasks()) == 2 and all(t["JobState"] == "COMPLETED"
                                                                          for t in tasks())):
        time.sleep(1)
    assert sorted(t["ArrayTaskId"] for t in tasks()) == ["0", "1"]
    assert all(t["JobState"] == "COMPLETED" for t in tasks()), [
        {k: t.get(k) for k in ("ArrayTaskId", "JobState", "Reason", "Restarts", "ExitCode", "RunTime")} for t in tasks()]
    assert any(int(t["Restarts"]) >= 1 for t in tasks())  # the same task, started again
    trials = optuna.load_study(study_name="arr", storage=storage).get_trials()
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    cut = [t for t in trials if t.user_attrs.get("status") == "interrupted"]
    assert len(complete) == 4 and cut, [(t.number, t.state, t.user_attrs.get("status")) for t in trials]
    # each cut trial was continued by a later trial that completed, from the cut one's checkpoint
    continued = {t.system_attrs.get("failed_trial"): t for t in complete}
    assert all(c.number in continued for c in cut)
    logs = "".join(p.read_text() for p in Path(job["log_dir"]).glob("slurm-*_*.out"))
    assert "the worker stops, its trial is queued again, and the task is requeued" in logs


def test_runs_cancel_ends_a_submitted_runs_job_and_the_run_is_interrupted(slurm_env, searched, tmp_path) -> None:
    storage = study_copy(searched, tmp_path, "cancel")
    # a run far longer than the test, cancelled while it trains
    out = _promote(slurm_env, tmp_path, storage, "--set", "phases.0.epochs=500", "--json")
    assert out.returncode == 0, out.stderr[-3000:]
    submitted = json.loads(out.stdout)
    job, metrics = submitted["job"], Path(submitted["launch"]).parent / "metrics.jsonl"
    # a running job, so that a cancel that never reached Slurm would leave it running
    wait_until(lambda: metrics.exists() and metrics.stat().st_size > 0, f"a trained epoch of job {job}")
    run_id = runs(slurm_env, tmp_path, storage)[0]["id"]
    out = cli(slurm_env, tmp_path, "runs", "--storage", storage, "--cancel", str(run_id), "--json")
    assert out.returncode == 0, out.stderr[-3000:]
    run = json.loads(out.stdout)
    assert run["status"] == "interrupted" and run["job"]["state"] == "cancelled", run
    assert scontrol_job(slurm_env, job)["JobState"] == "CANCELLED"
    again = cli(slurm_env, tmp_path, "runs", "--storage", storage, "--cancel", str(run_id))
    assert again.returncode == 2 and "only a submitted run's job can be cancelled" in again.stderr
    missing = cli(slurm_env, tmp_path, "runs", "--storage", storage, "--cancel", "999")
    assert missing.returncode == 2 and "--cancel: no run 999 in this database" in missing.stderr


def test_a_throughput_profile_is_measured_as_a_slurm_job_and_written_when_it_completes(slurm_env, tmp_path) -> None:
    space = str(write_space(tmp_path, dict(TINY_SPACE)))
    out = tmp_path / "profile.json"
    measure = ("calibrate", "--throughput", "--space", space, "--resolutions", "8", "--batches", "4,16",
               "--processes", "2", "--device", "cpu", "--launcher", "slurm", "--output", str(out))
    done = cli(slurm_env, tmp_path, *measure, "--time", "10", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    job = next(w for w in done.stderr.split() if w.isdigit())
    view = scontrol_job(slurm_env, job)
    assert view["JobName"] == "tianfeng-throughput" and view["JobState"] == "COMPLETED"
    assert view["TimeLimit"] == "00:10:00" and view["NumNodes"] == "1"
    data = json.loads(out.read_text())
    assert (data["nodes"], data["processes"], data["backend"]) == (1, 2, "gloo")
    assert data["links"]["intra"]["gbit_s"] > 0 and json.loads(done.stdout)["throughput"] == str(out)
    # the scheduler's refusal: one line, exit 2, the profile left as it was
    before = out.read_text()
    bad = cli(slurm_env, tmp_path, *measure, "--partition", "nosuch")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
    assert "--partition: nosuch: no such partition" in bad.stderr and out.read_text() == before


def test_calibration_runs_are_submitted_then_collected_by_calibrating_again(slurm_env, tmp_path) -> None:
    """Bug caught: calibration runs trained here instead of submitted, submitted twice, or rho
    computed from runs still training."""
    (tmp_path / "searched").mkdir()
    storage = study_copy(searched_study(tmp_path / "searched", trials=3), tmp_path, "calib")
    calibrate = ("calibrate", "--study", "s", "--storage", storage, "--top-k", "2", "--random", "1",
                 "--launcher", "slurm", "--nodes", "1", "--gpus-per-node", "2", "--device", "cpu", "--time", "20",
                 "--runs-dir", runs_dir(storage), "--json")
    first = cli(slurm_env, tmp_path, *calibrate)
    assert first.returncode == 0, first.stderr[-3000:]
    submitted = json.loads(first.stdout)
    assert submitted["pending"] == 3 and submitted["spearman_rho"] is None
    jobs = {j["job_id"] for j in RunStore(storage).jobs().values()}
    assert len(jobs) == 3 and all(r["kind"] == "calibrate" for r in RunStore(storage).runs())
    for job in jobs:
        wait_until(lambda job=job: _over(slurm_env, job), f"ended job {job}")
    second = cli(slurm_env, tmp_path, *calibrate)
    assert second.returncode in (0, 1), second.stderr[-3000:]  # 1: rho undefined (every full score equal)
    done = json.loads(second.stdout)
    assert done["pending"] == 0 and done["pairs_used"] == 3
    assert {j["job_id"] for j in RunStore(storage).jobs().values()} == jobs  # none submitted twice
    assert sorted(p["full"] for p in done["pairs"]) == sorted(r["final_score"] for r in RunStore(storage).runs())


def test_a_scale_study_runs_each_batch_sizes_search_as_a_job_array(slurm_env, tmp_path) -> None:
    """Bug caught: the workers of a scale search not given its pinned batch (they would sample
    it), or a batch size searched before the previous one's job ended (no warm start from it)."""
    storage = f"sqlite:///{tmp_path / 'scale.db'}"
    out = cli(slurm_env, tmp_path, "scale", "--space", str(write_space(tmp_path, dict(TINY_SPACE))),
              "--batch-sizes", "64,128", "--budget-per-batch", "2trials", "--warm-start", "1", "--name", "sc",
              "--storage", storage, "--launcher", "slurm", "--workers", "1", "--time", "20",
              "--runs-dir", str(tmp_path / "runs"))
    assert out.returncode == 0, out.stderr[-3000:]
    import optuna

    for name, batch in (("sc-b64", 64), ("sc-b128", 128), ("sc-b128-naive", 128)):
        study = optuna.load_study(study_name=name, storage=storage)
        job = study.user_attrs["workers_job"]["job"]
        view = scontrol_job(slurm_env, f"{job}_0")
        assert view.get("JobState") == "COMPLETED", (name, view)
        trials = study.get_trials(deepcopy=False)
        assert trials and all(t.user_attrs["config"]["phases"][-1]["batch_size"] == batch for t in trials), name
    b64 = optuna.load_study(study_name="sc-b64", storage=storage)
    b128 = optuna.load_study(study_name="sc-b128", storage=storage)
    ended = max(t.datetime_complete for t in b64.trials if t.datetime_complete)
    assert min(t.datetime_start for t in b128.trials if t.datetime_start) >= ended  # after b64's search
    assert "warm_start" in b128.trials[0].user_attrs  # begun from b64's best


def test_two_slurm_workers_on_postgresql_finish_the_budget_when_one_is_killed_mid_trial(slurm_env, tmp_path) -> None:
    """Bug caught: a killed worker's trial left running for ever (the budget never spent), retried
    from scratch instead of its checkpoint, or its task ending with it (a worker fewer). The kill
    comes once every trial of the budget exists: no worker starts another, so only a worker that
    watches the others' trials can see its heartbeat missed."""
    import optuna
    from optuna.trial import TrialState

    from tests.postgres import postgres_server

    space = copy.deepcopy(TINY_SPACE)
    space["base"]["phases"][0]["epochs"] = 12  # trials long enough to be killed mid-run
    with postgres_server() as storage:
        out = cli(slurm_env, tmp_path, "search", "--space", str(write_space(tmp_path, space)), "--storage", storage,
                  "--study", "pg", "--fidelity", "target", "--trials", "4", "--sampler", "random", "--pruner", "none",
                  "--launcher", "slurm", "--workers", "2", "--grace-s", "20", "--time", "20",
                  "--runs-dir", str(tmp_path / "runs"))
        assert out.returncode == 0, out.stderr[-3000:]
        job = optuna.load_study(study_name="pg", storage=storage).user_attrs["workers_job"]["job"]

        def victim() -> optuna.trial.FrozenTrial | None:
            trials = optuna.load_study(study_name="pg", storage=storage).get_trials(deepcopy=False)
            if len(trials) < 4:  # the budget not yet spent
                return None
            return next((t for t in trials if t.state == TrialState.RUNNING and len(t.intermediate_values) >= 2), None)

        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and victim() is None:
            time.sleep(0.2)
        killed = victim()
        assert killed is not None
        os.kill(int(killed.user_attrs["worker"].rsplit(":", 1)[1]), 9)  # the worker process, outright
        wait_until(lambda: all(_over(slurm_env, f"{job}_{task}") for task in (0, 1)), f"ended array {job}",
                   timeout_s=600)
        trials = optuna.load_study(study_name="pg", storage=storage).get_trials()
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(complete) == 4, [(t.number, t.state, t.user_attrs.get("status")) for t in trials]
    # the killed worker's task started another in its place and ended well
    task_logs = {p.name: p.read_text() for p in (tmp_path / "runs").rglob("slurm-*_*.out")}
    for task in (0, 1):
        view = scontrol_job(slurm_env, f"{job}_{task}")
        assert view.get("JobState") == "COMPLETED", (f"task {task}: {view.get('JobState')} {view.get('ExitCode')}\n"
                                                     + task_logs.get(f"slurm-{job}_{task}.out", "(no log)")[-6000:])
    logs = "".join(task_logs.values())
    assert logs.count("its worker was killed; starting another") == 1
    dead = next(t for t in trials if t.number == killed.number)
    assert dead.state == TrialState.FAIL  # judged dead by its missing heartbeat
    retry = next(t for t in complete if t.system_attrs.get("failed_trial") == killed.number)
    # continued from the dead trial's checkpoint: every epoch once, the later ones by a second process
    epochs = [json.loads(line) for line in (Path(retry.user_attrs["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
    assert [e["epoch"] for e in epochs] == list(range(1, 13))
    assert any(e["startup_s"] is not None for e in epochs[1:]), [e["startup_s"] for e in epochs]
