"""The methods x seeds protocol of benchmarks/search/time_to_target.py: its summary arithmetic, and a
short real run (digits, two seeds, 20 s of budget each: a slow CPU spends ~10 s importing and
spawning) whose every method process is stopped at the budget and read back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

import optuna  # noqa: E402
from optuna.distributions import FloatDistribution  # noqa: E402
from optuna.trial import TrialState  # noqa: E402
from search_methods import read_back, utc_seconds  # noqa: E402
from time_to_target import (  # noqa: E402
    best_by,
    mixed_machines,
    ratio_rows,
    run_all,
    seed_ratios,
    spread,
    summarise,
    time_spread,
    time_to,
)

from tianfeng.hpo.trial_attrs import TrialKey  # noqa: E402


def test_time_to_a_target_and_best_so_far_read_the_events_in_time_order() -> None:
    events = [(10.0, 60.0), (25.0, 72.5), (40.0, 70.0), (55.0, 81.0)]
    assert time_to(events, 70) == 25.0 and time_to(events, 80) == 55.0 and time_to(events, 90) is None
    assert best_by(events, 5) is None and best_by(events, 45) == 72.5 and best_by(events, 60) == 81.0


def test_the_summary_gives_median_and_range_over_seeds_and_says_when_a_seed_missed() -> None:
    assert spread([30.0, 10.0, 20.0], "{:.0f} s") == "20 s [10 s, 30 s]"
    assert spread([None, 40.0, 50.0], "{:.0f}") == "45 [40, 50] (2/3 seeds)"
    assert spread([None, None]) == "-"
    runs = [{"method": "m", "budget_s": 100.0, "core_s": 3600.0 * k, "events": [(20.0 * k, 70.0 + k)]}
            for k in (1, 2, 3)]
    [row] = summarise(runs, [72.0])
    # the seed that missed 72 counts as later than the budget: the median is the later of the two others
    assert row[:3] == ("m", "3", "60 s [40 s, >100 s] (2/3 seeds)")
    assert time_spread([None, None, 30.0], 100.0) == "not reached [30 s, >100 s] (1/3 seeds)"
    assert time_spread([30.0, 10.0, 20.0], 100.0) == "20 s [10 s, 30 s]"
    assert time_spread([None], 100.0) == "-" and time_spread([15.0], 100.0) == "15 s"
    assert row[-1] == "2.00 [1.00, 3.00]"
    assert row[3:7] == ("71.00 (1/3 seeds)", "71.50 [71.00, 72.00] (2/3 seeds)", "72.00 [71.00, 73.00]",
                       "72.00 [71.00, 73.00]")


def test_per_seed_ratios_divide_each_seeds_time_by_the_baselines_and_mark_a_miss_as_a_bound() -> None:
    def run(method: str, seed: int, reached_at: float | None) -> dict:
        return {"method": method, "seed": seed, "budget_s": 100.0,
                "events": [(5.0, 50.0)] + ([(reached_at, 85.0)] if reached_at is not None else [])}

    results = [run("a", 0, 20.0), run("tpe", 0, 80.0),   # 20 / 80
               run("a", 1, 50.0), run("tpe", 1, None),   # tpe missed: 50 / 100 at most
               run("a", 2, None), run("tpe", 2, 40.0),   # a missed: 100 / 40 at least
               run("a", 3, None), run("tpe", 3, None),   # neither: no ratio
               run("a", 4, 30.0)]                        # the baseline did not run this seed
    assert seed_ratios(results, "a", "tpe", 84) == [(0, 0.25, ""), (1, 0.5, "<"), (2, 2.5, ">")]
    [row] = ratio_rows(results, [84], "tpe")
    assert row == ("a", "84", "0.50", "s0 0.25, s1 <0.50, s2 >2.50")
    assert ratio_rows(results, [90], "tpe") == [("a", "90", "-", "neither reached it in any seed")]


@pytest.mark.parametrize("method", ["tianfeng", "tianfeng-lowres", "tianfeng-lowres-balanced", "tianfeng-leader"])
def test_a_promoting_methods_full_fidelity_scores_are_its_promoted_runs_not_its_proxy_trials(
        tmp_path: Path, method: str) -> None:
    from tianfeng.storage.runs import RunRecordStatus, RunStore

    storage = f"sqlite:///{tmp_path}/{method}.db"
    study = optuna.create_study(study_name=method, storage=storage, direction="maximize")
    study.add_trial(optuna.create_trial(value=50.0, params={"x": 0.5}, distributions={"x": FloatDistribution(0, 1)}))
    store = RunStore(storage)
    run_id, _ = store.open_run(study=method, trial_number=0, config_hash="h", kind="promote",
                               run_dir=str(tmp_path / "run"), config_yaml="", proxy_score=50.0)
    store.update(run_id, status=RunRecordStatus.COMPLETED, final_score=70.0, epochs=[])
    assert [score for _, score in read_back(method, tmp_path, t0=0.0)["events"]] == [70.0]


def test_report_warns_when_results_come_from_several_machines_or_settings() -> None:
    one = [{"method": "a", "seed": 0, "machine": "vm-1"}, {"method": "b", "seed": 0, "machine": "vm-1"}]
    assert mixed_machines(one) is None
    warning = mixed_machines([*one, {"method": "a", "seed": 1}, {"method": "a", "seed": 2, "machine": "vm-2"}])
    assert "3 settings (unrecorded (cpu, 1 at once), vm-1 (cpu, 1 at once), vm-2 (cpu, 1 at once))" in warning
    assert "\n" not in warning
    # one host, but a GPU run of 16 at once does not pool with the CPU's one at a time
    gpu = {"method": "a", "seed": 3, "machine": "vm-1", "device": "NVIDIA H200", "parallel": 16}
    assert "vm-1 (NVIDIA H200, 16 at once)" in mixed_machines([*one, gpu])


def test_run_records_times_are_read_as_the_run_store_writes_them() -> None:
    from tianfeng.storage.runs import _now

    written = _now()
    assert abs(utc_seconds(written) - time.time()) < 5  # to the millisecond, as the run store writes it
    assert utc_seconds("2026-11-26 10:00:01.250") - utc_seconds("2026-11-26 10:00:00") == pytest.approx(1.25)


def test_a_kept_method_seed_is_read_back_not_run_again(tmp_path: Path) -> None:
    kept = {"method": "optuna-tpe", "seed": 4, "budget_s": 20.0, "events": [[3.0, 61.0]], "core_s": 9.0}
    (tmp_path / "optuna-tpe-s4.json").write_text(json.dumps(kept))
    # nothing is started: a run would leave its folder, and digits would take its 20 s
    assert run_all([("optuna-tpe", 4)], tmp_path, 20.0, "digits", True, parallel=1) == [kept]
    assert not (tmp_path / "optuna-tpe-s4").exists()


def test_a_kept_result_of_another_budget_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "optuna-tpe-s4.json").write_text(json.dumps({"budget_s": 720.0}))
    with pytest.raises(SystemExit, match=r"optuna-tpe-s4.json was measured with a 720-s budget, this run asks 20 s"):
        run_all([("optuna-tpe", 4)], tmp_path, 20.0, "digits", True, parallel=1)


@pytest.mark.alone
@pytest.mark.slow
def test_methods_and_seeds_run_to_the_budget_and_are_read_back(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "search" / "time_to_target.py"), "--data", "digits",
                          "--budget", "20s", "--seeds", "0,1", "--methods", "optuna-tpe,one-epoch", "--targets", "50",
                          "--keep", str(tmp_path), "--plot", str(tmp_path / "curves.html")],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    for method in ("optuna-tpe", "one-epoch"):
        for seed in (0, 1):
            result = json.loads((tmp_path / f"{method}-s{seed}.json").read_text())
            times = [t for t, _ in result["events"]]
            assert result["trials"] >= 1 and result["core_s"] > 0 and result["machine"]
            assert result["commit"] not in ("", "unknown") and "cores" in result["hardware"]  # where it came from
            assert times == sorted(times) and all(0 < t <= 20 for t in times)
            # each run measured compiles and layouts in a cache of its own, the data set's folders shared
            own = tmp_path / f"{method}-s{seed}" / "cache"
            assert (own / "datasets").is_symlink() and not (own / "compile.json").is_symlink()
    assert "optuna-tpe" in out.stdout and "time to 50" in out.stdout and "one-epoch" in out.stdout
    assert "plotly" in (tmp_path / "curves.html").read_text()[:20000].lower()
    again = subprocess.run([sys.executable, str(REPO / "benchmarks" / "search" / "time_to_target.py"), "--report", str(tmp_path),
                            "--targets", "50"], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and again.stdout.splitlines()[-3:] == out.stdout.splitlines()[-5:-2], again.stdout
    assert "settings" not in again.stderr  # one machine measured them all


@pytest.mark.slow
def test_the_default_methods_promotion_trains_the_trial_whole(tmp_path: Path) -> None:
    # the live default's second half goes through the public `tianfeng.promote`: a call the
    # promotion no longer takes would leave every live run of the default without a whole run
    import copy

    from search_methods import _promote

    from tests.search.conftest import TINY_SPACE, write_space
    from tests.search.test_study import spec_for
    from tianfeng.hpo.running.runner import run_search
    from tianfeng.storage.runs import RunStore

    spec = spec_for(tmp_path, write_space(tmp_path, copy.deepcopy(TINY_SPACE)), trials=1, study="d")
    run_search(spec, workers=1, resume=False)
    _promote(spec.options.storage, "d", 0, tmp_path)
    runs = RunStore(spec.options.storage).runs("d")
    assert [(r["kind"], r["trial_number"], r["status"]) for r in runs] == [("promote", 0, "completed")]
    assert Path(runs[0]["run_dir"]).is_relative_to(tmp_path / "runs")


@pytest.mark.alone
@pytest.mark.slow
def test_parallel_runs_method_seeds_at_once_each_on_its_own_cores(tmp_path: Path) -> None:
    import optuna

    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "search" / "time_to_target.py"), "--data", "digits",
                          "--budget", "20s", "--seeds", "0", "--methods", "one-epoch,optuna-tpe", "--targets", "50",
                          "--parallel", "2", "--keep", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    first, second = (json.loads((tmp_path / f"{m}-s0.json").read_text()) for m in ("one-epoch", "optuna-tpe"))
    assert abs(first["started"] - second["started"]) < 10  # at once, not one after the other's 20 s
    assert first["parallel"] == second["parallel"] == 2 and first["cores"] == second["cores"] == 1
    # each method's process saw one core (its affinity) and trained at one thread
    assert first["process"] == second["process"] == {"cores": 1, "threads": 1}
    # one-epoch trains in its own process: its trials ran at the one thread of its one core
    trials = optuna.load_study(study_name="one-epoch",
                               storage=f"sqlite:///{tmp_path}/one-epoch-s0/one-epoch.db").get_trials()
    assert trials and {t.user_attrs.get("cores") for t in trials if t.datetime_complete} == {1}


def _sessions() -> dict[int, tuple[int, str]]:
    """Every process here: pid -> (its session, its command line)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # it ended while being read
            continue
        found[int(entry.name)] = (int(stat.rsplit(")", 1)[1].split()[3]), command)
    return found


