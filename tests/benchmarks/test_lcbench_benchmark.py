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

import optuna
import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_lcbench_compares_methods_on_the_surrogate(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "lcbench" / "lcbench.py"), "--tasks", "1", "--seeds", "1",
                          "--budget", "4", "--methods",
                          "tianfeng,random,tianfeng-pareto,dehb,tianfeng-screen,smac-hyperband,mobster,dyhpo",
                          "--json", str(tmp_path / "r.json")], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "LCBench surrogate, 1 tasks x 1 seeds" in out.stdout and "aim: tianfeng's regret at half the budget" in out.stdout
    regrets = json.loads((tmp_path / "r.json").read_text())
    assert set(regrets) == {"tianfeng", "random", "tianfeng-pareto", "dehb", "tianfeng-screen", "smac-hyperband",
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
                               "--budget", budget, "--methods", "random,tianfeng-screen", "--keep", str(keep), *extra],
                              capture_output=True, text=True, timeout=600)

    first = lcbench("--json", str(tmp_path / "first.json"))
    assert first.returncode == 0, first.stderr[-2000:]
    files = sorted(keep.glob("*/*.json"))
    assert [(f.parent.name, f.name.rsplit("-s", 1)[1]) for f in files] == [
        ("random", "0.json"), ("random", "1.json"), ("tianfeng-screen", "0.json"), ("tianfeng-screen", "1.json")]
    screen_s0 = next(f for f in files if f.parent.name == "tianfeng-screen" and f.name.endswith("-s0.json"))
    random_s0 = next(f for f in files if f.parent.name == "random" and f.name.endswith("-s0.json"))
    ran = screen_s0.read_text()
    screen_s0.unlink()  # as if the benchmark had been stopped before this run ended
    altered = json.loads(random_s0.read_text())
    altered.update(best=[float("-inf")] * len(altered["best"]), commit="0000000")  # found nothing, elsewhere
    random_s0.write_text(json.dumps(altered))

    second = lcbench("--json", str(tmp_path / "second.json"))
    assert second.returncode == 0, second.stderr[-2000:]
    assert "3 runs read back" in second.stderr and "come from commits 0000000" in second.stderr
    assert screen_s0.read_text() == ran  # the missing run ran again, as it ran before
    before, after = (json.loads((tmp_path / name).read_text()) for name in ("first.json", "second.json"))
    assert before["random"]["1.0"][0] != 1.0 and after["random"]["1.0"][0] == 1.0  # the kept run was read, not rerun

    other = lcbench(budget="5")
    assert other.returncode != 0 and str(random_s0) in other.stderr and "--budget 5" in other.stderr


class _ImprovingCurves:
    """Learning curves for the benchmark's search loops, each configuration asked better than every
    one before (so each screen takes the lead); an epoch takes 1.5 s, as in `_curve`."""
    space = {"lr": {"type": "float", "low": 1e-4, "high": 1.0, "log": True}}

    def __init__(self) -> None:
        self.asked = 0

    def curves(self, task: str, configs: list[dict]) -> list[dict]:
        self.asked += len(configs)
        quality = 1.0 - 1.0 / (self.asked + 1)
        return [{"val_accuracy": [quality * (1.0 - math.exp(-e / 8)) for e in range(1, 53)],
                 "time": [1.5 * e for e in range(1, 53)]} for _ in configs]


WHOLE_RUN_S = 20.0  # a charge above this is a whole run's rest (at least 58.5 s), below it a screen (at most 13.5 s)


def _charges(spent: list[float]) -> list[float]:
    """What each step of a run's budget trace charged, in order."""
    return [at - before for before, at in zip([0.0, *spent[:-1]], spent, strict=True)]


def _balanced_at_every_whole_run(spent: list[float]) -> bool:
    """Whether, as each whole run was charged, the screening before it was at least the whole
    runs' time with it."""
    screened = full = 0.0
    for charge in _charges(spent):
        if charge > WHOLE_RUN_S:
            full += charge
            if screened < full:
                return False
        else:
            screened += charge
    return True


