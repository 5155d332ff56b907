"""Search methods replayed against a recorded pool (record_pool.py) instead of training: a trial
reads its recipe's recorded curve epoch by epoch and costs that epoch's recorded CPU seconds, so a
method-seed takes a second or two and hundreds of seeds take minutes.

    python benchmarks/search/replay.py --seeds 100                        # every method, the near-best pool
    python benchmarks/search/replay.py --methods tianfeng,optuna-tpe --seeds 20 --budget 1440
    python benchmarks/search/replay.py --seeds 100 --results              # docs/results/replay_near-best.json

What is replayed, and how it stays faithful to the live benchmark (time_to_target.py):
- The machine is `--cores` cores (2); the budget (`--budget`, seconds of that machine) is spent
  as the live protocol spends its wall clock: searching methods run one trial per core, each on
  one thread, and a promoted whole run takes every core (its CPU seconds shared among them).
- Proposals come from the search's own code: its sampler (`make_sampler`, one stream per worker
  as `sampler_seed` gives them), its pruners (`judging`: ASHA past each trial's warm-up, or
  Hyperband), the epoch-by-epoch judgement of a trial (`judge_epoch`), the published priors
  queued first, and the leader rules of promotion (`proxy_leader`, `balanced_wait_over`,
  `whole_run_s`). A change to any of them changes the replay.
- A proposal is mapped to the nearest recipe of the pool not yet used in this run (distance over
  the space's parameters normalised to [0, 1], log where the parameter is log, categorical and
  inactive values 1 apart), and the trial then carries that recipe's values, so the sampler learns
  from what was really scored. Nearest neighbour keeps every score a real run's; a fitted
  surrogate would invent scores between recipes, and the pool is where the faithfulness is
  checked (`--faithful`: how far the proposals were moved).
Reported per method over seeds, with bootstrap 95% intervals on every median: the time until a
whole-run score first reaches each target (the pool's top-5% and the setting's targets), and the
best whole-run score by 1/4, 1/2, 3/4 and all of the budget; and the default's time over each other
method's, seed by seed (`paired`), which takes out what the seeds share. A method whose rules do not
depend on the budget (all but those that split it, `SPLITS_BUDGET`) is replayed on past the budget, to
`--horizon` budgets: its first budget is the same run, and a time to a target that comes later is
measured rather than cut at the budget. A run that never reaches a target counts as its horizon;
the share that reached it by the budget and by the horizon are given.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import heapq
import json
import math
import multiprocessing
import statistics
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # common.py, one folder up

import numpy as np
import optuna
from common import ROOT, data_source, print_table, write_results
from optuna.trial import TrialState

from tianfeng.hpo.judge.pruning import judging
from tianfeng.hpo.running.objective import judge_epoch, suggest
from tianfeng.hpo.running.runner import derived_seed
from tianfeng.hpo.sampling.registry import make_sampler
from tianfeng.hpo.space.read import Parameter, SearchSpace, load_space
from tianfeng.hpo.trial_attrs import TrialKey

TABLES = ROOT / "docs" / "results" / "replay"
FRACTIONS = (0.25, 0.5, 0.75, 1.0)
HORIZON = 3.0  # budgets the methods that do not split the budget are replayed for
SEARCH_SHARE = 0.5  # the default and one-epoch: this share of the budget searches, the rest promotes
TOP_SHARE = 0.05  # the pool's top-5% target


@dataclass(frozen=True)
class Recipe:
    id: int
    source: str
    params: dict[str, Any]
    scores: dict[str, list[float]]  # rung -> val_top1 per epoch recorded (a diverged run stops early)
    costs: dict[str, list[float]]  # rung -> CPU seconds per epoch
    epochs: dict[str, int]  # rung -> the epochs its run was set to train
    predicted_s: float | None

    @property
    def whole(self) -> float:
        """The whole run's score: its last epoch's, or 0 for a run stopped before its end."""
        s = self.scores["target"]
        return s[-1] if len(s) == self.epochs["target"] and not math.isnan(s[-1]) else 0.0

    def warmup(self, rung: str) -> float:
        """The recipe's warm-up in the rung's own epochs (compressed with them, as the rung's config has it)."""
        return float(self.params.get("warmup_epochs", 0.0)) * self.epochs[rung] / self.epochs["target"]


def read_pool(path: Path) -> tuple[dict, list[Recipe]]:
    header, recipes = {}, []
    with gzip.open(path, "rt") as f:
        for line in f:
            row = json.loads(line)
            if row.get("kind") == "header":
                header = header or row
                continue
            rungs = row["rungs"]
            recipes.append(Recipe(
                row["id"], row["source"], row["params"],
                {r: [math.nan if e["val_top1"] is None else e["val_top1"] for e in v["epochs"]] for r, v in rungs.items()},
                {r: [e["cpu_s"] for e in v["epochs"]] for r, v in rungs.items()},
                {r: v["total_epochs"] for r, v in rungs.items()}, row.get("predicted_s")))
    recipes.sort(key=lambda r: r.id)
    return header, recipes


class Pool:
    """The recipes and the nearest-unused lookup of a proposal."""

    def __init__(self, space: SearchSpace, recipes: list[Recipe]) -> None:
        self.space, self.recipes = space, recipes
        self._coords = np.array([self.coords(r.params) for r in recipes])

    def coords(self, values: dict[str, Any]) -> list[float]:
        """Each parameter in [0, 1]; categorical as one coordinate per choice; an inactive one at -1
        (a whole unit from any active value)."""
        out: list[float] = []
        for p in self.space.parameters:
            if p.type == "fixed":
                continue
            v = values.get(p.name)
            if p.type == "categorical":
                out += [(-1.0 if v is None else float(v == c)) / math.sqrt(2) for c in p.choices]
            elif v is None:
                out.append(-1.0)
            elif p.log:
                out.append((math.log(v) - math.log(p.low)) / (math.log(p.high) - math.log(p.low)))
            else:
                out.append((v - p.low) / (p.high - p.low) if p.high > p.low else 0.0)
        return out

    def nearest(self, values: dict[str, Any], used: set[int]) -> tuple[Recipe, float]:
        d = np.sqrt(((self._coords - np.array(self.coords(values))) ** 2).sum(axis=1))
        if used:
            d[[i for i, r in enumerate(self.recipes) if r.id in used]] = np.inf
        i = int(np.argmin(d))
        if not math.isfinite(d[i]):
            raise PoolSpent
        return self.recipes[i], float(d[i])

    def by_params(self, params: dict[str, Any], used: set[int]) -> Recipe | None:
        """A recipe of exactly these values (a queued prior), if the pool has one not yet used."""
        return next((r for r in self.recipes if r.id not in used and r.params == params), None)


class PoolSpent(Exception):
    """Every recipe of the pool has been used in this run."""


def carry_values(study: optuna.Study, trial: optuna.Trial, recipe: Recipe, space: SearchSpace) -> None:
    """The trial now holds the recipe's values (what the sampler then learns from), in place of
    the proposal's. Optuna's in-memory storage keeps a trial's values in a record that is replaced
    whole, so this writes the record with the recipe's values and their distributions."""
    storage = study._storage
    frozen = storage.get_trial(trial._trial_id)
    searched = {p.name: p for p in space.parameters if p.type != "fixed"}
    dists = {name: frozen.distributions.get(name) or distribution(searched[name])
             for name in recipe.params if name in searched}  # one the proposal had no use for: from the space
    params = {name: recipe.params[name] for name in dists}
    record = storage._get_trial(trial._trial_id)
    record.params, record.distributions = params, dists
    storage._set_trial(trial._trial_id, record)
    trial._cached_frozen_trial.params = params
    trial._cached_frozen_trial.distributions = dists


def distribution(p: Parameter) -> optuna.distributions.BaseDistribution:
    """The distribution Optuna would record for the space's parameter (as `suggest` asks for it)."""
    if p.type == "categorical":
        return optuna.distributions.CategoricalDistribution(list(p.choices))
    if p.type == "int":
        return optuna.distributions.IntDistribution(int(p.low), int(p.high), log=p.log, step=int(p.step or 1))
    return optuna.distributions.FloatDistribution(p.low, p.high, log=p.log, step=p.step)


@dataclass
class Run:
    """One method-seed: when each whole-run score came (machine seconds) and what was spent."""
    events: list[tuple[float, float]] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)  # when each trial started
    moved: list[float] = field(default_factory=list)  # distance from each proposal to its recipe
    pool_spent_at: float | None = None  # when it asked for more recipes than the pool holds
    horizon: float = 0.0  # how long it was replayed: the budget, or past it (`SPLITS_BUDGET`)

    @property
    def trials(self) -> int:
        return len(self.starts)

    @property
    def pool_spent(self) -> bool:
        return self.pool_spent_at is not None

    def trials_by(self, t: float) -> int:
        return sum(at <= t for at in self.starts)

    def best_by(self, t: float) -> float:
        return max((s for at, s in self.events if at <= t), default=0.0)

    def time_to(self, target: float) -> float | None:
        return next((at for at, s in sorted(self.events) if s >= target), None)


