"""The LCBench benchmark end to end on one task and one seed: its surrogate environment is made
(yahpo-gym and DEHB from PyPI, SMAC3 in its own), the surrogate and SMAC answer through their pipes, and tianfeng's arm runs through
the search's own sampler, pruner and epoch judgement."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_lcbench_compares_methods_on_the_surrogate(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "lcbench.py"), "--tasks", "1", "--seeds", "1",
                          "--budget", "4", "--methods", "tianfeng,random,tianfeng-pareto,dehb,tianfeng-screen,smac-hyperband",
                          "--json", str(tmp_path / "r.json")], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "LCBench surrogate, 1 tasks x 1 seeds" in out.stdout and "aim: tianfeng's regret at half the budget" in out.stdout
    regrets = json.loads((tmp_path / "r.json").read_text())
    assert set(regrets) == {"tianfeng", "random", "tianfeng-pareto", "dehb", "tianfeng-screen", "smac-hyperband"}
    # regret is 0 at the best known accuracy and never grows as the budget is spent
    for by in regrets.values():
        over_budget = [by[str(f)][0] for f in (0.125, 0.25, 0.5, 1.0)]
        assert all(r >= 0.0 for r in over_budget) and over_budget == sorted(over_budget, reverse=True)
    assert min(by["1.0"][0] for by in regrets.values()) < 1.0  # some arm beat the median random configuration