@pytest.mark.alone
@pytest.mark.slow
def test_a_killed_benchmark_stops_every_process_its_method_started(tmp_path: Path) -> None:
    log = tmp_path / "stderr.txt"  # not a pipe: processes left behind would hold it open
    with log.open("w") as err:
        bench = subprocess.Popen([sys.executable, str(REPO / "benchmarks" / "search" / "time_to_target.py"), "--data", "digits",
                                  "--budget", "10m", "--seeds", "0", "--methods", "optuna-tpe", "--targets", "50",
                                  "--keep", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=err)
    session = None
    try:
        deadline = time.time() + 180
        while time.time() < deadline:  # the method's process, in a session of its own, and its search workers
            seen = _sessions()
            method = [pid for pid, (_, command) in seen.items()
                      if "search_methods.py" in command and str(tmp_path) in command]
            if method and sum(sid == method[0] for sid, _ in seen.values()) >= 3:
                session = method[0]
                break
            time.sleep(0.5)
        assert session is not None, "the method's search workers never started"
        bench.terminate()  # as `kill` does
        bench.wait(timeout=300)
        said = log.read_text()
        assert bench.returncode == 130 and "interrupted" in said, said[-2000:]
        left = ["started"]
        deadline = time.time() + 60
        while left and time.time() < deadline:  # the workers end on their own Ctrl-C, after the method's process
            left = [command for sid, command in _sessions().values() if sid == session]
            time.sleep(0.5)
        assert left == []
    finally:
        if bench.poll() is None:
            bench.kill()
        if session is not None and any(sid == session for sid, _ in _sessions().values()):
            os.killpg(session, signal.SIGKILL)  # nothing left behind for the tests after it


def test_a_kept_result_of_another_setting_is_refused_in_one_line(tmp_path: Path) -> None:
    # a result kept before settings were recorded is of the shipped space's setting
    (tmp_path / "optuna-tpe-s4.json").write_text(json.dumps({"budget_s": 20.0}))
    with pytest.raises(SystemExit, match=r"optuna-tpe-s4.json was measured in setting 'near-best', this run asks "
                                         r"'costly': keep it in another folder \(--keep\)$"):
        run_all([("optuna-tpe", 4)], tmp_path, 20.0, "digits", True, parallel=1, setting="costly")


def test_a_report_without_targets_times_its_settings_near_best_targets(tmp_path: Path) -> None:
    from ttt_settings import TARGETS

    for method, events in (("optuna-tpe", [[600.0, 85.0], [900.0, 86.5]]), ("tianfeng-lowres-balanced", [[300.0, 84.2]])):
        (tmp_path / f"{method}-s0.json").write_text(json.dumps(
            {"method": method, "seed": 0, "budget_s": 1200.0, "setting": "costly", "events": events, "core_s": 2400.0}))
    # the results say their setting: no --setting needed
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "search" / "time_to_target.py"), "--report", str(tmp_path),
                          "--against", "optuna-tpe"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert TARGETS["costly"] == (84.0, 86.0) and "time to 84" in out.stdout and "time to 86" in out.stdout
    # the default reached 84 at 300 s against TPE's 600 s; it missed 86, so its ratio is the bound 1200/900
    assert "s0 0.50" in out.stdout and "s0 >1.33" in out.stdout, out.stdout