class Machine:
    """The simulated machine: `cores` cores, a clock, and the budget."""

    def __init__(self, pool: Pool, space: SearchSpace, budget: float, cores: int, seed: int) -> None:
        self.pool, self.space, self.budget, self.cores, self.seed = pool, space, budget, cores, seed
        self.now, self.used, self.run = 0.0, set(), Run()
        self.objective = SimpleNamespace(metric="val_top1", mode="accuracy", direction="maximize")

    def whole_run(self, recipe: Recipe, done_epochs: int = 0) -> bool:
        """Train `recipe` whole on every core (going on after `done_epochs` already trained);
        False when the budget ends first."""
        took = sum(recipe.costs["target"][done_epochs:]) / self.cores
        if self.now + took > self.budget:
            self.now = self.budget
            return False
        self.now += took
        self.run.events.append((self.now, recipe.whole))
        return True

    def search(self, study: optuna.Study, samplers: list[optuna.samplers.BaseSampler], rung: str,
               stop_at: float, judge: str = "tianfeng", first_epochs: int | None = None,
               on_end: Callable[[optuna.trial.FrozenTrial, Recipe], None] | None = None,
               pause: Callable[[], bool] | None = None) -> list[tuple[Recipe, optuna.Trial]]:
        """Trials at `rung`, one per core (worker k asks with samplers[k]), until `stop_at`: no
        trial starts after it, and none still training at the budget counts. A target-rung trial
        that completes is a whole-run score; with `first_epochs`, each trial trains only that many
        epochs of its whole run (the one-epoch peer's). Once
        `pause()` is true when a trial ends, no trial starts and the search returns when those
        running have ended (as the live search's workers finish their trial while a promoted run
        waits). Returns the completed trials with their recipes."""
        done: list[tuple[Recipe, optuna.Trial]] = []
        running: list[tuple[float, int, Iterator]] = []  # (time its next epoch ends, worker, its epochs)
        order = 0

        def start(worker: int) -> None:
            nonlocal order
            if self.now >= stop_at or (pause is not None and pause()):
                return
            epochs = self._trial(study, samplers[worker], rung, judge, first_epochs, done, on_end)
            if epochs is None:
                return
            step = next(epochs, None)
            if step is not None:
                order += 1
                heapq.heappush(running, (self.now + step, order, worker, epochs))

        for worker in range(len(samplers)):
            start(worker)
        while running:
            at, _, worker, epochs = heapq.heappop(running)
            if at > self.budget:
                self.now = self.budget
                return done
            self.now = at
            step = next(epochs, None)
            if step is None:
                start(worker)
            else:
                order += 1
                heapq.heappush(running, (self.now + step, order, worker, epochs))
        return done

    def _trial(self, study, sampler, rung, judge, first_epochs, done, on_end) -> Iterator[float] | None:
        study.sampler = sampler
        trial = study.ask()
        values = suggest(trial, self.space)
        queued = self.pool.by_params(values, self.used)
        try:
            recipe, moved = (queued, 0.0) if queued is not None else self.pool.nearest(values, self.used)
        except PoolSpent:
            self.run.pool_spent_at = self.now
            study.tell(trial, state=TrialState.FAIL)
            return None
        self.used.add(recipe.id)
        self.run.starts.append(self.now)
        self.run.moved.append(moved)
        carry_values(study, trial, recipe, self.space)
        trial.set_user_attr(TrialKey.CONFIG, {"schedule": {"warmup_epochs": recipe.warmup(rung)}})
        curve_rung = "target" if first_epochs is not None else rung
        scores, costs = recipe.scores[curve_rung], recipe.costs[curve_rung]
        last = min(first_epochs, recipe.epochs["target"]) if first_epochs is not None else recipe.epochs[rung]
        whole = curve_rung == "target" and last == recipe.epochs["target"]
        return self._epochs(study, trial, recipe, scores, costs, last, judge, done, on_end, whole)

    def _epochs(self, study, trial, recipe, scores, costs, last, judge, done, on_end, whole) -> Iterator[float]:
        for epoch in range(1, last + 1):
            if epoch > len(scores) or math.isnan(scores[epoch - 1]):  # it diverged here: stopped
                yield costs[epoch - 1] if epoch <= len(costs) else 0.0
                study.tell(trial, state=TrialState.PRUNED)
                return
            yield costs[epoch - 1]
            value = scores[epoch - 1]
            if judge == "tianfeng":
                why = judge_epoch(trial, self.objective, epoch, last, value)
            else:
                trial.report(value, epoch)
                why = "pruned" if epoch < last and trial.should_prune() else None
            if why:
                study.tell(trial, state=TrialState.PRUNED)
                return
        study.tell(trial, scores[last - 1])
        done.append((recipe, trial))
        if whole:
            self.run.events.append((self.now, recipe.whole))
        if on_end is not None:
            on_end(study.trials[trial.number], recipe)


