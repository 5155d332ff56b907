"""Proxy speed: the same 12-trial search at the `lowres_half` rung with the earlier settings
(NCHW everywhere, no compile, one worker) and with today's defaults (memory
format and compile `auto`, `--workers auto`), on the same trials: the space's priors and random
recipes drawn once with --seed, enqueued in every arm (no pruning), so no arm's trials depend on
its timing or worker count. Each arm is a fresh process with its own empty compile and layout
caches (every first measurement and compile is paid inside the arm); the data set is decoded
once, before the first arm, into a cache they share. Prints each arm's total trial time and wall
time against the old settings and its best proxy score; the last arm keeps one worker to show
the engine's share alone. Then one full-fidelity run (the old arm's best trial promoted) under
the old settings, the defaults and compile forced on."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # common.py, one folder up

import optuna
import yaml
from common import ROOT, data_source, own_cache, print_table
from optuna.trial import TrialState

from tianfeng.hpo.running.objective import suggest
from tianfeng.hpo.running.runner import run_search
from tianfeng.hpo.space.read import load_space
from tianfeng.hpo.spec import SearchSpec
from tianfeng.terminal.logs import setup_logging

SPACE = ROOT / "search_spaces" / "large_batch.yaml"
OLD_SETTINGS = {"memory_format": "contiguous", "engine": {"compile": "off"}}


def arm_cache(tmp: Path, name: str) -> Path:
    """A cache of the arm's own (layout and compile records, inductor) that shares the data."""
    return own_cache(tmp / f"cache-{name}", tmp / "shared")


def space_with(base_changes: dict, path: Path) -> Path:
    space = yaml.safe_load(SPACE.read_text())
    for key, value in base_changes.items():
        if isinstance(value, dict):
            space["base"].setdefault(key, {}).update(value)
        else:
            space["base"][key] = value
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    return path


def tianfeng(args: list[str], cache: Path, cwd: Path) -> float:
    """Wall seconds of `python -m <args>` in a fresh process with this arm's cache."""
    paths = [str(ROOT), str(Path(__file__).resolve().parent), str(ROOT / "benchmarks")]
    env = {**os.environ, "TIANFENG_CACHE": str(cache), "PYTHONPATH": os.pathsep.join(paths)}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def recipes(a, n: int) -> list[list]:
    """n random recipes of the space drawn with --seed (the same for every arm)."""
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=a.seed))
    space = load_space(SPACE, data=data_source(a.data))
    return [[f"random-{i}", suggest(study.ask(), space)] for i in range(n)]


def run_arm(spec_path: Path) -> None:
    """In the arm's own process: the search of one arm, its trials enqueued."""
    spec = json.loads(spec_path.read_text())
    search = SearchSpec.of(objective="accuracy", space_path=spec["space"], data=spec["data"], storage=spec["storage"],
                        study=spec["study"], sampler="random", pruner="none", seed=spec["seed"], trials=spec["trials"],
                        timeout_s=None, runs_dir=spec["runs"], rung=spec["fidelity"],
                        warm_start=tuple((label, params) for label, params in spec["recipes"]))
    setup_logging()
    run_search(search, spec["workers"], resume=False)


def search(tmp: Path, name: str, space: Path, cache: Path, a, trial_recipes: list,
           workers: int | str = "auto") -> dict:
    storage = f"sqlite:///{tmp}/{name}.db"
    spec = tmp / f"{name}.json"
    spec.write_text(json.dumps({"space": str(space), "data": data_source(a.data), "storage": storage, "study": name,
                                "seed": a.seed, "trials": a.trials, "runs": str(tmp / "runs"), "fidelity": a.fidelity,
                                "recipes": trial_recipes, "workers": workers}))
    wall = tianfeng(["search_speed", "--run-arm", str(spec)], cache, tmp)
    trials = optuna.load_study(study_name=name, storage=storage).get_trials()
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    best = max(done, key=lambda t: t.value)
    waits = data_waits(tmp / "runs" / name)
    return {"wall": wall, "wait_median": statistics.median(waits), "wait_max": max(waits), "trial_s": sum((t.datetime_complete - t.datetime_start).total_seconds() for t in done),
            "complete": len(done), "best_value": best.value, "best_params": best.params,
            "params": sorted(json.dumps(t.params, sort_keys=True) for t in trials)}


def data_waits(runs: Path) -> list[float]:
    """The data-wait share of every epoch of every run under `runs` (the engine's metrics.jsonl)."""
    return [json.loads(line)["data_wait_fraction"] for path in sorted(runs.rglob("metrics.jsonl"))
            for line in path.read_text().splitlines() if line.strip()]