def _compute(space, values: dict, rung: str) -> float:
    """A rung's training FLOPs over the whole data set (epochs x its data share x FLOPs an image)."""
    from tianfeng.cost.step_time import step_cost
    from tianfeng.hpo.space.materialize import build_config

    cfg = build_config(space, values, rung)
    return sum(p.epochs * cfg.data.fraction * step_cost(cfg.model, p.resolution, 3, 10).flops for p in cfg.phases)


def test_the_costly_setting_is_the_shipped_space_with_whole_runs_far_dearer_than_its_proxies(tmp_path: Path) -> None:
    from ttt_settings import SHIPPED, space_for

    from tianfeng.hpo.space.read import load_space

    assert space_for("near-best", tmp_path) == SHIPPED and not list(tmp_path.iterdir())
    path = space_for("costly", tmp_path)
    written = path.read_bytes()
    assert space_for("costly", tmp_path).read_bytes() == written  # the same space every time: results pool
    shipped, costly = load_space(SHIPPED), load_space(path)
    # what the methods search and the rungs they run are the shipped space's: only costs move
    assert [p.name for p in costly.parameters] == [p.name for p in shipped.parameters]
    assert set(costly.fidelities) == set(shipped.fidelities) and costly.search_fidelity == shipped.search_fidelity
    assert [p.name for p in costly.priors] == [p.name for p in shipped.priors]
    epochs = next(p for p in costly.parameters if p.name == "epochs")
    assert (epochs.low, epochs.high) == (30, 40)
    prior = costly.priors[0].params
    whole = _compute(costly, prior, "target")
    assert whole >= 30 * _compute(costly, prior, "lowres_half")  # the cheapest useful proxy
    # a whole run of the same recipe costs 22x the shipped space's: 2.5x the epochs, 4x the pixels and
    # 2.25x the width's FLOPs (dropping any one of the three falls below 20x)
    assert whole >= 20 * _compute(shipped, shipped.priors[0].params, "target")
    with pytest.raises(SystemExit, match="unknown setting 'cheap'; one of near-best, costly"):
        space_for("cheap", tmp_path)