# ------------------------------------------------------------------------------------ methods
def _study(machine: Machine, priors: bool, pruner: optuna.pruners.BasePruner | None = None) -> optuna.Study:
    # named by the seed: Hyperband puts a trial in its bracket by a checksum of the study's name,
    # so an unnamed (random) one would make a rerun differ
    study = optuna.create_study(study_name=f"replay-{machine.seed}", direction="maximize",
                                pruner=pruner or optuna.pruners.NopPruner())
    if priors:
        for prior in machine.space.priors:
            study.enqueue_trial(prior.params)
    return study


def _samplers(machine: Machine, name: str, workers: int) -> list[optuna.samplers.BaseSampler]:
    """One sampler per worker, each its own stream, as `sampler_seed` gives a new study's workers."""
    seeds = [machine.seed] + [derived_seed(machine.seed, w, 0) for w in range(1, workers)]
    return [make_sampler(name, machine.space, s) for s in seeds]


def _pruner(machine: Machine, rung: str, name: str) -> optuna.pruners.BasePruner:
    return judging(machine.space, rung, name).pruner


def proxies_then_best(rung: str = "proxy") -> Callable[[Machine], None]:
    """tianfeng's default (at the space's proxy rung, or `--fidelity rung`): TPE, ASHA and the
    priors on the rung for half the budget, then the best proxy trials trained whole, best first,
    with every core."""
    def method(machine: Machine) -> None:
        study = _study(machine, priors=True, pruner=_pruner(machine, rung, "asha"))
        done = machine.search(study, _samplers(machine, "tpe", machine.cores), rung, machine.budget * SEARCH_SHARE)
        for recipe, _ in sorted(done, key=lambda d: -study.trials[d[1].number].value):
            if not machine.whole_run(recipe):
                return
    return method


def search_at_target(sampler: str, pruner: str, priors: bool) -> Callable[[Machine], None]:
    """A search whose every trial is a whole run (its pruner judging over the run's own epochs)."""
    def method(machine: Machine) -> None:
        study = _study(machine, priors, _pruner(machine, "target", pruner) if pruner != "none" else None)
        machine.search(study, _samplers(machine, sampler, machine.cores), "target", machine.budget)
    return method


