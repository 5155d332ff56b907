"""Search algorithms compared on many tasks and seeds in minutes: the LCBench surrogate of YAHPO
Gym (an MLP's 52-epoch learning curves on 34 OpenML tasks, predicted by a published model) stands
in for training, so budget allocation, pruning and sampling are compared, not proxies.

Each method gets the same budget in surrogate training seconds (B = `--budget` full runs of a
median configuration of the task); a trial costs the time of the epochs it trained. tianfeng's
methods run through the search's own code: its sampler (`make_sampler`), its pruners and the
epoch-by-epoch judgement of a trial (`judge_epoch`) that a real search uses. Reported per method,
median and quartiles over tasks x seeds: the normalised regret of the best full-fidelity
(52-epoch) accuracy found by each fraction of the budget: (best known - found) / (best known -
median of 400 random configurations), where best known is the best of those 400 and of every
method's finds; 0 is the best known, 1 the median random configuration.

The surrogate runs in an environment of its own (yahpo-gym 1.0.2 pins numpy<2 and
ConfigSpace<=0.6.1), made on first use in $TIANFENG_CACHE/yahpo-gym-1.0.2 with pip; DEHB, the
model-based multi-fidelity peer, runs there too (dehb 0.1.2 works with that ConfigSpace). SMAC3's
multi-fidelity facade (Hyperband with a random forest, `smac-hyperband`) runs in a third
environment, $TIANFENG_CACHE/smac-2.4.1 (it needs ConfigSpace >= 1.0), asked and told through a
pipe (lcbench_smac.py); Syne Tune's MOBSTER and DyHPO (`mobster`, `dyhpo`: Gaussian processes
over the learning curves) in a fourth, $TIANFENG_CACHE/syne-tune-0.13.0 (the last release that
ships them pins numpy < 1.27), through lcbench_synetune.py. PriorBand (NePS) needs a second torch
build, ifBO and LC-PFN weights downloaded at run time: not run here.

    python benchmarks/lcbench/lcbench.py --tasks 6 --seeds 10                    # ~10 min
    python benchmarks/lcbench/lcbench.py --methods tianfeng,optuna-tpe --tasks 2 --seeds 2

`--keep DIR` keeps each method's run on each task and seed as it ends (DIR/<method>/<task>-s<seed>.json)
and reads it back instead of running it again, so a long comparison stopped part way resumes where
it stood; the regret is normalised when the table is printed, over every run kept and new.

    python benchmarks/lcbench/lcbench.py --tasks 12 --seeds 20 --keep runs/lcbench-12x20 --results
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # common.py, one folder up

import numpy as np
import optuna
from common import ROOT, add_results_argument, print_table, provenance, write_results

from tianfeng.hpo.judge.past_warmup import PastWarmup
from tianfeng.hpo.judge.peers import PeerPruner
from tianfeng.hpo.running.objective import judge_epoch
from tianfeng.hpo.sampling.registry import PRUNERS, make_sampler

DATA = Path(__file__).resolve().parent / "data" / "yahpo-lcbench"  # shipped beside the benchmark (Apache-2.0)
FRACTIONS = (0.125, 0.25, 0.5, 1.0)
EPOCHS = 52


def surrogate_python() -> Path:
    """The Python of the surrogate's own environment, made on first use."""
    cache = Path(os.environ.get("TIANFENG_CACHE", Path.home() / ".cache" / "tianfeng"))
    venv = cache / "yahpo-gym-1.0.2"
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"lcbench: making the surrogate's environment in {venv} (yahpo-gym 1.0.2, dehb 0.1.2, ~40 s)",
              file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    if not (venv / "dehb-0.1.2").exists():  # DEHB, the model-based multi-fidelity peer, beside it
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "yahpo-gym==1.0.2", "dehb==0.1.2"],
                       check=True)
        (venv / "dehb-0.1.2").touch()
    return python


