"""`tianfeng search` from the command line: the shipped space end to end, and bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from tests.search.conftest import write_space

REPO = Path(__file__).resolve().parents[2]


def search(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tianfeng.cli", "search", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=600)


@pytest.mark.slow
def test_shipped_space_runs_and_prints_the_promote_command(tmp_path: Path) -> None:
    out = search("--space", str(REPO / "search_spaces" / "large_batch.yaml"), "--trials", "5", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "enqueued 3 published recipes" in out.stderr
    assert out.stderr.count("trial ") >= 5  # one line per trial
    assert "study large_batch: 5 trials (" in out.stdout
    assert "tianfeng promote " in out.stdout and "--study large_batch" in out.stdout
    assert (tmp_path / "tianfeng.db").exists()
    assert (tmp_path / "reports" / "large_batch.html").exists() and "report: reports/large_batch.html" in out.stdout


@pytest.mark.parametrize(("args", "expected"), [
    (["--trials", "0"], "--trials: must be >= 1, got 0"),
    (["--workers", "0"], "--workers: must be auto or a number >= 1, got 0"),
    (["--timeout", "ten minutes"], "--timeout: must look like 90s, 10m or 1h"),
    (["--fidelity", "huge"], "--fidelity: must be one of lowres_half, quick, proxy, medium, long, lowres_long, lowres_40, lowres_80, target"),
    (["--promote", "leader", "--backend", "ray"], "--promote: needs --backend optuna"),
    (["--promote", "leader"], "--promote: leader: needs one best trial: use it with --objective accuracy or "
                              "time-to-target, not pareto"),  # the space's objective is pareto
])
def test_bad_search_arguments(tmp_path: Path, args: list[str], expected: str) -> None:
    out = search("--space", str(REPO / "search_spaces" / "large_batch.yaml"), *args, cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.strip().count("\n") == 0, out.stderr
    assert expected in out.stderr
    db = tmp_path / "tianfeng.db"
    assert not db.exists() or optuna.get_all_study_names(f"sqlite:///{db}") == []  # refused before any trial


def test_missing_space_file(tmp_path: Path) -> None:
    out = search("--space", "nope.yaml", cwd=tmp_path)
    assert out.returncode == 2 and "nope.yaml: no such file, and no shipped space of that name" in out.stderr


def test_resume_without_study_is_an_error(tmp_path: Path) -> None:
    out = search("--space", str(REPO / "search_spaces" / "large_batch.yaml"), "--resume", cwd=tmp_path)
    assert out.returncode == 2 and "no database at tianfeng.db" in out.stderr


@pytest.mark.parametrize(("args", "expected"), [
    (["--cpus-per-trial", "2"], "--backend: --cpus-per-trial needs --backend ray or --launcher slurm"),
    (["--backend", "ray", "--workers", "2"], "--workers: is for the optuna backend"),
    (["--backend", "ray", "--cpus-per-trial", "0"], "--cpus-per-trial: must be > 0, got 0"),
    (["--backend", "ray", "--gpus-per-trial", "-1"], "--gpus-per-trial: must be >= 0, got -1"),
])
def test_bad_ray_flags_are_refused_before_ray_starts(tmp_path: Path, tiny_space: dict, args: list[str],
                                                    expected: str) -> None:
    out = search("--space", str(write_space(tmp_path, tiny_space)), *args, cwd=tmp_path)
    assert out.returncode == 2 and expected in out.stderr, out.stderr[-2000:]
    assert out.stderr.strip().count("\n") == 0
    assert not (tmp_path / "tianfeng.db").exists()


def test_a_dry_run_prints_the_plan_and_the_batch_script_and_creates_nothing(tmp_path: Path) -> None:
    """`--dry-run`: checked as the search checks, printed, and nothing made: no study, no run
    folder, no job; the script's workers run the search itself, not another dry run."""
    space = str(REPO / "search_spaces" / "large_batch.yaml")
    out = search("--space", space, "--dry-run", "--study", "planned", "--launcher", "slurm", "--workers", "3",
                 "--partition", "gpu", "--time", "1:00:00", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("study planned in sqlite:///tianfeng.db:") and "workers 3" in out.stdout
    assert "#SBATCH --array=0-2\n" in out.stdout and "#SBATCH --partition=gpu\n" in out.stdout
    worker = next(line for line in out.stdout.splitlines() if "tianfeng.cli search" in line)
    assert "--study planned" in worker and "--resume" in worker and "--dry-run" not in worker
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    # a cluster's database is not opened, even where a report of the study's name is in the folder
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "planned.html").write_text("<html></html>")
    elsewhere = search("--space", space, "--dry-run", "--study", "planned", "--storage",
                       "postgresql://user@nohost.invalid/tianfeng", cwd=tmp_path)
    assert elsewhere.returncode == 0, elsewhere.stderr
    refused = search("--space", space, "--dry-run", "--launcher", "slurm", "--partition", "gpu;reboot",
                     cwd=tmp_path)
    assert refused.returncode == 2 and "--partition" in refused.stderr