def proxy_leaders(balanced: bool, rung: str = "proxy") -> Callable[[Machine], None]:
    """`tianfeng search --promote leader` (or `balanced`), at the space's proxy rung or `rung`
    (`--fidelity`): the default's search (TPE, ASHA, the priors), and whenever the search's own
    `proxy_leader` names a trial not yet trained whole, the trials running end, no new one starts,
    and the leader's recipe is trained whole with every core. Nothing ranked below a promoted
    trial is promoted. Balanced: a leader waits until the search's own `balanced_wait_over` says
    the proxies have had as long as the whole runs will have taken with this one: the last whole
    run's time, or before the first, the search's own estimate from the leader's proxy run, as
    `full_run_estimate` makes it (`whole_run_s`: that run's time on every core, times
    `full_run_ratio` of its rung's config and the target's)."""
    def method(machine: Machine) -> None:
        from tianfeng.hpo.space.materialize import build_config
        from tianfeng.promotion.full_run_time import full_run_ratio
        from tianfeng.promotion.leaders import balanced_wait_over, proxy_leader, whole_run_s

        study = _study(machine, priors=True, pruner=_pruner(machine, rung, "asha"))
        samplers = _samplers(machine, "tpe", machine.cores)
        recipes: dict[int, Recipe] = {}  # trial number -> the recipe it trained
        promoted: set[int] = set()
        full = {"s": 0.0, "last": None}  # the whole runs' seconds, and the last one's
        estimates: dict[int, float] = {}  # recipe id -> its whole run's estimate from its proxy

        def estimate(recipe: Recipe) -> float:
            if recipe.id not in estimates:
                epochs = recipe.epochs[rung]
                ratio = full_run_ratio(build_config(machine.space, recipe.params, rung),
                                       build_config(machine.space, recipe.params, "target"))
                estimates[recipe.id] = whole_run_s(sum(recipe.costs[rung]), epochs, epochs, 1, machine.cores) * ratio
            return estimates[recipe.id]

        def due() -> int | None:
            leader = proxy_leader(study)
            if leader is None or leader.number in promoted:
                return None
            if balanced:
                expected = full["last"] or estimate(recipes[leader.number])
                if not balanced_wait_over(machine.now - full["s"], full["s"], expected):
                    return None
            return leader.number

        def on_end(trial: optuna.trial.FrozenTrial, recipe: Recipe) -> None:
            recipes[trial.number] = recipe

        while machine.now < machine.budget:
            machine.search(study, samplers, rung, machine.budget, on_end=on_end, pause=lambda: due() is not None)
            leader = due()
            if leader is None:  # the budget or the pool is spent
                return
            promoted.add(leader)
            began = machine.now
            if not machine.whole_run(recipes[leader]):
                return
            full["last"] = machine.now - began
            full["s"] += full["last"]
    return method


def one_epoch_then_best(machine: Machine) -> None:
    """Egele et al. 2023: random recipes trained one epoch for half the budget, then the best of
    them by that epoch trained whole (from the start), best first."""
    study = _study(machine, priors=False)
    done = machine.search(study, _samplers(machine, "random", machine.cores), "target", machine.budget * SEARCH_SHARE,
                          first_epochs=1)
    firsts = [(study.trials[t.number].value, r) for r, t in done]
    for _, recipe in sorted(firsts, key=lambda f: -f[0]):
        if not machine.whole_run(recipe):
            return


METHODS: dict[str, Callable[[Machine], None]] = {
    "lowres-balanced": proxy_leaders(balanced=True, rung="lowres_half"),
    "lowres-leader": proxy_leaders(balanced=False, rung="lowres_half"),
    "lowres-best": proxies_then_best("lowres_half"),
    "proxy-balanced": proxy_leaders(balanced=True),
    "proxy-leader": proxy_leaders(balanced=False),
    "proxy-best": proxies_then_best(),
    "tianfeng-target": search_at_target("tpe", "asha", priors=True),
    "optuna-tpe": search_at_target("tpe", "none", priors=False),
    "tpe-hyperband": search_at_target("tpe", "hyperband", priors=False),
    "asha": search_at_target("random", "asha", priors=False),
    "random": search_at_target("random", "none", priors=False),
    "one-epoch": one_epoch_then_best,
}
# the methods whose rules split the budget (search half of it, then train whole runs): replayed
# only to the budget, since a longer one would be another run of theirs
SPLITS_BUDGET = frozenset({"lowres-best", "proxy-best", "one-epoch"})
PEERS = ("optuna-tpe", "tpe-hyperband", "asha", "one-epoch", "random")
# the method `tianfeng search --objective accuracy` runs with no mode flags on large_batch.yaml:
# its search rung, lowres_half, and --promote auto (leader where the objective picks one best)
DEFAULT = "lowres-leader"
# the methods that are one of the search's own modes, a flag or two away from the default
MODES = ("lowres-balanced", "lowres-best", "proxy-balanced", "proxy-leader", "proxy-best", "tianfeng-target")
# what each method is, in the product's flags where it is one of its modes
DESCRIBED = {
    "lowres-balanced": "`--promote balanced`: each new leader trained whole once the search has spent as long as "
                       "the full runs",
    "lowres-leader": "the default: proxies at `lowres_half` (TPE, ASHA, the published recipes), each new leader "
                     "trained whole at once (`--promote auto`, leader where the objective picks one best trial)",
    "lowres-best": "`--promote none`: proxies only, then the best trained whole",
    "proxy-balanced": "`--fidelity proxy --promote balanced`",
    "proxy-leader": "`--fidelity proxy`: the default on the dearer rung",
    "proxy-best": "`--fidelity proxy --promote none`: proxies, then the best trained whole",
    "tianfeng-target": "`--fidelity target`: TPE and ASHA over the whole run's epochs",
    "optuna-tpe": "plain Optuna TPE, whole runs",
    "tpe-hyperband": "Optuna TPE + HyperbandPruner",
    "asha": "ASHA over random recipes",
    "random": "random search, whole runs",
    "one-epoch": "one epoch of random recipes, then the best whole",
}
# the live benchmark's names (search_methods.py) of the methods replayed here
LIVE_NAMES = {"tianfeng": "proxy-best", "tianfeng-lowres": "lowres-best", "tianfeng-target": "tianfeng-target",
              "tianfeng-leader": "proxy-leader", "tianfeng-balanced": "proxy-balanced",
              "tianfeng-lowres-leader": "lowres-leader", "tianfeng-lowres-balanced": "lowres-balanced",
              "optuna-tpe": "optuna-tpe",
              "tpe-hyperband": "tpe-hyperband", "ray-asha": "asha", "one-epoch": "one-epoch"}


