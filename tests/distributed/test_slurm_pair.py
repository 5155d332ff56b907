"""Two Slurm nodes, each in a network namespace of its own (tests/slurm_pair.py): a promoted run
and a cluster measurement whose two nodes meet over a network, submitted, watched and
collected by tianfeng."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.distributed.submitted_runs import (
    cli,
    runs,
    runs_dir,
    scontrol_job,
    searched_study,
    study_copy,
    wait_until,
    with_venv_path,
)
from tests.search.conftest import TINY_SPACE, write_space
from tests.slurm_pair import slurm_pair

pytestmark = [pytest.mark.slow, pytest.mark.alone, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def pair_env() -> Iterator[dict[str, str]]:
    with slurm_pair() as env:
        yield with_venv_path(env)


def test_a_promotion_on_two_networked_nodes_is_submitted_and_collected(pair_env, tmp_path: Path) -> None:
    (tmp_path / "searched").mkdir()
    storage = study_copy(searched_study(tmp_path / "searched"), tmp_path, "pair")
    out = cli(pair_env, tmp_path, "promote", "0", "--study", "s", "--storage", storage, "--nodes", "2",
              "--gpus-per-node", "1", "--device", "cpu", "--launcher", "slurm", "--runs-dir", runs_dir(storage),
              "--time", "20", "--json")
    assert out.returncode == 0, out.stderr[-3000:]
    job = json.loads(out.stdout)["job"]
    wait_until(lambda: scontrol_job(pair_env, job).get("JobState") in ("COMPLETED", "FAILED", "CANCELLED"),
               f"ended job {job}")
    view = scontrol_job(pair_env, job)
    nodes = pair_env["TIANFENG_TEST_NODES"].split(",")
    assert view["JobState"] == "COMPLETED" and view["NumNodes"] == "2", view
    run = runs(pair_env, tmp_path, storage)[0]
    assert run["status"] == "completed" and run["job"]["job_id"] == job
    assert {e["world"] for e in run["epochs"]} == {2}  # one rank on each node
    log = (Path(run["run_dir"]) / "launch" / f"slurm-{job}.out").read_text()
    assert "completed: val_top1" in log and set(view["NodeList"].split(",")) == set(nodes)


def test_the_links_between_two_networked_nodes_are_measured_as_a_slurm_job(pair_env, tmp_path: Path) -> None:
    out = tmp_path / "pair.json"
    done = cli(pair_env, tmp_path, "calibrate", "--throughput", "--space", str(write_space(tmp_path, dict(TINY_SPACE))),
               "--resolutions", "8", "--batches", "4,16", "--nodes", "2", "--processes", "1", "--device", "cpu",
               "--launcher", "slurm", "--time", "10", "--output", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(out.read_text())
    assert (data["nodes"], data["processes"]) == (2, 1)
    links = data["links"]
    assert links["intra"] is None and links["inter"]["gbit_s"] > 0  # measured between the namespaces
