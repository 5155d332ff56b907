"""Promoted runs on a real Ray cluster started on this machine (tests/ray_cluster.py), through
its Jobs API: submitted, watched, collected into the study by `tianfeng runs` with the job's
submission id; a cancelled job is stopped in Ray and its run interrupted; a Jobs API that does
not answer is one line, exit 2, nothing recorded."""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.distributed.submitted_runs import (
    cli,
    promote,
    runs,
    searched_study,
    study_copy,
    wait_until,
)
from tests.ray_cluster import ray_cluster
from tests.search.conftest import TINY_SPACE, write_space
from tianfeng.storage.runs import RunStore

pytestmark = [pytest.mark.slow, pytest.mark.alone, pytest.mark.timeout(900)]
_ENDED = ("SUCCEEDED", "FAILED", "STOPPED")


@pytest.fixture(scope="module")
def ray_env() -> Iterator[dict[str, str]]:
    with ray_cluster() as env:
        yield env


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return searched_study(tmp_path_factory.mktemp("ray-study"))


def _promote(env, tmp_path: Path, storage: str, *extra: str) -> subprocess.CompletedProcess:
    return promote(env, tmp_path, storage, "ray", *extra)


def _ray_status(env: dict[str, str], job: str) -> str:
    from ray.job_submission import JobSubmissionClient

    return str(JobSubmissionClient(env["RAY_ADDRESS"]).get_job_status(job).value)


def test_a_promotion_submitted_to_ray_is_collected_into_the_study(ray_env, searched, tmp_path) -> None:
    storage = study_copy(searched, tmp_path, "plain")
    # the address as a flag, and not from the environment, is what the job record keeps
    env = {k: v for k, v in ray_env.items() if k != "RAY_ADDRESS"}
    out = _promote(env, tmp_path, storage, "--jobs-address", ray_env["RAY_ADDRESS"], "--json")
    assert out.returncode == 0, out.stderr[-3000:]
    submitted = json.loads(out.stdout)
    assert submitted["status"] == "submitted" and submitted["launcher"] == "ray", submitted
    job = submitted["job"]
    entry = (Path(submitted["launch"]) / "ray-entry.sh").read_text()
    assert "--via ray --address auto --max-restarts 3" in entry
    wait_until(lambda: _ray_status(ray_env, job) in _ENDED, f"ended Ray job {job}", timeout_s=400)
    run = runs(env, tmp_path, storage)[0]
    # collected by `tianfeng runs` (run without RAY_ADDRESS: the recorded address finds the job)
    assert run["status"] == "completed" and run["final_score"] is not None, run
    assert len(run["epochs"]) == 3 and run["job"]["job_id"] == job and run["job"]["state"] == "completed"
    assert run["job"]["address"] == ray_env["RAY_ADDRESS"]
    assert run["final_score"] == json.loads((Path(run["run_dir"]) / "result.json").read_text())["final"]["val_top1"]
    assert _ray_status(ray_env, job) == "SUCCEEDED"  # Ray's own view agrees


def test_runs_cancel_stops_a_ray_job_and_the_run_is_interrupted(ray_env, searched, tmp_path) -> None:
    storage = study_copy(searched, tmp_path, "cancel")
    out = _promote(ray_env, tmp_path, storage, "--set", "phases.0.epochs=500", "--json")
    assert out.returncode == 0, out.stderr[-3000:]
    submitted = json.loads(out.stdout)
    job, metrics = submitted["job"], Path(submitted["launch"]).parent / "metrics.jsonl"
    # training, so that a cancel that never reached Ray would leave it running
    wait_until(lambda: metrics.exists() and metrics.stat().st_size > 0, f"a trained epoch of Ray job {job}",
               timeout_s=400)
    run_id = runs(ray_env, tmp_path, storage)[0]["id"]
    out = cli(ray_env, tmp_path, "runs", "--storage", storage, "--cancel", str(run_id), "--json")
    assert out.returncode == 0, out.stderr[-3000:]
    run = json.loads(out.stdout)
    assert run["status"] == "interrupted" and run["job"]["state"] == "cancelled", run
    assert _ray_status(ray_env, job) == "STOPPED"
    assert len(run["epochs"]) < 500


def test_a_jobs_api_that_does_not_answer_is_one_line_and_records_nothing(ray_env, searched, tmp_path) -> None:
    storage = study_copy(searched, tmp_path, "bad")
    nowhere = {k: v for k, v in ray_env.items() if k != "RAY_ADDRESS"}
    out = _promote(nowhere, tmp_path, storage)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "--launcher ray: needs --jobs-address http://HEAD:8265" in out.stderr
    out = _promote(nowhere, tmp_path, storage, "--jobs-address", "http://127.0.0.1:9")
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "--jobs-address: cannot reach Ray's Jobs API at 'http://127.0.0.1:9'" in out.stderr
    assert RunStore(storage).jobs() == {}
    assert all(r["status"] != "submitted" for r in RunStore(storage).runs())


TINY_MODEL = '''
from torch import nn


def build(num_classes, in_channels):
    return nn.Sequential(nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(in_channels * 16, num_classes))
'''


def test_a_working_dir_carries_the_users_model_to_a_cluster_that_cannot_see_its_folder(ray_env, tmp_path) -> None:
    """`--working-dir`: Ray uploads the code folder when the job is submitted, and the job and its
    Ray Train workers import the model from their copy. The folder is renamed as soon as the job
    is submitted: the path a shared file system would give them (PYTHONPATH) leads nowhere."""
    code, shared = tmp_path / "code", tmp_path / "shared"
    code.mkdir()
    shared.mkdir()
    (code / "tinymodel.py").write_text(TINY_MODEL)
    space = copy.deepcopy(TINY_SPACE)
    space["base"]["model"] = {"name": "tinymodel:build"}
    storage = f"sqlite:///{shared / 'study.db'}"
    env = {k: v for k, v in ray_env.items() if k not in ("PYTHONPATH", "TIANFENG_CODE_DIR")}
    out = cli(env, code, "search", "--space", str(write_space(shared, space)), "--storage", storage, "--study", "s",
              "--trials", "1", "--workers", "1", "--runs-dir", str(shared / "runs"))
    assert out.returncode == 0, out.stderr[-3000:]
    out = cli(env, code, "promote", "0", "--study", "s", "--storage", storage, "--nodes", "1", "--gpus-per-node", "2",
              "--device", "cpu", "--launcher", "ray", "--working-dir", str(code), "--runs-dir", str(shared / "runs"),
              "--json")
    assert out.returncode == 0, out.stderr[-3000:]
    code.rename(tmp_path / "code-moved-away")
    job = json.loads(out.stdout)["job"]
    wait_until(lambda: _ray_status(ray_env, job) in _ENDED, f"ended Ray job {job}", timeout_s=400)
    assert _ray_status(ray_env, job) == "SUCCEEDED"
    run = runs(env, tmp_path / "code-moved-away", storage)[0]  # collected from where the user's code now is
    assert run["status"] == "completed" and run["final_score"] is not None, run