def replay_space(header: dict) -> SearchSpace:
    """The space the table was recorded in, searched for accuracy alone (as every method of the
    live benchmark searches it)."""
    from ttt_settings import space_for

    from tianfeng.hpo.spec import with_objective

    folder = Path(tempfile.mkdtemp(prefix="replay-space-"))
    return with_objective(load_space(space_for(header.get("setting", "near-best"), folder),
                                     data=data_source(header.get("data", "cifar5"))), "accuracy", None)


def replay(method: str, pool: Pool, space: SearchSpace, budget: float, cores: int, seed: int,
           horizon: float = 1.0) -> Run:
    """One method-seed; one whose rules do not depend on the budget is replayed to `horizon`
    budgets (its first budget is the same run whatever the horizon)."""
    until = budget * (1.0 if method in SPLITS_BUDGET else max(1.0, horizon))
    machine = Machine(pool, space, until, cores, seed)
    METHODS[method](machine)
    machine.run.events = [(t, s) for t, s in machine.run.events if t <= until]
    machine.run.horizon = until
    return machine.run


# ------------------------------------------------------------------------------------ figures
def bootstrap_median(values: list[float], seed: int = 0, rounds: int = 2000) -> tuple[float, float, float]:
    """The median and its bootstrap 95% interval."""
    data = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    medians = np.median(rng.choice(data, size=(rounds, len(data)), replace=True), axis=1)
    return float(np.median(data)), float(np.percentile(medians, 2.5)), float(np.percentile(medians, 97.5))


def summarise(runs: list[Run], budget: float, targets: list[float]) -> dict:
    out: dict[str, Any] = {"seeds": len(runs), "trials_median": statistics.median(r.trials_by(budget) for r in runs),
                           "pool_spent": sum(r.pool_spent_at is not None and r.pool_spent_at <= budget for r in runs),
                           "horizon_s": max(r.horizon for r in runs),
                           "moved_median": statistics.median(m for r in runs for m in r.moved) if any(r.moved for r in runs) else 0.0}
    for target in targets:
        times = [r.time_to(target) for r in runs]
        counted = [t if t is not None else r.horizon for t, r in zip(times, runs, strict=True)]
        median, low, high = bootstrap_median(counted)
        out[f"to_{target:g}"] = {"median_s": median, "interval": [low, high], "reached": sum(t is not None for t in times),
                                 "reached_by_budget": sum(t is not None and t <= budget for t in times),
                                 "band_10_90": [float(np.percentile(counted, 10)), float(np.percentile(counted, 90))]}
    for fraction in FRACTIONS:
        best = [r.best_by(budget * fraction) for r in runs]
        median, low, high = bootstrap_median(best)
        out[f"best_at_{fraction:g}"] = {"median": median, "interval": [low, high],
                                        "band_10_90": [float(np.percentile(best, 10)), float(np.percentile(best, 90))]}
    return out


_SHARED: tuple = ()  # (pool, space, budget, cores, horizon): set before the worker processes fork


def _replay_one(task: tuple[str, int]) -> Run:
    pool, space, budget, cores, horizon = _SHARED
    return replay(task[0], pool, space, budget, cores, task[1], horizon)


def replayed(methods: list[str], pool: Pool, space: SearchSpace, args: argparse.Namespace) -> Iterator[tuple[str, list[Run]]]:
    """Each method with its runs of seeds `--first-seed` onwards, replayed `--jobs` at a time (forked processes
    share the pool as it was read); a seed's run does not depend on which process replays it."""
    global _SHARED
    _SHARED = (pool, space, args.budget, args.cores, args.horizon)
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    tasks = [(m, seed) for m in methods for seed in seeds]
    with contextlib.ExitStack() as stack:
        if args.jobs > 1:
            workers = stack.enter_context(multiprocessing.get_context("fork").Pool(args.jobs))
            runs = workers.imap(_replay_one, tasks, chunksize=4)
        else:
            runs = map(_replay_one, tasks)
        for method in methods:
            done = []
            for seed in range(len(seeds)):
                done.append(next(runs))
                print(f"\r{method}: seed {seed + 1}/{args.seeds}", end="", file=sys.stderr, flush=True)
            print(file=sys.stderr)
            yield method, done