def full_run(tmp: Path, study: str, trial: int, label: str, sets: list[str], cache: Path) -> tuple[float, list[float]]:
    """Wall seconds of `tianfeng promote` and its epochs' data-wait shares."""
    runs = tmp / f"full-{label}"
    args = ["promote", str(trial), "--study", study, "--storage", f"sqlite:///{tmp}/{study}.db", "--runs-dir", str(runs)]
    for s in sets:
        args += ["--set", s]
    return tianfeng(["tianfeng.cli", *args], cache, tmp), data_waits(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="cifar5", help="cifar5 (default), digits or a data source")
    parser.add_argument("--fidelity", default="lowres_half")
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-full", action="store_true", help="skip the full-fidelity runs")
    parser.add_argument("--keep", type=Path, help="keep the studies and runs here")
    parser.add_argument("--run-arm", type=Path, help=argparse.SUPPRESS)  # internal: one arm's process
    a = parser.parse_args()
    if a.run_arm:
        return run_arm(a.run_arm)
    tmp = Path(tempfile.mkdtemp(prefix="search-speed-")) if a.keep is None else a.keep
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        old_space = space_with(OLD_SETTINGS, tmp / "old_settings.yaml")
        new_space = space_with({}, tmp / "defaults.yaml")
        # the space's priors are enqueued after these: the budget runs both
        drawn = recipes(a, max(0, a.trials - len(load_space(SPACE).priors)))
        # decode the data set into the shared cache once, outside every measurement
        search(tmp, "warmup", new_space, arm_cache(tmp, "warmup"), argparse.Namespace(**{**vars(a), "trials": 1}), [])
        arms = {"old settings (--workers 1)": search(tmp, "old", old_space, arm_cache(tmp, "old"), a, drawn, 1),
                "defaults (cold caches)": search(tmp, "new", new_space, arm_cache(tmp, "new"), a, drawn),
                "defaults (caches of the run above)": search(tmp, "new_again", new_space, arm_cache(tmp, "new"), a,
                                                             drawn),
                "defaults but --workers 1": search(tmp, "one", new_space, arm_cache(tmp, "one"), a, drawn, 1)}
        base = next(iter(arms.values()))
        same = all(r["params"] == base["params"] for r in arms.values())
        rows = [(name, f"{r['complete']}", f"{r['trial_s']:.1f} s", f"{r['wall']:.1f} s",
                 f"{base['trial_s'] / r['trial_s']:.2f}x", f"{base['wall'] / r['wall']:.2f}x",
                 f"{r['best_value']:.2f}", "same" if r["best_params"] == base["best_params"] else "other",
                 f"{100 * r['wait_median']:.1f}% / {100 * r['wait_max']:.1f}%")
                for name, r in arms.items()]
        print_table(f"{a.trials}-trial search at {a.fidelity} on {a.data} (priors + random recipes of seed {a.seed}, "
                    f"enqueued; no pruning; same trials in every arm: {same}; speeds against the first arm)", rows,
                    headers=("arm", "complete", "trial time", "wall", "speed (trials)", "speed (wall)", "best score",
                             "best trial", "data wait (median / max epoch)"))
        if not a.no_full:
            old = optuna.load_study(study_name="old", storage=f"sqlite:///{tmp}/old.db")
            best = max((t for t in old.get_trials() if t.state == TrialState.COMPLETE), key=lambda t: t.value).number
            full = {"old settings": full_run(tmp, "old", best, "old", ["memory_format=contiguous", "engine.compile=off"],
                                             arm_cache(tmp, "full-old")),
                    # the study's space carries the old settings in its base: set the defaults back
                    "defaults": full_run(tmp, "old", best, "new", ["memory_format=auto", "engine.compile=auto"],
                                         arm_cache(tmp, "full-new")),
                    "compile on": full_run(tmp, "old", best, "on", ["engine.compile=on"], arm_cache(tmp, "full-on"))}
            print_table(f"one full-fidelity run: trial #{best} promoted (wall time of `tianfeng promote`)",
                        [(name, f"{s:.1f} s", f"{full['old settings'][0] / s:.2f}x",
                          f"{100 * statistics.median(w):.1f}% / {100 * max(w):.1f}%") for name, (s, w) in full.items()],
                        headers=("settings", "wall", "speed", "data wait (median / max epoch)"))
    finally:
        if a.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