def own_python(folder: str, packages: list[str], what: str) -> Path:
    """The Python of an optimizer's own environment in the cache, made with pip on first use."""
    cache = Path(os.environ.get("TIANFENG_CACHE", Path.home() / ".cache" / "tianfeng"))
    venv = cache / folder
    python = venv / "bin" / "python"
    if not (venv / "installed").exists():
        print(f"lcbench: making {what} environment in {venv} ({', '.join(packages)}, ~1 min)", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", *packages], check=True)
        (venv / "installed").touch()
    return python


def smac_python() -> Path:
    return own_python("smac-2.4.1", ["smac==2.4.1"], "SMAC3's")


def synetune_python() -> Path:
    # 0.13.0: the last release with MOBSTER and DyHPO; its Gaussian processes need scipy and autograd
    return own_python("syne-tune-0.13.0", ["syne-tune[gpsearchers]==0.13.0", "numpy<1.27"], "Syne Tune's")


class AskTell:
    """A process of another environment behind a pipe: one JSON request a line in, one answer a
    line out (the surrogate, lcbench_surrogate.py; SMAC3, lcbench_smac.py; Syne Tune,
    lcbench_synetune.py)."""

    def __init__(self, python: Path, script: str, *args: str) -> None:
        # the process's stderr is kept aside, so that when it dies its last line says why
        self._stderr = tempfile.TemporaryFile("w+")  # noqa: SIM115 - closed by close()
        self._proc = subprocess.Popen([str(python), str(Path(__file__).parent / script), *args],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True)

    def request(self, message: dict) -> dict:
        try:
            self._proc.stdin.write(json.dumps(message) + "\n")
            self._proc.stdin.flush()
            line = self._proc.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            code = self._proc.wait()
            self._stderr.seek(0)
            said = [text.strip() for text in self._stderr.read().splitlines() if text.strip()]
            sys.exit(f"lcbench: the optimizer process ended on {message['op']!r} (exit {code})"
                     + (f": {said[-1]}" if said else ""))
        return json.loads(line)

    def close(self) -> None:
        self._proc.stdin.close()
        self._proc.wait()
        self._stderr.close()


class Surrogate:
    """The surrogate process: whole learning curves of configurations on a task."""

    def __init__(self, data: Path) -> None:
        if not (data / "model.onnx").exists():
            sys.exit(f"lcbench: needs the LCBench surrogate files in {data} (config_space.json, encoding.json, model.onnx)")
        self._dir = tempfile.TemporaryDirectory()
        (Path(self._dir.name) / "lcbench").symlink_to(data.resolve())
        self._pipe = AskTell(surrogate_python(), "lcbench_surrogate.py", self._dir.name)
        described = self._ask({"op": "describe"})
        self.tasks: list[str] = described["tasks"]
        self.space: dict[str, dict] = described["space"]

    def _ask(self, request: dict) -> dict:
        return self._pipe.request(request)

    def curves(self, task: str, configs: list[dict]) -> list[dict]:
        return self._ask({"op": "curves", "task": task, "configs": configs})["curves"]

    def dehb(self, task: str, seed: int, budget: float) -> dict:
        return self._ask({"op": "dehb", "task": task, "seed": seed, "budget": budget})

    def close(self) -> None:
        self._pipe.close()
        self._dir.cleanup()


@dataclass
class Run:
    """One method on one task with one seed: the budget spent and the best 52-epoch accuracy after
    each trial."""
    spent: list[float]
    best: list[float]

    def best_at(self, budget: float) -> float:
        found = [b for s, b in zip(self.spent, self.best, strict=True) if s <= budget]
        return found[-1] if found else float("nan")


def suggest(trial: optuna.Trial, space: dict[str, dict]) -> dict:
    out = {}
    for name, p in space.items():
        if p["type"] == "int":
            out[name] = trial.suggest_int(name, int(p["low"]), int(p["high"]), log=p["log"])
        else:
            out[name] = trial.suggest_float(name, p["low"], p["high"], log=p["log"])
    return out


class Replay:
    """An Optuna objective that trains a configuration by replaying its surrogate curve epoch by
    epoch, judged as a real search judges a trial (or by Optuna's own pruner for the Optuna arms),
    until the budget is spent."""

    def __init__(self, surrogate: Surrogate, task: str, budget: float, mode: str, judge: str) -> None:
        self.surrogate, self.task, self.budget, self.judge = surrogate, task, budget, judge
        self.objective = SimpleNamespace(metric="val_accuracy", mode=mode, direction="maximize")
        self.run = Run([], [])
        self.spent, self.best = 0.0, float("-inf")

    def _charge(self, seconds: float, full_score: float | None) -> None:
        self.spent += seconds
        if full_score is not None:
            self.best = max(self.best, full_score)
        self.run.spent.append(self.spent)
        self.run.best.append(self.best)

    def __call__(self, trial: optuna.Trial):
        config = suggest(trial, self.surrogate.space)
        curve = self.surrogate.curves(self.task, [config])[0]
        acc, seconds = curve["val_accuracy"], curve["time"]
        trial.set_user_attr("predicted", {"seconds": seconds[-1]})  # what the peer rule compares
        for epoch in range(1, EPOCHS + 1):
            if self.judge == "tianfeng":
                why = judge_epoch(trial, self.objective, epoch, EPOCHS, acc[epoch - 1])
            else:
                trial.report(acc[epoch - 1], epoch)
                why = "pruned" if epoch < EPOCHS and trial.should_prune() else None
            if why:
                self._charge(seconds[epoch - 1], None)
                raise optuna.TrialPruned(why)
        self._charge(seconds[-1], acc[-1])
        return (acc[-1], seconds[-1]) if self.objective.mode == "pareto" else acc[-1]

    def stop_when_spent(self, study: optuna.Study, _trial) -> None:
        if self.spent >= self.budget:
            study.stop()


def _study(sampler, pruner=None, pareto: bool = False) -> optuna.Study:
    if pareto:
        return optuna.create_study(directions=["maximize", "minimize"], sampler=sampler,
                                   pruner=PeerPruner(maximize=True))  # as a pareto search's study
    return optuna.create_study(direction="maximize", sampler=sampler, pruner=pruner)


def optuna_method(make: Callable[[int], tuple[optuna.Study, str, str]]) -> Callable:
    def run(surrogate: Surrogate, task: str, seed: int, budget: float) -> Run:
        study, mode, judge = make(seed)
        replay = Replay(surrogate, task, budget, mode, judge)
        study.optimize(replay, callbacks=[replay.stop_when_spent], n_trials=10_000)
        return replay.run
    return run


def _space(mode: str) -> SimpleNamespace:
    """What make_sampler reads of a search space."""
    return SimpleNamespace(objective=SimpleNamespace(mode=mode, direction="maximize"))


def one_epoch_then_best(surrogate: Surrogate, task: str, seed: int, budget: float) -> Run:
    """Egele et al. (2023): random configurations trained one epoch with half the budget, then the
    best of them by that epoch trained fully, in order, with the rest."""
    rng = np.random.default_rng(seed)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=int(rng.integers(2**31))))
    run, spent, best, scored = Run([], []), 0.0, float("-inf"), []
    while spent < budget / 2:
        trial = study.ask()
        config = suggest(trial, surrogate.space)
        curve = surrogate.curves(task, [config])[0]
        spent += curve["time"][0]
        scored.append((curve["val_accuracy"][0], curve))
        study.tell(trial, curve["val_accuracy"][0])
        run.spent.append(spent)
        run.best.append(best)
    for _, curve in sorted(scored, key=lambda s: -s[0]):
        if spent >= budget:
            break
        spent += curve["time"][-1] - curve["time"][0]
        best = max(best, curve["val_accuracy"][-1])
        run.spent.append(spent)
        run.best.append(best)
    return run