def paired(runs: list[Run], others: list[Run], target: float) -> dict:
    """`runs`' time to `target` over `others`', seed by seed (a seed gives both methods the same
    sampler seeds, so two modes of the search often share their first trials): the median of the
    per-seed ratios with its bootstrap 95% interval, and in how many seeds `runs` was faster,
    slower or level. A run that never reached the target counts as its horizon, so a seed where
    either did not gives a bound; `censored` counts those seeds."""
    ratios, faster, slower, censored = [], 0, 0, 0
    for mine, theirs in zip(runs, others, strict=True):
        a, b = mine.time_to(target), theirs.time_to(target)
        censored += a is None or b is None
        a, b = a if a is not None else mine.horizon, b if b is not None else theirs.horizon
        ratios.append(a / b)
        faster, slower = faster + (a < b), slower + (a > b)
    median, low, high = bootstrap_median(ratios)
    return {"median_ratio": median, "interval": [low, high], "faster": faster, "slower": slower,
            "level": len(ratios) - faster - slower, "censored": censored}


def live_bands(runs: list[Run], target: float, at: float) -> dict:
    """What a live run of `at` seconds is held against: the replay's median and 10-90% band of the
    best score by `at`, and of the time to `target` with the runs that had not reached it by `at`
    counted as `at` (as a live run that ends there is)."""
    best = [r.best_by(at) for r in runs]
    times = [min(at, t) if (t := r.time_to(target)) is not None else at for r in runs]
    return {"at_s": at, "median": float(np.median(best)),
            "band_10_90": [float(np.percentile(best, 10)), float(np.percentile(best, 90))],
            "time_band_10_90": [float(np.percentile(times, 10)), float(np.percentile(times, 90))]}


def against_live(folder: Path, figures: dict, target: float, at: float) -> list[dict]:
    """Each kept live method-seed (time_to_target.py's results in `folder`) against the replay's
    10-90% band of the same method (`live_bands`): its time to `target` (its budget where it did
    not reach it, and no later than `at`) and its best by `at` seconds. Returns one row per live
    run, saying which figures fall outside the band and whether it trained on the pool's kind of
    machine (`figures["table"]["machine"]`): elsewhere its wall times are not the pool's CPU
    seconds."""
    rows = []
    for path in sorted(folder.glob("*-s*.json")):
        live = json.loads(path.read_text())
        method = LIVE_NAMES.get(live["method"])
        if method is None or method not in figures["methods"]:
            continue
        replayed = figures["methods"][method]
        events = sorted((t, s) for t, s in live["events"])
        reached = next((t for t, s in events if s >= target), None)
        best = max((s for t, s in events if t <= at), default=0.0)
        t_band, b_band = replayed["best_at_live"]["time_band_10_90"], replayed["best_at_live"]["band_10_90"]
        time_in = t_band[0] <= min(at, reached if reached is not None else live["budget_s"]) <= t_band[1]
        rows.append({"run": path.stem, "method": method, "budget_s": live["budget_s"], "time_to_target": reached,
                     "time_band": t_band,
                     "time_inside": time_in, "best": best, "best_band": b_band,
                     "best_inside": b_band[0] <= best <= b_band[1], "hardware": live.get("hardware"),
                     "pool_machine": live.get("hardware") == figures["table"].get("machine")})
    return rows


def pool_figures(recipes: list[Recipe], targets: list[float]) -> dict:
    """The table's own figures: per rung, how its score ranks recipes against the whole run
    (Spearman and Kendall), and the share of the pool that reaches each target."""
    from scipy.stats import kendalltau, spearmanr

    whole = [r.whole for r in recipes]
    out: dict[str, Any] = {"recipes": len(recipes), "targets": {}}
    for target in targets:
        out["targets"][f"{target:g}"] = sum(w >= target for w in whole) / len(whole) if whole else None
    # and the whole run's first 1-3 epochs (what the one-epoch peer ranks by)
    rungs = sorted({rung for r in recipes for rung in r.scores} - {"target"}) + ["epochs-1", "epochs-2", "epochs-3"]
    out["rank"] = {}
    for rung in rungs:
        pairs = []
        for r, w in zip(recipes, whole, strict=True):
            if rung.startswith("epochs-"):
                k = int(rung.split("-")[1])
                s = r.scores["target"][k - 1] if len(r.scores["target"]) >= k else 0.0
            else:
                s = r.scores[rung][-1] if len(r.scores[rung]) == r.epochs[rung] else 0.0
            pairs.append((0.0 if math.isnan(s) else s, w))
        if len(pairs) >= 3:
            x, y = zip(*pairs, strict=True)
            first = rung.startswith("epochs-")
            cost = statistics.median((sum(r.costs["target" if first else rung][: int(rung.split("-")[1]) if first else None])
                                      / max(1e-9, sum(r.costs["target"]))) for r in recipes)
            out["rank"][rung] = {"spearman": float(spearmanr(x, y).statistic), "kendall": float(kendalltau(x, y).statistic),
                                 "cost_share": cost}
    return out


