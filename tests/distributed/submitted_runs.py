"""What the scheduler tests share: a small searched study to promote from, the CLI as a user
runs it, and waiting for a job or for `tianfeng runs` to get where a test waits for them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tests.search.conftest import TINY_SPACE, write_space
from tests.search.test_study import spec_for
from tianfeng.hpo.running.runner import run_search


def searched_study(root: Path, trials: int = 2) -> Path:
    """A study `s` of the tiny space (two trials); returns its SQLite file."""
    spec = spec_for(root, write_space(root, dict(TINY_SPACE)), trials=trials, study="s")
    run_search(spec, workers=1, resume=False)
    return root / "study.db"


def cli(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tianfeng.cli", *args], capture_output=True, text=True,
                          timeout=300, env=env, cwd=cwd)


def study_copy(searched: Path, tmp_path: Path, name: str) -> str:
    """A copy of the searched study for one test: its storage URL."""
    folder = tmp_path / name
    folder.mkdir()
    shutil.copyfile(searched, folder / "study.db")
    return f"sqlite:///{folder / 'study.db'}"


def runs_dir(storage: str) -> str:
    return str(Path(storage.removeprefix("sqlite:///")).parent / "runs")


def promote(env: dict[str, str], tmp_path: Path, storage: str, launcher: str, *extra: str) -> subprocess.CompletedProcess:
    """`tianfeng promote 0` of the searched study onto 1 node x 2 CPU ranks, through `launcher`."""
    return cli(env, tmp_path, "promote", "0", "--study", "s", "--storage", storage, "--nodes", "1",
               "--gpus-per-node", "2", "--device", "cpu", "--launcher", launcher, "--runs-dir", runs_dir(storage),
               *extra)


def runs(env: dict[str, str], tmp_path: Path, storage: str) -> list[dict]:
    out = cli(env, tmp_path, "runs", "--storage", storage, "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def wait_until(ready: Callable[[], bool], what: str, timeout_s: float = 300) -> None:
    """Poll a cheap question (the scheduler's own view, a file) rather than the CLI, whose
    start-up on every poll would take the CPUs the job under test runs on."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"never {what} in {timeout_s:.0f} s")
        time.sleep(0.5)


def scontrol_job(env: dict[str, str], job: str) -> dict[str, str]:
    """Slurm's own view of a job (`scontrol show job -o`), field by field."""
    out = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True, env=env)
    return dict(f.split("=", 1) for f in out.stdout.split() if "=" in f)


def with_venv_path(env: dict[str, str]) -> dict[str, str]:
    """The job runs torchrun from the submitting environment, as a user's activated venv gives it."""
    import os

    return {**env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"}