def _tianfeng_study(seed: int) -> optuna.Study:
    """tianfeng's search over a run's own epochs: its TPE, and ASHA past the warm-up."""
    return optuna.create_study(direction="maximize", sampler=make_sampler("tpe", _space("accuracy"), seed),
                               pruner=PastWarmup(PRUNERS["asha"](EPOCHS)))


def dehb(surrogate: Surrogate, task: str, seed: int, budget: float) -> Run:
    """DEHB, run inside the surrogate's environment (lcbench_surrogate.py says how it is charged)."""
    trace = surrogate.dehb(task, seed, budget)
    return Run(trace["spent"], trace["best"])


_smac: list[AskTell] = []  # one SMAC process for the whole benchmark, started on first use


def smac_hyperband(surrogate: Surrogate, task: str, seed: int, budget: float) -> Run:
    """SMAC3's multi-fidelity facade, charged as DEHB is: each configuration it asks for trains
    from scratch for the epochs of its rung and costs their time; best is the best 52-epoch
    accuracy so far."""
    if not _smac:
        _smac.append(AskTell(smac_python(), "lcbench_smac.py"))
    smac = _smac[0]
    smac.request({"op": "start", "space": surrogate.space, "seed": seed, "epochs": EPOCHS})
    run, spent, best = Run([], []), 0.0, float("-inf")
    while spent < budget:
        job = smac.request({"op": "ask"})
        curve = surrogate.curves(task, [job["config"]])[0]
        epochs = min(EPOCHS, job["epochs"])
        accuracy, seconds = curve["val_accuracy"][epochs - 1], curve["time"][epochs - 1]
        smac.request({"op": "tell", "accuracy": accuracy, "seconds": seconds})
        spent += seconds
        if epochs == EPOCHS:
            best = max(best, accuracy)
        run.spent.append(spent)
        run.best.append(best)
    return run