def beside(recipes: list[Recipe], others: list[Recipe]) -> dict:
    """The recipes two tables share (the same draw recorded on two kinds of machine): how their
    whole-run scores agree (Spearman, the median absolute difference) and, per rung, the median
    of each recipe's CPU seconds here over there."""
    from scipy.stats import spearmanr

    there = {r.id: r for r in others}
    pairs = [(r, there[r.id]) for r in recipes if r.id in there and r.params == there[r.id].params]
    out: dict[str, Any] = {"recipes": len(pairs)}
    if len(pairs) >= 3:
        here_w, there_w = [a.whole for a, _ in pairs], [b.whole for _, b in pairs]
        out["whole_spearman"] = float(spearmanr(here_w, there_w).statistic)
        out["whole_abs_difference"] = statistics.median(abs(a - b) for a, b in zip(here_w, there_w, strict=True))
        out["cost_ratio"] = {rung: statistics.median(sum(a.costs[rung]) / sum(b.costs[rung]) for a, b in pairs
                                                     if sum(b.costs.get(rung, [])) > 0)
                             for rung in pairs[0][0].costs if rung in pairs[0][1].costs}
    return out


def aims(figures: dict, default: str = DEFAULT) -> dict | None:
    """The default against its peers (`PEERS` replayed here): its median time to the pool's top-5%
    target over the best peer's (aim: at most 1/2) and over plain TPE's (at most 1/3), and whether
    its median best score by each fraction of the budget is the highest of all methods replayed.
    A method that did not reach the target in half its seeds has its horizon as its median: a
    ratio over it is an upper bound. None without the default or a peer."""
    methods, key = figures["methods"], f"to_{figures['top_target']:g}"
    peers = [m for m in PEERS if m in methods]
    if default not in methods or not peers:
        return None
    time = {m: methods[m][key]["median_s"] for m in methods}
    best_peer = min(peers, key=lambda m: (time[m], -methods[m][key]["reached"]))  # level: the one that reached it most
    out: dict[str, Any] = {"default": default, "best_peer": best_peer,
                           "over_best_peer": time[default] / time[best_peer], "best_peer_censored":
                           methods[best_peer][key]["reached"] < methods[best_peer]["seeds"] / 2}
    out["over_best_peer_met"] = out["over_best_peer"] <= 0.5
    if "optuna-tpe" in methods:
        out["over_tpe"] = time[default] / time["optuna-tpe"]
        out["tpe_censored"] = methods["optuna-tpe"][key]["reached"] < methods["optuna-tpe"]["seeds"] / 2
        out["over_tpe_met"] = out["over_tpe"] <= 1 / 3
    out["highest_at"] = {f"{f:g}": all(methods[default][f"best_at_{f:g}"]["median"] >= methods[m][f"best_at_{f:g}"]["median"]
                                       for m in methods) for f in FRACTIONS}
    return out


def spacing(pool: Pool, proposals: int = 500, seed: int = 0) -> dict:
    """How sparse the pool is, beside how far methods' proposals moved: the median distance from
    a recipe to its nearest other recipe, and from a random proposal of the space (`suggest`, as
    a trial asks) to its nearest recipe, in the coordinates the mapping uses."""
    coords = pool._coords
    apart = np.sqrt(((coords[:, None, :] - coords[None, :, :]) ** 2).sum(axis=-1))
    np.fill_diagonal(apart, np.inf)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    drawn = [np.sqrt(((coords - np.array(pool.coords(suggest(study.ask(), pool.space)))) ** 2).sum(axis=1)).min()
             for _ in range(proposals)]
    return {"coordinates": int(coords.shape[1]), "recipe_to_nearest": float(np.median(apart.min(axis=1))),
            "random_proposal_to_nearest": float(np.median(drawn))}


def top_target(recipes: list[Recipe], share: float = TOP_SHARE) -> float:
    """The whole-run score the pool's best `share` reach."""
    return float(np.quantile([r.whole for r in recipes], 1 - share, method="lower"))


