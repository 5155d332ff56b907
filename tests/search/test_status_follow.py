"""`tianfeng status --follow`: attached to a search that runs in another process, it prints the
study each time it changes and ends by itself once the budget is spent."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import optuna

from tests.search.conftest import TINY_SPACE, write_space


def test_following_a_search_shows_each_change_and_ends_when_its_budget_is_spent(tmp_path: Path) -> None:
    space = copy.deepcopy(TINY_SPACE)
    space["fidelities"]["proxy"] = {"epochs": 20, "width_scale": 0.5}  # a search long enough to attach to
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    searching = subprocess.Popen(
        [sys.executable, "-m", "tianfeng.cli", "search", "--space", str(write_space(tmp_path, space)), "--storage",
         storage, "--study", "f", "--trials", "4", "--workers", "1", "--pruner", "none", "--runs-dir",
         str(tmp_path / "runs")], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:  # attach as soon as the study exists
            try:
                optuna.load_study(study_name="f", storage=storage)
                break
            except (KeyError, ValueError):
                time.sleep(0.2)
        follower = subprocess.run(
            [sys.executable, "-m", "tianfeng.cli", "status", "--storage", storage, "--study", "f", "--follow",
             "--json", "--interval", "0.5"], capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
        assert searching.wait(timeout=120) == 0, searching.stderr.read()[-2000:]
    finally:
        searching.kill()
    assert follower.returncode == 0, follower.stderr[-2000:]
    seen = [json.loads(line) for line in follower.stdout.splitlines()]
    assert len(seen) >= 2 and seen[0]["outcomes"].get("completed", 0) < 4  # attached while it searched
    assert all(a != b for a, b in zip(seen, seen[1:], strict=False))  # a line per change, not per look
    last = seen[-1]  # ended by itself once the budget was spent
    assert last["trials"] == 4 and last["outcomes"] == {"completed": 4}, last
    study = optuna.load_study(study_name="f", storage=storage)
    assert last["best_value"] == study.best_value and last["best_trial"] == study.best_trial.number
    finished = [s["outcomes"].get("completed", 0) for s in seen]
    assert finished == sorted(finished) and len(seen) >= 2