def test_the_balanced_screen_trains_a_leader_whole_once_the_screening_is_as_long_as_the_whole_runs() -> None:
    from lcbench import METHODS

    whole = 52 * 1.5  # a whole run's seconds; a one-epoch screen takes 1.5 and the rest of its run 76.5
    runs = {method: METHODS[method](_ImprovingCurves(), "task", 0, 8 * whole)
            for method in ("tianfeng-screen", "tianfeng-screen-balanced")}
    firsts = {method: next(at for at, best in zip(run.spent, run.best, strict=True) if best > -math.inf)
              for method, run in runs.items()}
    assert firsts["tianfeng-screen"] == pytest.approx(3 * 1.5 + whole - 1.5)  # the leader of the first three screens
    assert firsts["tianfeng-screen-balanced"] == pytest.approx(whole + whole - 1.5)  # 52 screens, then its whole run
    assert _balanced_at_every_whole_run(runs["tianfeng-screen-balanced"].spent)
    assert not _balanced_at_every_whole_run(runs["tianfeng-screen"].spent)
    assert sum(charge > WHOLE_RUN_S for charge in _charges(runs["tianfeng-screen-balanced"].spent)) >= 2


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


class _MisrankingCurves(_ImprovingCurves):
    """Each configuration asked leads the one-epoch screen and ends below every one before it: the
    whole runs of the screen's leaders disagree with it, and three epochs rank them as their ends."""

    def curves(self, task: str, configs: list[dict]) -> list[dict]:
        self.asked += len(configs)
        first, rest = 0.1 + 0.01 * self.asked, 0.9 - 0.01 * self.asked
        return [{"val_accuracy": [first] + [rest] * 51, "time": [1.5 * e for e in range(1, 53)]} for _ in configs]


def test_the_fallback_screen_hands_the_budget_to_the_search_over_whole_runs_once_the_screen_misranks() -> None:
    from lcbench import METHODS

    whole = 52 * 1.5
    runs = {method: METHODS[method](_MisrankingCurves(), "task", 0, 8 * whole)
            for method in ("tianfeng-screen", "tianfeng-screen-fallback")}
    charges = {method: [round(c, 6) for c in _charges(run.spent)] for method, run in runs.items()}
    assert 3 * 1.5 in charges["tianfeng-screen"]  # the check lengthened the screen to three epochs there
    assert 3 * 1.5 not in charges["tianfeng-screen-fallback"]  # here screening ended instead
    assert whole not in charges["tianfeng-screen"]  # a screened leader's whole run continues from its screen
    assert whole in charges["tianfeng-screen-fallback"]  # the search trains its trials from the first epoch
    best = runs["tianfeng-screen-fallback"].best
    assert best == sorted(best) and best[-1] == pytest.approx(0.9 - 0.01 * 3)  # the first leader's end, kept
    assert min(charges["tianfeng-screen-fallback"]) > 0  # the search goes on from the budget the screening spent
    assert runs["tianfeng-screen-fallback"].spent[-1] >= 8 * whole


def test_the_search_after_the_screen_is_told_the_whole_runs_it_need_not_train_again() -> None:
    from lcbench import told_search

    screened = optuna.create_study(direction="maximize")
    for screen_score in (0.1, 0.3, 0.2):
        trial = screened.ask()
        trial.suggest_float("lr", 1e-4, 1.0, log=True)
        screened.tell(trial, screen_score)
    study = told_search(0, screened, {0: [0.2, 0.7], 2: [0.1, 0.4]})
    assert [(t.state, t.params, t.value) for t in study.trials] == [
        (optuna.trial.TrialState.COMPLETE, screened.trials[0].params, 0.7),
        (optuna.trial.TrialState.COMPLETE, screened.trials[2].params, 0.4)]
