"""The replay benchmark's machinery on a synthetic pool of the shipped space's recipes (scores a
known function of the values, costs proportional to epochs): proposals map to the nearest unused
recipe, trials carry the recipe's values, the budget and cores are spent as the live protocol
spends them, and the search's own pruner decides what the replay prunes."""

from __future__ import annotations

import contextlib
import math
from pathlib import Path

import numpy as np
import optuna
import pytest
import record_pool  # noqa: E402
import replay  # noqa: E402

EPOCH_S = 10.0


def _score(params: dict, epoch: int, epochs: int) -> float:
    """Better near a peak LR of 1, rising with the epochs: the whole run ranks like its first epochs."""
    quality = 90 - 10 * abs(math.log10(params["base_lr"]))
    return quality * (0.5 + 0.5 * epoch / epochs)


def _rung(params: dict, epochs: int) -> dict:
    return {"status": "completed", "total_epochs": epochs,
            "epochs": [{"epoch": e, "val_top1": _score(params, e, epochs), "val_loss": 1.0, "cpu_s": EPOCH_S,
                        "wall_s": EPOCH_S, "resolution": 16} for e in range(1, epochs + 1)]}


@pytest.fixture(scope="module")
def space():
    return replay.replay_space({"setting": "near-best", "data": "digits"})