@pytest.mark.slow
def test_tianfeng_target_searches_the_target_rung_so_every_trial_that_ends_is_a_full_fidelity_score(
        tmp_path: Path) -> None:
    # 60 s: with its own empty caches, the first trial's set-up on a loaded 2-core machine can take
    # most of a 30 s budget, leaving no trial that trained
    budget_s = 60
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "search" / "time_to_target.py"), "--data", "digits",
                          "--budget", f"{budget_s}s", "--seeds", "0", "--methods", "tianfeng-target", "--targets", "50",
                          "--keep", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads((tmp_path / "tianfeng-target-s0.json").read_text())
    trials = optuna.load_study(study_name="tianfeng-target",
                               storage=f"sqlite:///{tmp_path}/tianfeng-target-s0/tianfeng-target.db").get_trials()
    # a trial the budget cut before it was prepared records no rung; every trial that trained did so at the target
    trained = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED) or t.intermediate_values]
    assert trained and {t.user_attrs.get(TrialKey.FIDELITY) for t in trained} == {"target"}
    assert {t.user_attrs.get(TrialKey.FIDELITY) for t in trials} <= {"target", None}
    assert any(t.user_attrs.get(TrialKey.PRIOR) for t in trials)  # the published recipes first, as tianfeng search queues them
    complete = sorted(t.value for t in trials if t.state == TrialState.COMPLETE and t.datetime_complete.timestamp()
                      - result["started"] <= budget_s)
    # on a loaded machine no whole run may end within the budget; each that did is an event
    assert sorted(v for _, v in result["events"]) == complete, (complete, result["events"])


def test_kept_methods_the_protocol_no_longer_runs_come_last_in_one_order_whatever_the_hash_seed() -> None:
    script = ("import sys; sys.path[:0] = ['benchmarks', 'benchmarks/search']; import time_to_target as t; "
              "print(t._methods([{'method': m} for m in ('zeta-gone', 'optuna-tpe', 'alpha-gone', 'beta-gone')]))")
    orders = {subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout for seed in range(6)}
    assert orders == {"['optuna-tpe', 'alpha-gone', 'beta-gone', 'zeta-gone']\n"}
