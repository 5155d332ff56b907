"""`tianfeng launch`: plans, their checks, and a real 2-node x 2-process gloo run on this machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.distributed.test_hooks import REPO


def config(tmp_path: Path, **changes) -> Path:
    raw = {"name": "lt", "run_dir": str(tmp_path / "run"), "data": {"source": "digits"},
           "model": {"width": 8, "stages": 2}, "phases": [{"epochs": 2, "resolution": 8, "batch_size": 64}],
           "optimizer": {"lr": 0.8}, "precision": {"mode": "fp32"},
           "distributed": {"hook": "hierarchical", "compression": "fp16"}}
    raw.update(changes)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def launch(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "tianfeng.cli", "launch", *args], capture_output=True,
                          text=True, timeout=300, env=env, cwd=REPO)


def test_dry_run_prints_torchrun_and_slurm(tmp_path: Path) -> None:
    big = config(tmp_path, phases=[{"epochs": 2, "resolution": 8, "batch_size": 1024}])
    out = launch("--config", str(big), "--nodes", "16", "--gpus-per-node", "8",
                 "--master-addr", "node-a", "--dry-run")
    assert out.returncode == 0, out.stderr
    assert "torchrun --nnodes=16 --nproc-per-node=8 --rdzv-backend=c10d --rdzv-endpoint=node-a:29500" in out.stdout
    assert "--set device=cuda --set distributed.local_size=8" in out.stdout
    assert "#SBATCH --nodes=16" in out.stdout and "#SBATCH --gpus-per-node=8" in out.stdout
    assert "srun torchrun --nnodes=16" in out.stdout and '--rdzv-endpoint="$MASTER_ADDR":29500' in out.stdout
    assert ("ray job submit --address=http://node-a:8265 --submission-id=lt-16x8 -- tianfeng launch --config "
            f"{big} --nodes 16 --gpus-per-node 8 --device cuda --via ray --address auto") in out.stdout
    assert not (tmp_path / "run").exists()  # a dry run writes nothing


def test_an_elastic_dry_run_asks_torchrun_and_slurm_for_a_range_of_nodes(tmp_path: Path) -> None:
    """Bug: --min-nodes dropped on the way to the scripts (a lost node still ends the run)."""
    big = config(tmp_path, phases=[{"epochs": 2, "resolution": 8, "batch_size": 1536}])
    # 1536 images fit 16, 24 and 32 GPUs: 2, 3 or 4 nodes of 8
    out = launch("--config", str(big), "--nodes", "4", "--gpus-per-node", "8", "--min-nodes", "2",
                 "--max-restarts", "2", "--master-addr", "node-a", "--dry-run")
    assert out.returncode == 0, out.stderr
    assert "torchrun --nnodes=2:4 --nproc-per-node=8 --max-restarts=2 --rdzv-backend=c10d" in out.stdout
    assert "#SBATCH --nodes=2-4" in out.stdout and "#SBATCH --no-kill" in out.stdout
    assert "srun --no-kill torchrun --nnodes=2:4" in out.stdout
    fixed = launch("--config", str(big), "--nodes", "4", "--gpus-per-node", "8", "--dry-run")
    assert "--no-kill" not in fixed.stdout and "#SBATCH --nodes=4\n" in fixed.stdout


@pytest.mark.parametrize(("changes", "args", "expected"), [
    ({"phases": [{"epochs": 1, "resolution": 8, "batch_size": 60}]}, ["--nodes", "2", "--gpus-per-node", "4"],
     "phases.0.batch_size: must be divisible by nodes x GPUs (2 x 4 = 8), got 60"),
    ({"phases": [{"epochs": 1, "resolution": 8, "batch_size": 64}]},
     ["--nodes", "4", "--gpus-per-node", "1", "--min-nodes", "2", "--max-restarts", "1"],
     "phases.0.batch_size: must be divisible by nodes x GPUs (3 x 1 = 3) at 3 of the elastic launch's up to 4 "
     "nodes, got 64"),
    ({"distributed": {}}, ["--nodes", "2", "--gpus-per-node", "1", "--min-nodes", "1"],
     "--min-nodes: needs --max-restarts >= 1"),
    ({"distributed": {}}, ["--nodes", "2", "--gpus-per-node", "1", "--min-nodes", "3", "--max-restarts", "1"],
     "--min-nodes: must be between 1 and --nodes (2), got 3"),
    ({"phases": [{"epochs": 1, "resolution": 8, "batch_size": 192}]},
     ["--nodes", "3", "--gpus-per-node", "1", "--min-nodes", "1", "--max-restarts", "1"],
     "distributed.hook: hierarchical needs --nodes >= 2 (and --min-nodes >= 2)"),
    ({"distributed": {}}, ["--nodes", "2", "--gpus-per-node", "1", "--min-nodes", "1", "--max-restarts", "1",
                           "--via", "ray"], "--min-nodes: is torchrun's elastic launch: not with --via ray"),
    ({}, ["--nodes", "1", "--gpus-per-node", "4"], "distributed.hook: hierarchical needs --nodes >= 2"),
    ({"distributed": {"local_size": 4}}, ["--nodes", "2", "--gpus-per-node", "2"],
     "distributed.local_size: says 4 ranks per node but the launch has --gpus-per-node 2"),
    ({}, ["--nodes", "0", "--gpus-per-node", "2"], "--nodes: must be >= 1, got 0"),
    ({}, ["--nodes", "2", "--gpus-per-node", "2", "--address", "auto"], "--address: is for --via ray"),
])
def test_bad_launches_are_one_line_with_exit_2(tmp_path: Path, changes: dict, args: list[str], expected: str) -> None:
    out = launch("--config", str(config(tmp_path, **changes)), *args, "--dry-run")
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert expected in out.stderr


@pytest.mark.slow
def test_two_emulated_nodes_of_two_gloo_processes_train(tmp_path: Path) -> None:
    out = launch("--config", str(config(tmp_path)), "--nodes", "2", "--gpus-per-node", "2", "--device", "cpu")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "world 4 (2 per node)" in out.stderr and "B inter-node" in out.stderr
    assert (tmp_path / "run" / "launch" / "node-1.sh").exists() and (tmp_path / "run" / "launch" / "sbatch.sh").exists()
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["epoch"] for m in metrics] == [1, 2]
    # the ranks trained one model together: the loss fell and digits are read above chance (10%)
    assert metrics[1]["train_loss"] < 0.99 * metrics[0]["train_loss"] and metrics[1]["val_top1"] > 15


@pytest.mark.alone
@pytest.mark.slow
def test_ray_train_runs_two_emulated_nodes_of_two_workers(tmp_path: Path) -> None:
    out = launch("--config", str(config(tmp_path)), "--nodes", "2", "--gpus-per-node", "2", "--device", "cpu",
                 "--via", "ray")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Ray Train: 4 workers (2 nodes x 2), backend gloo" in out.stderr
    assert "world 4 (2 per node)" in out.stderr and "B inter-node" in out.stderr
    assert (tmp_path / "run" / "launch" / "ray-job.sh").exists()
    assert "completed: val_top1 " in out.stdout and "after epoch 2" in out.stdout
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["epoch"] for m in metrics] == [1, 2]
    # the ranks trained one model together: the loss fell and digits are read above chance (10%)
    assert metrics[1]["train_loss"] < 0.99 * metrics[0]["train_loss"] and metrics[1]["val_top1"] > 15


@pytest.mark.alone  # the kill must land mid-run
@pytest.mark.slow
def test_an_elastic_run_loses_a_node_and_the_survivor_finishes_at_the_smaller_world(tmp_path: Path) -> None:
    """Two emulated nodes under torchrun --nnodes 1:2; node 2's agent and rank are killed mid-run
    (a node lost). Bug caught: the elastic range not reaching torchrun (the survivor fails, or
    waits for a second node for ever). Node 1's rank fails on the dead peer, its agent restarts
    it, the rendezvous closes with one node, and the run resumes from its last checkpoint at
    world 1 and ends with every epoch once."""
    import signal
    import time

    import torch

    from tianfeng.core.ports import free_port
    from tianfeng.launch.scripts import LaunchPlan

    path = config(tmp_path, phases=[{"epochs": 30, "resolution": 8, "batch_size": 64}], distributed={},
                  checkpoint={"every_steps": 5})
    plan = LaunchPlan(str(path), "lt", nodes=2, per_node=1, device="cpu", master_addr="127.0.0.1",
                      port=free_port(), max_restarts=1, min_nodes=1)
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    agent = [sys.executable, "-m", "torch.distributed.run", *plan.torchrun_args()[1:]]
    log = tmp_path / "first.log"  # a file, not a pipe: nobody reads it while the run goes on
    first = subprocess.Popen(agent, env=env, cwd=REPO, stderr=log.open("w"), start_new_session=True)
    time.sleep(2)  # the first agent hosts the rendezvous: the one left standing
    second = subprocess.Popen(agent, env=env, cwd=REPO, stderr=subprocess.DEVNULL, start_new_session=True)
    ckpt = tmp_path / "run" / "checkpoints" / "last.pt"
    deadline, killed = time.time() + 240, False
    while time.time() < deadline and not killed:
        time.sleep(0.2)
        try:
            epoch = torch.load(ckpt, weights_only=False)["position"]["epoch"]
        except (FileNotFoundError, EOFError, RuntimeError, KeyError):
            continue
        if epoch >= 2:
            ranks = subprocess.run(["pgrep", "-P", str(second.pid)], capture_output=True, text=True).stdout.split()
            for pid in [second.pid, *map(int, ranks)]:
                os.kill(pid, signal.SIGKILL)
            killed = True
    assert killed, "no checkpoint appeared"
    try:
        first.wait(timeout=240)
    finally:
        first.kill()
    err = log.read_text()
    assert first.returncode == 0, err[-3000:]
    assert "world 2 (1 per node)" in err and "world 1 (1 per node)" in err and "resumed from" in err
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["epoch"] for m in metrics] == list(range(1, 31))


@pytest.mark.alone  # the kill must land mid-run
@pytest.mark.slow
def test_a_killed_ray_train_worker_restarts_every_rank_from_the_last_checkpoint(tmp_path: Path) -> None:
    """Ray Train with --max-restarts 1 (FailureConfig(max_failures=1)); one worker process is
    killed mid-run. Bug caught: max_failures not reaching Ray Train (the run fails), or the
    restarted ranks starting afresh (epochs recorded twice, another loss curve)."""
    import signal
    import time

    epochs = 8
    args = ("--nodes", "1", "--gpus-per-node", "2", "--device", "cpu", "--via", "ray")
    path = config(tmp_path, phases=[{"epochs": epochs, "resolution": 8, "batch_size": 64}], distributed={},
                  checkpoint={"every_epochs": 1})
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    log = tmp_path / "killed.log"  # a file, not a pipe: nobody reads it while the run goes on
    run = subprocess.Popen([sys.executable, "-m", "tianfeng.cli", "launch", "--config", str(path), *args,
                            "--max-restarts", "1"], env=env, cwd=REPO, stdout=log.open("w"),
                           stderr=subprocess.STDOUT, start_new_session=True)
    metrics_file, killed = tmp_path / "run" / "metrics.jsonl", None
    deadline = time.time() + 240
    while time.time() < deadline and killed is None and run.poll() is None:
        time.sleep(0.3)
        if metrics_file.exists() and len(metrics_file.read_text().splitlines()) >= 2:
            workers = subprocess.run(["pgrep", "-f", "RayTrainWorker"], capture_output=True, text=True).stdout.split()
            if workers:
                killed = int(workers[-1])
                os.kill(killed, signal.SIGKILL)
    assert killed is not None, log.read_text()[-3000:]
    try:
        run.wait(timeout=400)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    out = log.read_text()
    assert run.returncode == 0, out[-3000:]
    assert "completed: val_top1 " in out and f"after epoch {epochs}" in out
    resumed = [json.loads(line) for line in metrics_file.read_text().splitlines()]
    assert [m["epoch"] for m in resumed] == list(range(1, epochs + 1))  # every epoch once
    restarted = [m["epoch"] for m in resumed if m["startup_s"] is not None]
    assert restarted[0] == 1 and len(restarted) >= 2  # a second set of processes trained the later epochs
    # the same run uninterrupted: the restart resumed it exactly
    (tmp_path / "whole").mkdir()
    whole = config(tmp_path / "whole", phases=[{"epochs": epochs, "resolution": 8, "batch_size": 64}],
                   distributed={}, checkpoint={"every_epochs": 1})
    out = launch("--config", str(whole), *args)
    assert out.returncode == 0, out.stderr[-3000:]
    reference = [json.loads(line) for line in (tmp_path / "whole" / "run" / "metrics.jsonl").read_text().splitlines()]
    for r, w in zip(resumed, reference, strict=True):
        assert r["train_loss"] == pytest.approx(w["train_loss"], rel=1e-9)
        assert r["val_loss"] == pytest.approx(w["val_loss"], rel=1e-9)