_synetune: list[AskTell] = []  # one Syne Tune process for the whole benchmark, started on first use


def synetune(method: str) -> Callable[[Surrogate, str, int, float], Run]:
    """Syne Tune's scheduler `method` (mobster or dyhpo), one trial at a time: each trial it starts
    or resumes is reported epoch by epoch until the scheduler stops or pauses it, and costs the
    time of the epochs it trained (a resumed trial continues from its checkpoint, as Syne Tune's own
    simulator charges it); best is the best 52-epoch accuracy so far."""
    def run(surrogate: Surrogate, task: str, seed: int, budget: float) -> Run:
        if not _synetune:
            _synetune.append(AskTell(synetune_python(), "lcbench_synetune.py"))
        scheduler = _synetune[0]
        scheduler.request({"op": "start", "method": method, "space": surrogate.space, "seed": seed, "epochs": EPOCHS})
        out, spent, best, curves = Run([], []), 0.0, float("-inf"), {}
        while spent < budget:
            job = scheduler.request({"op": "ask"})
            if job["new"]:
                curves[job["trial"]] = surrogate.curves(task, [job["config"]])[0]
            curve = curves[job["trial"]]
            trained = scheduler.request({"op": "train", "accuracy": curve["val_accuracy"], "time": curve["time"]})
            spent += trained["seconds"]
            if trained["epoch"] == EPOCHS:
                best = max(best, curve["val_accuracy"][-1])
            out.spent.append(spent)
            out.best.append(best)
        return out
    return run


