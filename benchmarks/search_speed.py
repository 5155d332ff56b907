"""Proxy speed: the same 12-trial search at the `lowres_half` rung run with the engine settings
from before issue 18 (NCHW everywhere, no compile) and with today's defaults (memory format and
compile `auto`), same seed, same trials (random sampler, no pruning: the trials cannot depend on
the arm). Each arm is a fresh `tianfeng search` process with its own empty compile and layout
caches (every first measurement and compile is paid inside the arm); the decoded data set is
shared and decoded before the first arm. Prints each arm's total trial time and its ratio to the
old settings, the best trial's proxy score in each, and the same for one full-fidelity run (the
old arm's best trial promoted) under the old settings, the defaults and compile forced on.
`--extra-workers 2` adds an arm with the defaults and two worker processes of one thread each."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna
import yaml
from common import ROOT, data_source, print_table
from optuna.trial import TrialState

SPACE = ROOT / "search_spaces" / "large_batch.yaml"
OLD_SETTINGS = {"memory_format": "contiguous", "engine": {"compile": "off"}}
SHARED_CACHE = ("datasets", "decoded", "scans")  # the data set, decoded once for every arm


def arm_cache(tmp: Path, name: str) -> Path:
    """A cache of the arm's own (layout and compile records, inductor) that shares the data."""
    cache = tmp / f"cache-{name}"
    if not cache.exists():
        cache.mkdir()
        for sub in SHARED_CACHE:
            (tmp / "shared" / sub).mkdir(parents=True, exist_ok=True)
            (cache / sub).symlink_to(tmp / "shared" / sub)
    return cache


def space_with(base_changes: dict, path: Path) -> Path:
    space = yaml.safe_load(SPACE.read_text())
    for key, value in base_changes.items():
        if isinstance(value, dict):
            space["base"].setdefault(key, {}).update(value)
        else:
            space["base"][key] = value
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    return path


def tianfeng(args: list[str], cache: Path, cwd: Path, threads: int | None = None) -> float:
    env = {**os.environ, "TIANFENG_CACHE": str(cache), "PYTHONPATH": str(ROOT)}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "tianfeng.cli", *args], cwd=cwd, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def search(tmp: Path, name: str, space: Path, cache: Path, a, workers: int = 1) -> dict:
    data = data_source(a.data)
    wall = tianfeng(["search", "--space", str(space), *(["--data", data] if data else []),
                     "--study", name, "--storage", f"sqlite:///{tmp}/{name}.db", "--fidelity", a.fidelity,
                     "--trials", str(a.trials), "--sampler", "random", "--pruner", "none", "--seed", str(a.seed),
                     "--objective", "accuracy", "--runs-dir", str(tmp / "runs"), "--workers", str(workers)],
                    cache, tmp)
    trials = optuna.load_study(study_name=name, storage=f"sqlite:///{tmp}/{name}.db").get_trials()
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    best = max(done, key=lambda t: t.value)
    return {"wall": wall, "trial_s": sum((t.datetime_complete - t.datetime_start).total_seconds() for t in done),
            "complete": len(done), "best": best.number, "best_value": best.value,
            "params": [t.params for t in sorted(trials, key=lambda t: t.number)]}


def full_run(tmp: Path, study: str, trial: int, label: str, sets: list[str], cache: Path) -> float:
    args = ["promote", str(trial), "--study", study, "--storage", f"sqlite:///{tmp}/{study}.db",
            "--runs-dir", str(tmp / f"full-{label}")]
    for s in sets:
        args += ["--set", s]
    return tianfeng(args, cache, tmp)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="cifar5", help="cifar5 (default), digits or a data source")
    parser.add_argument("--fidelity", default="lowres_half")
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-full", action="store_true", help="skip the full-fidelity runs")
    parser.add_argument("--extra-workers", type=int, default=0,
                        help="also run the defaults with this many one-thread worker processes")
    parser.add_argument("--keep", type=Path, help="keep the studies and runs here")
    a = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="search-speed-")) if a.keep is None else a.keep
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        old_space = space_with(OLD_SETTINGS, tmp / "old_settings.yaml")
        new_space = space_with({}, tmp / "defaults.yaml")
        # decode the data set into the shared cache once, outside every measurement
        search(tmp, "warmup", new_space, arm_cache(tmp, "warmup"), argparse.Namespace(**{**vars(a), "trials": 1}))
        arms = {"old settings": search(tmp, "old", old_space, arm_cache(tmp, "old"), a),
                "defaults (cold caches)": search(tmp, "new", new_space, arm_cache(tmp, "new"), a),
                "defaults (caches of the run above)": search(tmp, "new_again", new_space, arm_cache(tmp, "new"), a)}
        if a.extra_workers:
            arms[f"defaults, {a.extra_workers} workers"] = search(tmp, "workers", new_space, arm_cache(tmp, "workers"),
                                                                  a, workers=a.extra_workers)
        base = arms["old settings"]
        same = all(r["params"] == base["params"] for r in arms.values())
        rows = [(name, f"{r['complete']}", f"{r['trial_s']:.1f} s", f"{r['wall']:.1f} s",
                 f"{base['trial_s'] / r['trial_s']:.2f}x", f"{base['wall'] / r['wall']:.2f}x",
                 f"#{r['best']} {r['best_value']:.2f}") for name, r in arms.items()]
        print_table(f"{a.trials}-trial search at {a.fidelity} on {a.data} (random sampler seed {a.seed}, no pruning; "
                    f"same trials in every arm: {same})", rows,
                    headers=("arm", "complete", "trial time", "wall", "speed (trials)", "speed (wall)", "best trial"))
        if not a.no_full:
            best = base["best"]
            full = {"old settings": full_run(tmp, "old", best, "old", ["memory_format=contiguous", "engine.compile=off"],
                                             arm_cache(tmp, "full-old")),
                    # the study's space carries the old settings in its base: set the defaults back
                    "defaults": full_run(tmp, "old", best, "new", ["memory_format=auto", "engine.compile=auto"],
                                         arm_cache(tmp, "full-new")),
                    "compile on": full_run(tmp, "old", best, "on", ["engine.compile=on"], arm_cache(tmp, "full-on"))}
            print_table(f"one full-fidelity run: trial #{best} promoted (wall time of `tianfeng promote`)",
                        [(name, f"{s:.1f} s", f"{full['old settings'] / s:.2f}x") for name, s in full.items()],
                        headers=("settings", "wall", "speed"))
    finally:
        if a.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
