"""The LCBench benchmark end to end on one task and one seed: its surrogate environment is made
(yahpo-gym and DEHB from PyPI, SMAC3 and Syne Tune each in its own), the surrogate, SMAC and Syne
Tune answer through their pipes, and tianfeng's arm runs through
the search's own sampler, pruner and epoch judgement."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_lcbench_compares_methods_on_the_surrogate(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "lcbench" / "lcbench.py"), "--tasks", "1", "--seeds", "1",
                          "--budget", "4", "--methods",
                          "tianfeng,random,tianfeng-pareto,dehb,one-epoch-then-best,smac-hyperband,mobster,dyhpo",
                          "--json", str(tmp_path / "r.json")], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "LCBench surrogate, 1 tasks x 1 seeds" in out.stdout and "aim: tianfeng's regret at half the budget" in out.stdout
    regrets = json.loads((tmp_path / "r.json").read_text())
    assert set(regrets) == {"tianfeng", "random", "tianfeng-pareto", "dehb", "one-epoch-then-best", "smac-hyperband",
                            "mobster", "dyhpo"}
    # regret is 0 at the best known accuracy and never grows as the budget is spent
    for by in regrets.values():
        over_budget = [by[str(f)][0] for f in (0.125, 0.25, 0.5, 1.0)]
        assert all(r >= 0.0 for r in over_budget) and over_budget == sorted(over_budget, reverse=True)
    assert min(by["1.0"][0] for by in regrets.values()) < 1.0  # some arm beat the median random configuration


def _curve(lr: float) -> tuple[list[float], list[float]]:
    """A learning curve that peaks at lr 0.03, and its cumulative seconds: epoch e ends at e * 1.5 s."""
    quality = 1.0 - abs(math.log10(lr) + 1.5) / 4
    return [quality * (1.0 - math.exp(-e / 8)) for e in range(1, 53)], [1.5 * e for e in range(1, 53)]


@pytest.mark.slow
def test_syne_tune_schedulers_charge_a_resumed_trial_only_the_epochs_it_trains_again() -> None:
    from lcbench import AskTell, synetune_python

    pipe = AskTell(synetune_python(), "lcbench_synetune.py")
    space = {"lr": {"type": "float", "low": 1e-4, "high": 1.0, "log": True},
             "width": {"type": "int", "low": 16, "high": 512, "log": True}}
    try:
        for method in ("mobster", "dyhpo"):
            assert pipe.request({"op": "start", "method": method, "space": space, "seed": 3, "epochs": 52}) == {"ok": True}
            at: dict[int, int] = {}
            resumed = 0
            for _ in range(40):
                job = pipe.request({"op": "ask"})
                assert set(job["config"]) == set(space) and 1e-4 <= job["config"]["lr"] <= 1.0
                assert job["new"] == (job["trial"] not in at)
                accuracy, seconds = _curve(job["config"]["lr"])
                trained = pipe.request({"op": "train", "accuracy": accuracy, "time": seconds})
                start = at.get(job["trial"], 0)
                # a trial moves forward from where it stood and pays for those epochs alone
                assert start < trained["epoch"] <= 52
                assert trained["seconds"] == pytest.approx(1.5 * (trained["epoch"] - start))
                at[job["trial"]] = trained["epoch"]
                resumed += not job["new"]
            # MOBSTER stops losers and never resumes; DyHPO pauses every trial at a rung and resumes some
            assert (resumed > 0) == (method == "dyhpo"), (method, resumed)
            assert max(at.values()) > 1  # someone was trained past the first rung
    finally:
        pipe.close()


@pytest.mark.slow
def test_lcbench_keeps_each_run_and_reads_kept_runs_back_instead_of_running_them(tmp_path: Path) -> None:
    keep = tmp_path / "kept"

    def lcbench(*extra: str, budget: str = "4") -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(REPO / "benchmarks" / "lcbench" / "lcbench.py"), "--tasks", "1", "--seeds", "2",
                               "--budget", budget, "--methods", "random,one-epoch-then-best", "--keep", str(keep), *extra],
                              capture_output=True, text=True, timeout=600)

    first = lcbench("--json", str(tmp_path / "first.json"))
    assert first.returncode == 0, first.stderr[-2000:]
    files = sorted(keep.glob("*/*.json"))
    assert [(f.parent.name, f.name.rsplit("-s", 1)[1]) for f in files] == [
        ("one-epoch-then-best", "0.json"), ("one-epoch-then-best", "1.json"), ("random", "0.json"), ("random", "1.json")]
    epoch_s0 = next(f for f in files if f.parent.name == "one-epoch-then-best" and f.name.endswith("-s0.json"))
    random_s0 = next(f for f in files if f.parent.name == "random" and f.name.endswith("-s0.json"))
    ran = epoch_s0.read_text()
    epoch_s0.unlink()  # as if the benchmark had been stopped before this run ended
    altered = json.loads(random_s0.read_text())
    altered.update(best=[float("-inf")] * len(altered["best"]), commit="0000000")  # found nothing, elsewhere
    random_s0.write_text(json.dumps(altered))

    second = lcbench("--json", str(tmp_path / "second.json"))
    assert second.returncode == 0, second.stderr[-2000:]
    assert "3 runs read back" in second.stderr and "come from commits 0000000" in second.stderr
    assert epoch_s0.read_text() == ran  # the missing run ran again, as it ran before
    before, after = (json.loads((tmp_path / name).read_text()) for name in ("first.json", "second.json"))
    assert before["random"]["1.0"][0] != 1.0 and after["random"]["1.0"][0] == 1.0  # the kept run was read, not rerun

    other = lcbench(budget="5")
    assert other.returncode != 0 and str(random_s0) in other.stderr and "--budget 5" in other.stderr


def test_an_optimizer_process_that_dies_is_one_line_saying_its_last_words(tmp_path: Path) -> None:
    from lcbench import AskTell

    script = tmp_path / "dies.py"
    script.write_text("import sys\nsys.stdin.readline()\nprint('loading the surrogate', file=sys.stderr)\n"
                      "raise SystemExit('model.onnx: no such file')\n")
    pipe = AskTell(Path(sys.executable), str(script))
    with pytest.raises(SystemExit) as ended:
        pipe.request({"op": "describe"})
    pipe.close()
    assert str(ended.value) == "lcbench: the optimizer process ended on 'describe' (exit 1): model.onnx: no such file"