@pytest.fixture(scope="module")
def pool(space, tmp_path_factory) -> replay.Pool:
    path = tmp_path_factory.mktemp("pool") / "pool.jsonl.gz"
    record_pool.append_row(path, {"kind": "header", "setting": "near-best", "data": "digits"})
    for recipe in record_pool.draw_pool(space, 40, seed=0):
        epochs = recipe["params"]["epochs"]
        record_pool.append_row(path, {**recipe, "predicted_s": 30.0, "rungs": {
            "target": _rung(recipe["params"], epochs), "proxy": _rung(recipe["params"], max(1, epochs // 2)),
            "lowres_half": _rung(recipe["params"], 1)}})  # a proxy far cheaper than the whole run
    _, recipes = replay.read_pool(path)
    return replay.Pool(space, recipes)


def test_the_pool_reads_back_as_recorded_priors_first(pool) -> None:
    assert len(pool.recipes) == 40 and pool.recipes[0].source.startswith("prior:")
    r = pool.recipes[5]
    assert r.epochs["target"] == r.params["epochs"] and r.whole == pytest.approx(_score(r.params, 1, 1))


def test_a_proposal_maps_to_its_nearest_unused_recipe(pool) -> None:
    r = pool.recipes[7]
    assert pool.nearest(r.params, set()) == (r, 0.0)
    other, moved = pool.nearest(r.params, {r.id})
    assert other.id != r.id and moved > 0
    with pytest.raises(replay.PoolSpent):
        pool.nearest(r.params, {x.id for x in pool.recipes})


@pytest.mark.parametrize("method", list(replay.METHODS))
def test_every_method_uses_each_recipe_once_and_spends_no_more_than_its_budget(pool, space, method) -> None:
    run = replay.replay(method, pool, space, budget=3000.0, cores=2, seed=1)
    assert run.trials <= len(pool.recipes) and run.pool_spent == (run.trials == len(pool.recipes))
    assert run.events and all(0 < t <= 3000.0 for t, _ in run.events)
    assert all(s in {r.whole for r in pool.recipes} for _, s in run.events)  # every score a recorded whole run's


def test_trials_carry_the_recipes_values_not_the_proposals(pool, space) -> None:
    machine = replay.Machine(pool, space, budget=2000.0, cores=2, seed=3)
    study = replay._study(machine, priors=False)
    done = machine.search(study, replay._samplers(machine, "tpe", 2), "target", 2000.0)
    assert done
    for recipe, trial in done:
        assert study.trials[trial.number].params == recipe.params
    assert len({r.id for r, _ in done}) == len(done)


def test_proxies_then_the_best_searches_for_half_the_budget_then_trains_whole_runs_on_every_core(pool, space) -> None:
    run = replay.replay("proxy-best", pool, space, budget=1000.0, cores=2, seed=0)
    assert not run.pool_spent
    assert run.events and min(t for t, _ in run.events) > 500.0  # no whole run before the search's half ends
    times = sorted(t for t, _ in run.events)
    # each promoted run takes its recipe's CPU seconds shared by both cores
    gaps = {round(b - a, 6) for a, b in zip(times, times[1:], strict=False)}
    assert gaps <= {round(e * EPOCH_S / 2, 6) for e in range(6, 31)}


def test_a_promoting_search_trains_its_leaders_whole_as_they_come_and_balanced_waits(pool, space,
                                                                                    monkeypatch) -> None:
    from tianfeng.hpo.space.materialize import build_config
    from tianfeng.promotion.full_run_time import full_run_ratio
    from tianfeng.promotion.leaders import whole_run_s

    def first(method: str) -> tuple[float, float, float]:
        """When the method's first whole run ended, how long it took on both cores, and how long
        the search's own estimate from its `lowres_half` proxy said it would take."""
        at, score = min(replay.replay(method, pool, space, budget=1000.0, cores=2, seed=0).events)
        recipe = next(r for r in pool.recipes if r.whole == score)
        epochs = recipe.epochs["lowres_half"]
        ratio = full_run_ratio(build_config(space, recipe.params, "lowres_half"),
                               build_config(space, recipe.params, "target"))
        return at, sum(recipe.costs["target"]) / 2, whole_run_s(sum(recipe.costs["lowres_half"]), epochs, epochs, 1,
                                                                2) * ratio

    # a leader of the first few proxies is trained whole long before the default's half ends
    assert first("proxy-leader")[0] < 500.0 < first("proxy-best")[0]
    # where proxies are cheap, balanced waits until they have had as long as the search's estimate
    # of that whole run, which the leader does not
    leader, (balanced, took, estimate) = first("lowres-leader"), first("lowres-balanced")
    assert estimate > 2 * EPOCH_S  # more than the proxy's own time: the ratio to the target's config counts
    assert leader[0] - leader[1] < leader[2] and balanced - took >= estimate
    # whole runs come only from the search's own rules: with its balance waiting for nothing,
    # balanced trains as leader does; with no leader named, nothing is trained whole
    from tianfeng.promotion import leaders

    monkeypatch.setattr(leaders, "balanced_wait_over", lambda *_: True)
    assert first("lowres-balanced")[:2] == leader[:2]
    monkeypatch.setattr(leaders, "proxy_leader", lambda study, **_: None)
    assert not replay.replay("proxy-leader", pool, space, budget=1000.0, cores=2, seed=0).events


def test_the_searchs_own_pruner_decides_what_the_replay_prunes(pool, space, monkeypatch) -> None:
    """The replay runs the search's code: a pruner that stops every trial at its first judged
    epoch leaves tianfeng-target no whole run at all."""
    from tianfeng.hpo.sampling import registry

    kept = replay.replay("tianfeng-target", pool, space, budget=2000.0, cores=2, seed=0)
    monkeypatch.setitem(registry.PRUNERS, "asha", lambda epochs: _AlwaysPrune())
    pruned = replay.replay("tianfeng-target", pool, space, budget=2000.0, cores=2, seed=0)
    assert kept.events and not [s for _, s in pruned.events if s]


class _AlwaysPrune(optuna.pruners.BasePruner):
    def prune(self, study, trial) -> bool:
        return True


def test_a_seed_replays_exactly_and_seeds_differ(pool, space) -> None:
    a, b = (replay.replay("optuna-tpe", pool, space, budget=2000.0, cores=2, seed=4) for _ in range(2))
    c = replay.replay("optuna-tpe", pool, space, budget=2000.0, cores=2, seed=5)
    assert a.events == b.events and a.events != c.events


def test_held_out_seeds_are_the_same_runs_a_replay_from_seed_zero_gives(pool, space) -> None:
    """`--first-seed 3 --seeds 2` replays seeds 3 and 4, as a run of seeds 0-4 does."""
    from types import SimpleNamespace

    args = SimpleNamespace(budget=2000.0, cores=2, horizon=1.0, jobs=1, seeds=2, first_seed=3)
    (method, runs), = replay.replayed(["random"], pool, space, args)
    assert method == "random"
    assert [r.events for r in runs] == [replay.replay("random", pool, space, 2000.0, 2, s).events for s in (3, 4)]


def test_the_bootstrap_interval_holds_the_median_and_narrows_with_more_seeds() -> None:
    rng = np.random.default_rng(0)
    small, large = rng.normal(10, 2, 20).tolist(), rng.normal(10, 2, 400).tolist()
    m, lo, hi = replay.bootstrap_median(small)
    assert lo <= m <= hi
    _, lo2, hi2 = replay.bootstrap_median(large)
    assert hi2 - lo2 < hi - lo


def test_the_pools_rank_figures_see_a_proxy_that_ranks_like_the_whole_run(pool) -> None:
    figures = replay.pool_figures(pool.recipes, [80.0])
    assert figures["rank"]["proxy"]["spearman"] > 0.9 and figures["rank"]["epochs-1"]["kendall"] > 0.5
    assert 0 < figures["targets"]["80"] < 1


def test_a_live_run_outside_the_replays_band_is_named(pool, space, tmp_path) -> None:
    import json

    runs = [replay.replay("optuna-tpe", pool, space, budget=2000.0, cores=2, seed=s) for s in range(10)]
    top = replay.top_target(pool.recipes)
    summary = {"best_at_live": replay.live_bands(runs, top, 1000.0)}
    figures = {"methods": {"optuna-tpe": summary}, "table": {"machine": "2 cores, the pool's CPU"}}
    inside = runs[0]
    (tmp_path / "optuna-tpe-s0.json").write_text(json.dumps({"method": "optuna-tpe", "budget_s": 2000.0,
                                                             "events": inside.events,
                                                             "hardware": "2 cores, the pool's CPU"}))
    (tmp_path / "optuna-tpe-s1.json").write_text(json.dumps({"method": "optuna-tpe", "budget_s": 2000.0,
                                                             "events": [[1999.0, 1.0]], "hardware": "2 cores, faster"}))
    rows = {r["run"]: r for r in replay.against_live(tmp_path, figures, top, 1000.0)}
    assert not rows["optuna-tpe-s1"]["best_inside"] and rows["optuna-tpe-s1"]["time_to_target"] is None
    # a live run on another kind of machine is named as such: its wall times are not the pool's CPU seconds
    assert rows["optuna-tpe-s0"]["pool_machine"] and not rows["optuna-tpe-s1"]["pool_machine"]


def test_a_live_run_is_held_against_replayed_runs_cut_where_it_ends() -> None:
    """A replayed run that reaches the target after the live run's end counts as that end, as the
    live run that has not reached it by then does."""
    early, late, never = (replay.Run(events=[(t, 90.0)]) for t in (100.0, 1500.0, 9e9))
    bands = replay.live_bands([early, late, never] * 10, 80.0, 1000.0)
    assert bands["time_band_10_90"] == [100.0, 1000.0] and bands["band_10_90"] == [0.0, 90.0]
    assert bands["at_s"] == 1000.0 and bands["median"] == 0.0


def test_paired_times_are_ratios_seed_by_seed_with_a_miss_counted_as_its_horizon() -> None:
    """The ratio is taken within each seed: the first method is twice as fast in every seed, the
    last of which the second never reaches by its horizon (1000 s)."""
    def run(at: float | None, horizon: float = 1000.0) -> replay.Run:
        return replay.Run(events=[] if at is None else [(at, 90.0)], horizon=horizon)

    mine = [run(t) for t in (50.0, 100.0, 200.0, 400.0, 500.0)]
    theirs = [run(t) for t in (100.0, 200.0, 400.0, 800.0, None)]
    p = replay.paired(mine, theirs, 80.0)
    assert p["median_ratio"] == 0.5 and (p["faster"], p["slower"], p["level"], p["censored"]) == (5, 0, 0, 1)
    assert p["interval"][0] <= 0.5 <= p["interval"][1]
    # a seed neither reaches counts as its two horizons: a method split at the budget has the shorter
    level = replay.paired([run(None, 3000.0)], [run(None, 1000.0)], 80.0)
    assert level["median_ratio"] == 3.0 and level["slower"] == 1 and level["censored"] == 1
    with pytest.raises(ValueError):  # seeds must pair up
        replay.paired(mine, theirs[:4], 80.0)


def test_a_recipes_value_the_proposal_had_no_use_for_takes_its_distribution_from_the_space(pool, space) -> None:
    """A recipe of another optimizer than the proposal's holds a value (LARS's trust coefficient)
    that no trial of the study may have sampled yet: its distribution comes from the space."""
    import optuna

    lars = next(r for r in pool.recipes if "trust_coefficient" in r.params)
    study = optuna.create_study(direction="maximize")
    trial = study.ask()  # a proposal that sampled nothing this study knows
    replay.carry_values(study, trial, lars, space)
    frozen = study._storage.get_trial(trial._trial_id)
    searched = {p.name: p for p in space.parameters if p.type != "fixed"}
    assert frozen.params == {k: v for k, v in lars.params.items() if k in searched}
    assert frozen.distributions["trust_coefficient"] == replay.distribution(searched["trust_coefficient"])
    assert all(d._contains(d.to_internal_repr(frozen.params[n])) for n, d in frozen.distributions.items())


def _figures(times: dict[str, float], reached: dict[str, int], best: dict[str, float]) -> dict:
    return {"top_target": 80.0, "methods": {m: {"seeds": 100, "to_80": {"median_s": t, "reached": reached[m]},
                                                **{f"best_at_{f:g}": {"median": best[m]} for f in replay.FRACTIONS}}
                                            for m, t in times.items()}}


def test_the_aims_compare_the_default_with_its_best_peer_and_plain_tpe() -> None:
    d = replay.DEFAULT
    figures = _figures({d: 400.0, "asha": 900.0, "optuna-tpe": 1440.0, "lowres-balanced": 300.0},
                       {d: 90, "asha": 60, "optuna-tpe": 40, "lowres-balanced": 95},
                       {d: 81.0, "asha": 80.0, "optuna-tpe": 79.0, "lowres-balanced": 81.5})
    a = replay.aims(figures)
    # the best peer is the fastest of the peers (a mode of tianfeng's own is no peer)
    assert a["best_peer"] == "asha" and a["over_best_peer"] == pytest.approx(400 / 900) and a["over_best_peer_met"]
    assert a["over_tpe"] == pytest.approx(400 / 1440) and a["over_tpe_met"] and not a["best_peer_censored"]
    assert a["tpe_censored"]  # TPE reached the target in 40 of 100 seeds: its median is its horizon
    # highest of every method replayed, modes included
    assert a["highest_at"] == {"0.25": False, "0.5": False, "0.75": False, "1": False}
    del figures["methods"]["lowres-balanced"]
    assert all(replay.aims(figures)["highest_at"].values())
    # peers level at the budget: the best is the one that reached the target in more seeds
    figures["methods"]["asha"]["to_80"] = {"median_s": 1440.0, "reached": 47}
    figures["methods"]["optuna-tpe"]["to_80"] = {"median_s": 1440.0, "reached": 42}
    assert replay.aims(figures)["best_peer"] == "asha"
    assert replay.aims({"top_target": 80.0, "methods": {}}) is None


def test_every_method_replayed_is_described() -> None:
    assert set(replay.DESCRIBED) == set(replay.METHODS) and replay.DEFAULT in replay.METHODS


def test_the_pools_spacing_is_each_recipes_distance_to_its_nearest_neighbour(pool) -> None:
    gap = replay.spacing(pool, proposals=50)
    coords = pool._coords
    nearest = [min(float(np.linalg.norm(a - b)) for j, b in enumerate(coords) if j != i) for i, a in enumerate(coords)]
    assert gap["coordinates"] == coords.shape[1]
    assert gap["recipe_to_nearest"] == pytest.approx(float(np.median(nearest)))
    assert 0 < gap["random_proposal_to_nearest"] < max(nearest) * 2


def test_past_the_budget_a_method_that_does_not_split_it_is_measured_not_cut(pool, space) -> None:
    """Plain TPE replayed to three budgets is the same run through the first, and a target it
    reaches after the budget is timed where it is reached; a method that splits its budget (one
    epoch, then the best) is replayed to the budget alone, whatever the horizon."""
    short = replay.replay("optuna-tpe", pool, space, budget=200.0, cores=2, seed=0)
    long = replay.replay("optuna-tpe", pool, space, budget=200.0, cores=2, seed=0, horizon=3.0)
    assert short.horizon == 200.0 and long.horizon == 600.0
    assert [e for e in long.events if e[0] <= 200.0] == short.events and long.events[-1][0] > 200.0
    assert long.trials_by(200.0) == short.trials < long.trials
    later = next(s for t, s in long.events if t > 200.0 and s > short.best_by(200.0))
    assert short.time_to(later) is None and 200.0 < long.time_to(later) <= 600.0
    summary = replay.summarise([short, long], 200.0, [later])[f"to_{later:g}"]
    # the run that never reaches it counts as its own horizon, the other as when it reached it
    assert summary["reached"] == 1 and summary["reached_by_budget"] == 0
    assert summary["median_s"] == pytest.approx((200.0 + long.time_to(later)) / 2)
    never = replay.summarise([short, long], 200.0, [101.0])["to_101"]
    assert never["reached"] == 0 and never["median_s"] == pytest.approx((200.0 + 600.0) / 2)
    split = replay.replay("one-epoch", pool, space, budget=200.0, cores=2, seed=3, horizon=3.0)
    assert split.horizon == 200.0 and split.events == replay.replay("one-epoch", pool, space, 200.0, 2, 3).events


def test_two_tables_of_the_same_draw_are_compared_recipe_by_recipe(pool) -> None:
    """Another machine's table: a quarter of the CPU seconds at the whole run, half at the proxy,
    every score half a point higher; a recipe of the other table with other values is no pair."""
    import dataclasses

    def elsewhere(r: replay.Recipe) -> replay.Recipe:
        return dataclasses.replace(r, scores={k: [x + 0.5 for x in v] for k, v in r.scores.items()},
                                   costs={k: [x * (0.25 if k == "target" else 0.5) for x in v] for k, v in r.costs.items()})

    others = [elsewhere(r) for r in pool.recipes[:20]]
    others[0] = dataclasses.replace(others[0], params={**others[0].params, "epochs": 99})
    figures = replay.beside(others, pool.recipes)
    assert figures["recipes"] == 19 and figures["whole_abs_difference"] == pytest.approx(0.5)
    assert figures["whole_spearman"] == pytest.approx(1.0)
    assert figures["cost_ratio"]["target"] == pytest.approx(0.25) and figures["cost_ratio"]["proxy"] == pytest.approx(0.5)


def test_a_tables_results_file_is_named_after_it() -> None:
    assert replay.results_path(replay.TABLES / "near-best.jsonl.gz").name == "replay_near-best.json"
    assert replay.results_path(replay.TABLES / "near-best-xeon-bf16.jsonl.gz").name == "replay_near-best-xeon-bf16.json"


def test_a_method_seed_replays_the_same_twice_hyperbands_brackets_included(pool, space) -> None:
    runs = [replay.replay("tpe-hyperband", pool, space, budget=3000.0, cores=2, seed=2) for _ in range(3)]
    assert runs[0].events and runs[0].events == runs[1].events == runs[2].events


def test_a_table_takes_no_recipe_from_another_kind_of_machine(tmp_path) -> None:
    import subprocess
    import sys

    from common import ROOT

    space_path = record_pool.space_for("near-best", tmp_path)
    table = tmp_path / "pool.jsonl.gz"
    here = record_pool.provenance()["machine"]
    for machine, precision, refused in ((here, "fp16", True), ("2 cores, another CPU", None, True), (here, None, False)):
        table.unlink(missing_ok=True)
        header = {"kind": "header", "setting": "near-best", "data": "digits", "seed": 0, "rungs": ["target"],
                  "space_sha256": record_pool.space_digest(space_path, ["target"]), "machine": machine}
        record_pool.append_row(table, header if precision is None else {**header, "cpu_precision": precision})
        out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "search" / "record_pool.py"), "--data", "digits",
                              "--recipes", "1", "--rungs", "target", "--table", str(table), "--keep", str(tmp_path / "runs"),
                              "--limit", "0"], capture_output=True, text=True, timeout=300)
        assert (out.returncode != 0 and "recorded on another kind of machine" in out.stderr) == refused, out.stderr[-800:]