METHODS: dict[str, Callable] = {
    "tianfeng": optuna_method(lambda seed: (_tianfeng_study(seed), "accuracy", "tianfeng")),
    "optuna-tpe": optuna_method(lambda seed: (_study(optuna.samplers.TPESampler(seed=seed)), "accuracy", "optuna")),
    "optuna-tpe+hyperband": optuna_method(lambda seed: (_study(
        optuna.samplers.TPESampler(seed=seed),
        optuna.pruners.HyperbandPruner(min_resource=1, max_resource=EPOCHS, reduction_factor=3)), "accuracy", "optuna")),
    "random": optuna_method(lambda seed: (_study(optuna.samplers.RandomSampler(seed=seed)), "accuracy", "optuna")),
    "one-epoch-then-best": one_epoch_then_best,
    "dehb": dehb,
    "smac-hyperband": smac_hyperband,
    "mobster": synetune("mobster"),
    "dyhpo": synetune("dyhpo"),
    # the pareto search (accuracy against the full run's time): how high its front reaches
    "tianfeng-pareto": optuna_method(lambda seed: (_study(make_sampler("tpe", _space("pareto"), seed), pareto=True),
                                                   "pareto", "tianfeng")),
    "motpe-pareto": optuna_method(lambda seed: (_study(optuna.samplers.TPESampler(seed=seed, n_startup_trials=8),
                                                       pareto=True), "pareto", "tianfeng")),
}


def reference(surrogate: Surrogate, task: str, n: int = 400) -> tuple[float, float, float]:
    """(best, median) 52-epoch accuracy of `n` random configurations, and their median full time."""
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=12345))
    configs = [suggest(study.ask(), surrogate.space) for _ in range(n)]
    curves = surrogate.curves(task, configs)
    finals = [c["val_accuracy"][-1] for c in curves]
    return max(finals), statistics.median(finals), statistics.median(c["time"][-1] for c in curves)


RESULTS = ROOT / "docs" / "results" / "lcbench.json"


class KeptRuns:
    """Each method's run on a task and seed, kept in `folder` as it ends and read back on a rerun
    (None: nothing kept). A kept run of another budget is refused: its regret would not compare."""

    def __init__(self, folder: Path | None, budget: float) -> None:
        self.folder, self.budget = folder, budget
        self.commit = provenance()["commit"] if folder else ""
        self.commits: set[str] = set()
        self.reused = 0

    def path(self, method: str, task: str, seed: int) -> Path:
        return self.folder / method / f"{task}-s{seed}.json"

    def run(self, method: str, task: str, seed: int, make: Callable[[], Run]) -> Run:
        if self.folder is None:
            return make()
        path = self.path(method, task, seed)
        if path.exists():
            kept = json.loads(path.read_text())
            if kept["budget"] != self.budget:
                sys.exit(f"lcbench: {path}: budget {kept['budget']:g} median full runs, not --budget {self.budget:g}; "
                         "give --keep another folder")
            self.reused += 1
            self.commits.add(kept["commit"])
            return Run(kept["spent"], kept["best"])
        run = make()
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_suffix(".part")  # a run cut while written is not kept
        part.write_text(json.dumps({"method": method, "task": task, "seed": seed, "budget": self.budget,
                                       "commit": self.commit, "spent": run.spent, "best": run.best}))
        part.replace(path)
        self.commits.add(self.commit)
        return run

    def mixed(self) -> str | None:
        """A warning when the runs come from more than one commit."""
        if len(self.commits) > 1:
            return f"lcbench: the kept runs in {self.folder} come from commits {', '.join(sorted(self.commits))}"
        return None