def results_path(table: Path) -> Path:
    """The results file of a table's replay: docs/results/replay_<its name>.json."""
    return ROOT / "docs" / "results" / f"replay_{table.name.removesuffix('.jsonl.gz')}.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pool", type=Path, default=TABLES / "near-best.jsonl.gz", help="the recorded table")
    parser.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated, of {', '.join(METHODS)}")
    parser.add_argument("--seeds", type=int, default=100, help="seeds per method (default 100)")
    parser.add_argument("--first-seed", type=int, default=0,
                        help="the first seed (default 0); a change to the search judged on seeds 0-99 is checked on "
                             "others, say --first-seed 100")
    parser.add_argument("--budget", type=float, default=1440.0,
                        help="seconds of the simulated machine (default 1440: 24 minutes, twice the live near-best "
                             "setting's 12, so that a search of whole runs trains about nine; --live-at compares "
                             "with live runs at 12)")
    parser.add_argument("--cores", type=int, default=2, help="the simulated machine's cores (default 2)")
    parser.add_argument("--horizon", type=float, default=HORIZON,
                        help=f"budgets a method whose rules do not depend on the budget is replayed for, so that a "
                             f"time to a target past the budget is measured, not cut at it (default {HORIZON:g}; "
                             "the figures at fractions of the budget are the same for any horizon)")
    parser.add_argument("--targets", default="", help="whole-run val_top1 levels besides the pool's top 5%%")
    parser.add_argument("--live", type=Path, default=None,
                        help="a folder of time_to_target.py's kept live runs of the same setting: each one's time "
                             "to the pool's top-5%% target and best by --live-at, against the replay's 10-90%% band")
    parser.add_argument("--live-at", type=float, default=720.0, help="seconds at which the live best is compared (default 720)")
    parser.add_argument("--beside", type=Path, default=None, metavar="TABLE",
                        help="another table of the same draw (another kind of machine): how the recipes both hold "
                             "agree, and what each rung costs here against there")
    parser.add_argument("--jobs", type=int, default=1,
                        help="method-seeds replayed at once, each in its own process (default 1; the figures are "
                             "the same for any number)")
    parser.add_argument("--results", nargs="?", const=True, type=Path, default=None, metavar="PATH",
                        help="also write the figures with commit, date and machine (default "
                             "docs/results/replay_<the table's name>.json)")
    args = parser.parse_args()
    if args.results is True:
        args.results = results_path(args.pool)
    from tianfeng.terminal.logs import quiet_optuna

    quiet_optuna()
    header, recipes = read_pool(args.pool)
    if not recipes:
        sys.exit(f"replay: {args.pool} holds no recipes yet")
    space = replay_space(header)
    pool = Pool(space, recipes)
    top = top_target(recipes)
    targets = [top, *(float(t) for t in args.targets.split(",") if t)]
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        parser.error(f"--methods: {', '.join(unknown)} unknown; one of {', '.join(METHODS)}")
    figures = {"pool": pool_figures(recipes, targets), "spacing": spacing(pool), "top_target": top,
               "pool_best": max(r.whole for r in recipes),
               "budget_s": args.budget, "cores": args.cores,
               "table": {k: header.get(k) for k in ("commit", "date", "machine", "cpu_precision", "torch", "seed",
                                                    "setting")},
               "methods": {}}
    if args.beside is not None:
        other_header, others = read_pool(args.beside)
        figures["beside"] = {**beside(recipes, others), "table": {k: other_header.get(k) for k in
                                                                  ("commit", "date", "machine", "cpu_precision")}}
    rows, every = [], {}
    for method, runs in replayed(methods, pool, space, args):
        every[method] = runs
        s = summarise(runs, args.budget, targets)
        s["best_at_live"] = live_bands(runs, top, args.live_at)
        figures["methods"][method] = s
        t = s[f"to_{top:g}"]
        rows.append([method, f"{t['median_s']:.0f} [{t['interval'][0]:.0f}, {t['interval'][1]:.0f}]",
                     f"{t['reached_by_budget']}/{args.seeds}" + (f" ({t['reached']} by {s['horizon_s']:g} s)"
                                                                 if s["horizon_s"] > args.budget else ""),
                     *(f"{s[f'best_at_{f:g}']['median']:.2f}" for f in FRACTIONS), f"{s['trials_median']:g}"])
    print_table(f"pool: {len(recipes)} recipes; top-5% target {top:.2f}; budget {args.budget:g} s on {args.cores} cores; "
                f"medians of {args.seeds} seeds", rows,
                headers=("method", f"time to {top:.2f} (s) [95%]", "reached by the budget", *(f"best @{f:g}" for f in FRACTIONS),
                         "trials"))
    if DEFAULT in every:
        figures["paired"] = {m: paired(every[DEFAULT], runs, top) for m, runs in every.items() if m != DEFAULT}
        print(f"\n{DEFAULT}'s time to {top:.2f} over each method's, seed by seed (median ratio [95%], faster/slower "
              "in seeds): " + "; ".join(f"{m} {p['median_ratio']:.2f} [{p['interval'][0]:.2f}, {p['interval'][1]:.2f}] "
                                        f"{p['faster']}/{p['slower']}" for m, p in figures["paired"].items()))
    figures["aims"] = aims(figures)
    if figures["aims"]:
        a = figures["aims"]
        print(f"\n{DEFAULT}'s median time to {top:.2f}: {a['over_best_peer']:.2f} of the best peer's ({a['best_peer']}; aim "
              f"at most 0.5: {'met' if a['over_best_peer_met'] else 'not met'})"
              + (f", {a['over_tpe']:.2f} of plain TPE's (aim at most 0.33: {'met' if a['over_tpe_met'] else 'not met'})"
                 if "over_tpe" in a else "")
              + "; the highest median best at " + ", ".join(f"{f}: {'yes' if v else 'no'}" for f, v in a["highest_at"].items()))
    spent = {m: f["pool_spent"] for m, f in figures["methods"].items() if f["pool_spent"]}
    if spent:
        print(f"replay: the pool ran out of recipes in {', '.join(f'{m} ({n} seeds)' for m, n in spent.items())}: "
              "record more recipes for those figures to hold", file=sys.stderr)
    if args.live is not None:
        figures["live"] = against_live(args.live, figures, top, args.live_at)
        outside = [r for r in figures["live"] if not (r["time_inside"] and r["best_inside"])]
        print(f"\nlive runs against the replay's 10-90% bands: {len(figures['live']) - len(outside)} of "
              f"{len(figures['live'])} inside")
        for r in outside:
            print(f"  {r['run']}: time to {top:.2f} {r['time_to_target']} (band {r['time_band']}), best by "
                  f"{args.live_at:g} s {r['best']:.2f} (band {r['best_band']})")
        elsewhere = sorted({r["hardware"] for r in figures["live"] if not r["pool_machine"]}, key=str)
        if elsewhere:
            print(f"replay: live runs trained on {', '.join(map(str, elsewhere))}, the pool on "
                  f"{figures['table'].get('machine')}: their wall times are not the pool's CPU seconds, so the bands "
                  "do not hold them", file=sys.stderr)
    if args.results:
        write_results(args.results, figures)


if __name__ == "__main__":
    main()