def _children(pid: int) -> list[int]:
    """The live processes whose parent is `pid` (from /proc; a zombie counts as ended)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            state, parent = stat.read_text().rsplit(")", 1)[1].split()[:2]
            if int(parent) == pid and state != "Z":
                found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    with contextlib.suppress(OSError, IndexError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return False


@pytest.mark.slow
def test_a_sigterm_to_the_recorder_stops_its_workers_and_keeps_the_table(tmp_path) -> None:
    """`kill PID` (or `timeout`) reaches the recorder alone, not its spawned workers: they must
    be stopped with it, not left recording on, orphaned."""
    import signal
    import subprocess
    import sys
    import time

    from common import ROOT

    recorder = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "search" / "record_pool.py"), "--data",
                                 "digits", "--recipes", "6", "--rungs", "target", "--workers", "2", "--table",
                                 str(tmp_path / "pool.jsonl.gz"), "--keep", str(tmp_path / "runs")],
                                stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while len(_children(recorder.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    workers = _children(recorder.pid)
    assert len(workers) >= 2, "the recorder started no workers"
    recorder.send_signal(signal.SIGTERM)
    _, err = recorder.communicate(timeout=120)
    deadline = time.monotonic() + 60
    while any(_alive(p) for p in workers) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not any(_alive(p) for p in workers), "a worker records on after the recorder was stopped"
    assert recorder.returncode != 0 and "interrupted" in err, err[-800:]
    assert (tmp_path / "pool.jsonl.gz").exists()  # the header, and any recipe recorded, stay