def summary(table: dict[str, dict[float, list[float]]]) -> dict[str, dict[str, list[float]]]:
    """Per method and budget fraction: the 25th, 50th and 75th percentile of the normalised regret,
    rounded as the docs quote them."""
    return {method: {f"{f:g}": [round(float(q), 3) for q in np.percentile(values, [25, 50, 75])]
                     for f, values in by.items()} for method, by in table.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--tasks", type=int, default=6, help="N of the 34 tasks, in the surrogate's order")
    parser.add_argument("--skip-tasks", type=int, default=0,
                        help="start after the first K tasks (tasks held out from those a method was tuned on)")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--budget", type=float, default=20.0, help="in full runs of a median configuration")
    parser.add_argument("--json", type=Path, default=None, help="also write every run's numbers here")
    parser.add_argument("--keep", type=Path, default=None, metavar="DIR",
                        help="keep each run in DIR as it ends and read kept runs back instead of running them again")
    add_results_argument(parser, RESULTS, "each method's median and quartiles")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    methods = args.methods.split(",")
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        sys.exit(f"lcbench: --methods: unknown {', '.join(unknown)}; allowed: {', '.join(METHODS)}")
    surrogate = Surrogate(DATA)
    kept = KeptRuns(args.keep, args.budget)
    started = time.perf_counter()
    runs: dict[str, list[tuple[str, Run, float]]] = {m: [] for m in methods}
    refs: dict[str, tuple[float, float, float]] = {}
    try:
        for task in surrogate.tasks[args.skip_tasks:args.skip_tasks + args.tasks]:
            refs[task] = reference(surrogate, task)
            budget = args.budget * refs[task][2]
            for seed in range(args.seeds):
                for method in methods:
                    run = kept.run(method, task, seed, partial(METHODS[method], surrogate, task, seed, budget))
                    runs[method].append((task, run, budget))
            print(f"task {task} done ({time.perf_counter() - started:.0f} s"
                  + (f", {kept.reused} runs read back from {args.keep}" if kept.reused else "") + ")", file=sys.stderr)
    finally:
        surrogate.close()
        for optimizer in _smac + _synetune:
            optimizer.close()
    if warning := kept.mixed():
        print(warning, file=sys.stderr)
    best_known = {t: max([refs[t][0]] + [max(r.best) for m in runs for task, r, _ in runs[m] if task == t])
                  for t in refs}

    def regret(task: str, found: float) -> float:
        top, median = best_known[task], refs[task][1]
        return 1.0 if found != found or found == float("-inf") else max(0.0, (top - found) / (top - median))

    rows = []
    table: dict[str, dict[float, list[float]]] = {}
    for method, items in runs.items():
        table[method] = {f: [regret(t, r.best_at(f * b)) for t, r, b in items] for f in FRACTIONS}
        cells = []
        for f in FRACTIONS:
            q1, med, q3 = np.percentile(table[method][f], [25, 50, 75])
            cells.append(f"{med:.3f} [{q1:.3f}, {q3:.3f}]")
        rows.append((method, *cells))
    print_table(f"LCBench surrogate, {len(refs)} tasks x {args.seeds} seeds, budget {args.budget:g} median full runs: "
                "normalised regret, median [quartiles], at each fraction of the budget",
                rows, headers=("method", *[f"{f:g} B" for f in FRACTIONS]))
    peers = [m for m in methods if not m.startswith("tianfeng")]
    if "tianfeng" in methods and peers:
        ours_half, ours = (statistics.median(table["tianfeng"][f]) for f in (0.5, 1.0))
        peer_final, best_peer = min((statistics.median(table[m][1.0]), m) for m in peers)
        peer_half, half_peer = min((statistics.median(table[m][0.5]), m) for m in peers)
        print(f"\n  aim: tianfeng's regret at half the budget {ours_half:.3f} <= the best peer's final regret "
              f"{peer_final:.3f} ({best_peer}): {'met' if ours_half <= peer_final else 'not met'}"
              f"\n  (tianfeng's final regret {ours:.3f} <= the best peer's at half the budget {peer_half:.3f} "
              f"({half_peer}): {'met' if ours <= peer_half else 'not met'})")
    if args.json:
        args.json.write_text(json.dumps({m: {str(f): v for f, v in by.items()} for m, by in table.items()}, indent=1))
    if args.results:
        write_results(args.results, {"tasks": len(refs), "skip_tasks": args.skip_tasks, "seeds": args.seeds,
                                     "budget": args.budget, "methods": summary(table)})


if __name__ == "__main__":
    main()
