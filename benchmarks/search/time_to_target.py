"""Search methods x seeds on cifar5-dev, each method given the same wall-clock budget, so that no
single lucky or unlucky draw decides the comparison. Methods (benchmarks/search/search_methods.py):
tianfeng-lowres-leader (the default, `tianfeng search` with `--promote auto` on the shipped
space's search rung, `lowres_half`: each new proxy leader trained at full fidelity at once);
tianfeng-lowres-balanced (`--promote balanced`: each new leader trained once the proxies have run
as long as the full runs will have taken) and tianfeng-lowres (`--promote none`: proxies for half
the budget, then the best promoted one after another); tianfeng, tianfeng-leader and
tianfeng-balanced (the same three on the dearer `proxy` rung); tianfeng-target (`tianfeng search
--fidelity target`: the same search at the space's target rung, its ASHA rungs over the whole
run's own epochs, so every trial that ends is a full-fidelity score); the peers: plain Optuna TPE
at full fidelity; Optuna TPE + HyperbandPruner at full fidelity; Ray Tune ASHA at full fidelity
(random sampling); one epoch of random recipes for half the budget, then the best of them
trained whole (Egele et al. 2023). Full fidelity is
`large_batch.yaml`'s `target` rung.

Each method and seed runs in a fresh process that is stopped (Ctrl-C) when its budget is up;
the time counts from that process's start, so start-up is paid by every method. Ctrl-C or a
`kill` of the benchmark stops every method's process and the workers it started. Each process
starts with empty compile and layout caches of its own (`--caches own`, the data set decoded
once and shared), as on a fresh machine, so what a run pays does not depend on the runs before it. Reported per
method, median [min, max] over seeds: the time until a full-fidelity score first reaches each
target, the best full-fidelity score found by each fraction of the budget (the any-time curve,
also drawn to an HTML file), and the compute used. The targets are the setting's near-best ones
(80 and 82 here) unless `--targets` names others.

    python benchmarks/search/time_to_target.py --budget 12m --seeds 0,1,2 --keep /tmp/ttt --plot ttt.html
    python benchmarks/search/time_to_target.py --report /tmp/ttt --targets 70,75,80   # the kept runs again

`--setting costly` runs the same protocol where whole runs cost what they cost at scale
against their proxies (benchmarks/search/ttt_settings.py: the space's target at 32 px, 30-40 epochs, a
wider net; its space file is written into the run's folder); give it a budget of about six
whole runs; its targets are 84 and 86. Each result records its setting, and a kept result of
another setting is refused.

    python benchmarks/search/time_to_target.py --setting costly --budget 60m --seeds 0 \
        --methods tianfeng-lowres-leader,optuna-tpe --keep runs/ttt-costly
    python benchmarks/search/time_to_target.py --report docs/results/time_to_target_costly \
        --against optuna-tpe   # the kept results, with each method's per-seed ratios over plain TPE's

Each result records the commit, the CPU, the machine's host name, what trained (the GPU's name or `cpu`) and how
many method-seeds ran at once; `--report` over results of several such settings warns on stderr,
since two VMs of the same kind can train the same recipe at very different speeds.

On a machine with a GPU, `--parallel K` runs K method-seeds at once, each pinned to its own 1/K of
the cores (its workers and threads sized to them), all training on the GPU. On one GPU with 16
cores, every method and nine seeds of this setting (126 method-seeds without Ray, 135 with it)
take 8 or 9 rounds of 50 s and a stop each, under 10 minutes. That budget is a plan, not yet a
measurement: a whole run takes 33-110 s on two CPU cores, and a GPU shared sixteen ways must
finish several within 50 s for the comparison to mean what the CPU's does:

    python benchmarks/search/time_to_target.py --parallel 16 --budget 50s --seeds 0,1,2,3,4,5,6,7,8 \
        --targets 80,82 --keep runs/ttt-gpu

Its times are the GPU's, shared: they pool with each other, not with one-at-a-time CPU results.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import platform
import queue
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # common.py, one folder up

from common import ROOT, data_source, own_cache, print_table, provenance
from search_methods import METHODS, read_back
from ttt_settings import SETTINGS, TARGETS, space_for

from tianfeng.core.cores import usable_cores
from tianfeng.hpo.options import parse_duration
from tianfeng.trainers.data.sources import default_cache_dir

FRACTIONS = (0.25, 0.5, 0.75, 1.0)


def run_one(method: str, seed: int, root: Path, budget_s: float, data: str, own_caches: bool = True,
            cores: set[int] | None = None, stopping: threading.Event | None = None, parallel: int = 1,
            setting: str = "near-best") -> dict:
    """One method and seed in its own process, stopped at the budget; its scores read back. With
    `own_caches` the process starts with empty compile and layout caches of its own (the data set
    decoded once and shared), so what it pays does not depend on the runs before it. With `cores`
    it runs on those cores alone, its threads and workers sized to them; `stopping` set stops it
    as Ctrl-C does; `parallel` (how many ran at once) and `setting` (ttt_settings: the space
    searched) are recorded with the result."""
    directory = root / f"{method}-s{seed}"
    env = dict(os.environ)
    if own_caches:
        data = data_source(data) or data  # the shared copy's path, not one inside the run's own cache
        env["TIANFENG_CACHE"] = str(own_cache(directory / "cache", default_cache_dir()))
        env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    if cores:
        env["OMP_NUM_THREADS"] = str(len(cores))
    command = [sys.executable, str(ROOT / "benchmarks" / "search" / "search_methods.py"), method, "--seed", str(seed),
               "--dir", str(directory), "--budget-s", str(budget_s), "--data", data,
               "--space", str(space_for(setting, root))]
    t0 = time.time()
    child = subprocess.Popen(command, start_new_session=True, env=env,
                             preexec_fn=(lambda: os.sched_setaffinity(0, cores)) if cores else None)
    try:
        while child.poll() is None and (left := t0 + budget_s - time.time()) > 0:
            if stopping is None:
                time.sleep(min(1.0, left))
            elif stopping.wait(min(1.0, left)):
                raise KeyboardInterrupt
    except KeyboardInterrupt:  # the user's Ctrl-C: the method's own session got none
        _stop(child)
        raise
    if child.poll() is None:
        _stop(child)
    made = provenance()  # the host name stays `machine`, as in results kept before these were recorded
    result = {"method": method, "seed": seed, "budget_s": budget_s, "setting": setting, "started": t0,
              "commit": made["commit"], "hardware": made["machine"], "machine": platform.node(),
              "device": device_name(), "parallel": parallel, "cores": len(cores) if cores else usable_cores(),
              **read_back(method, directory, t0)}
    result["events"] = [(t, v) for t, v in result["events"] if t <= budget_s]  # nothing after the budget counts
    (root / f"{method}-s{seed}.json").write_text(json.dumps(result))
    return result


def device_name() -> str:
    """What trains here: the first GPU's name, or `cpu`."""
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


def core_sets(parallel: int) -> list[set[int]]:
    """The cores this process may use, dealt into `parallel` disjoint sets of equal size."""
    cores = sorted(os.sched_getaffinity(0))
    share = len(cores) // parallel
    if share < 1:
        sys.exit(f"time_to_target: --parallel {parallel} needs at least {parallel} cores; this process may use "
                 f"{len(cores)}")
    return [set(cores[i * share:(i + 1) * share]) for i in range(parallel)]


def run_all(jobs: list[tuple[str, int]], root: Path, budget_s: float, data: str, own_caches: bool,
            parallel: int, setting: str = "near-best") -> list[dict]:
    """Every (method, seed) of `jobs`, started in order, `parallel` at a time, each on cores of
    its own; one Ctrl-C stops them all, the results finished so far kept. A method-seed whose
    result is already in `root` (a run cut short earlier) is read back, not run again."""
    done = {job: kept for job in jobs if (kept := kept_result(root, *job, budget_s, setting)) is not None}
    if done:
        print(f"time_to_target: {len(done)} of {len(jobs)} method-seeds already in {root}; running the other "
              f"{len(jobs) - len(done)}", file=sys.stderr)
    todo = [job for job in jobs if job not in done]
    for method, seed in todo:  # a run cut before its result was written starts again from nothing
        shutil.rmtree(root / f"{method}-s{seed}", ignore_errors=True)
    ran = dict(zip(todo, _run_jobs(todo, root, budget_s, data, own_caches, parallel, setting), strict=True))
    return [done.get(job) or ran[job] for job in jobs]


def kept_result(root: Path, method: str, seed: int, budget_s: float, setting: str = "near-best") -> dict | None:
    """The result of `method` and `seed` kept in `root`, if any; one of another budget or setting
    is an error, since the summary's budget fractions or spaces would mix (results kept before
    settings were recorded are of near-best)."""
    path = root / f"{method}-s{seed}.json"
    if not path.exists():
        return None
    result = json.loads(path.read_text())
    if result["budget_s"] != budget_s:
        sys.exit(f"time_to_target: {path} was measured with a {result['budget_s']:g}-s budget, this run asks "
                 f"{budget_s:g} s: keep it in another folder (--keep)")
    if result.get("setting", "near-best") != setting:
        sys.exit(f"time_to_target: {path} was measured in setting {result.get('setting', 'near-best')!r}, this run "
                 f"asks {setting!r}: keep it in another folder (--keep)")
    return result


def kept_results(folder: Path) -> list[dict]:
    """Every method-seed result kept in `folder`."""
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*-s*.json"))]


def _run_jobs(jobs: list[tuple[str, int]], root: Path, budget_s: float, data: str, own_caches: bool,
              parallel: int, setting: str) -> list[dict]:
    if parallel == 1:
        return [run_one(m, s, root, budget_s, data, own_caches, setting=setting) for m, s in jobs]
    free: queue.Queue[set[int]] = queue.Queue()
    for cores in core_sets(parallel):
        free.put(cores)
    stopping = threading.Event()

    def one(job: tuple[str, int]) -> dict:
        cores = free.get()
        try:
            if stopping.is_set():
                raise KeyboardInterrupt
            return run_one(*job, root, budget_s, data, own_caches, cores=cores, stopping=stopping, parallel=parallel,
                           setting=setting)
        finally:
            free.put(cores)

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        futures = [pool.submit(one, job) for job in jobs]
        try:
            return [f.result() for f in futures]
        except KeyboardInterrupt:
            stopping.set()
            pool.shutdown(wait=True, cancel_futures=True)
            raise


def _stop(child: subprocess.Popen) -> None:
    """Ctrl-C to the method and every process it started; killed if it has not ended in 2 min."""
    os.killpg(child.pid, signal.SIGINT)
    try:
        child.wait(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()


def time_to(events: list[tuple[float, float]], target: float) -> float | None:
    return next((t for t, v in events if v >= target), None)


def best_by(events: list[tuple[float, float]], seconds: float) -> float | None:
    values = [v for t, v in events if t <= seconds]
    return max(values) if values else None


def spread(values: list[float | None], fmt: str = "{:.0f}") -> str:
    """`median [min, max]` of the values that exist, and how many of them exist when not all."""
    there = [v for v in values if v is not None]
    if not there:
        return "-"
    text = fmt.format(statistics.median(there)) + (
        f" [{fmt.format(min(there))}, {fmt.format(max(there))}]" if len(there) > 1 else "")
    return text if len(there) == len(values) else f"{text} ({len(there)}/{len(values)} seeds)"


def time_spread(times: list[float | None], budget_s: float) -> str:
    """Times to a target over seeds: the median with a seed that never reached it counted as
    later than the budget (so a method that misses in some seeds is not flattered by the seeds
    that reached it), `not reached` when the median seed did not, and [min, max]."""
    there = [t for t in times if t is not None]
    if not there:
        return "-"
    middle = statistics.median([math.inf if t is None else t for t in times])
    top = f"{max(there):.0f} s" if len(there) == len(times) else f">{budget_s:.0f} s"
    text = "not reached" if math.isinf(middle) else f"{middle:.0f} s"
    text += f" [{min(there):.0f} s, {top}]" if len(times) > 1 else ""
    return text if len(there) == len(times) else f"{text} ({len(there)}/{len(times)} seeds)"


def setting(result: dict) -> str:
    """Where a result was measured: the host, what trained (older results say neither device nor
    how many ran at once: one CPU process at a time) and how many method-seeds shared it."""
    return (f"{result.get('machine') or 'unrecorded'} ({result.get('device', 'cpu')}, "
            f"{result.get('parallel', 1)} at once)")


def mixed_machines(results: list[dict]) -> str | None:
    """A warning when the results were measured in more than one setting (host, device, how
    many ran at once): the same recipe can train at very different speeds on two VMs of the same
    kind, so their times do not pool; None when they share one."""
    settings = sorted({setting(r) for r in results})
    if len(settings) < 2:
        return None
    return (f"time_to_target: these results come from {len(settings)} settings ({', '.join(settings)}): their times "
            "are pooled below; compare methods within the results of one")


def _methods(results: list[dict]) -> list[str]:
    """The methods of `results` in the protocol's order (a kept run's files come in name order),
    then those it no longer runs (kept results of removed methods) by name."""
    order = {m: i for i, m in enumerate(METHODS)}
    return sorted({r["method"] for r in results}, key=lambda m: (order.get(m, len(order)), m))


def summarise(results: list[dict], targets: list[float]) -> list[tuple[str, ...]]:
    rows = []
    for method in _methods(results):
        runs = [r for r in results if r["method"] == method]
        budget = runs[0]["budget_s"]
        row = [method, str(len(runs))]
        row += [time_spread([time_to(r["events"], target) for r in runs], budget) for target in targets]
        row += [spread([best_by(r["events"], f * budget) for r in runs], "{:.2f}") for f in FRACTIONS]
        row.append(spread([r["core_s"] / 3600 for r in runs], "{:.2f}"))
        rows.append(tuple(row))
    return rows


def seed_ratios(results: list[dict], method: str, against: str, target: float) -> list[tuple[int, float, str]]:
    """Per seed that both ran: `method`'s time to `target` over `against`'s, as (seed, ratio, mark).
    A side that missed within the budget counts as the budget, so the ratio is a bound: mark `<`
    where only `against` missed (the true ratio is lower), `>` where only `method` did; a seed
    where neither reached the target has no ratio."""
    mine = {r["seed"]: r for r in results if r["method"] == method}
    theirs = {r["seed"]: r for r in results if r["method"] == against}
    out = []
    for seed in sorted(mine.keys() & theirs.keys()):
        a, b = time_to(mine[seed]["events"], target), time_to(theirs[seed]["events"], target)
        if a is None and b is None:
            continue
        mark = "" if a is not None and b is not None else ("<" if b is None else ">")
        mine_s = a if a is not None else mine[seed]["budget_s"]
        theirs_s = b if b is not None else theirs[seed]["budget_s"]
        out.append((seed, mine_s / theirs_s, mark))
    return out


def ratio_rows(results: list[dict], targets: list[float], against: str) -> list[tuple[str, ...]]:
    """Every other method against `against`, target by target: the median of the per-seed ratios
    of times to the target (bounds counted at their bound) and each seed's ratio."""
    rows = []
    for method in _methods(results):
        if method == against:
            continue
        for target in targets:
            ratios = seed_ratios(results, method, against, target)
            if not ratios:
                rows.append((method, f"{target:g}", "-", "neither reached it in any seed"))
                continue
            median = statistics.median(r for _, r, _ in ratios)
            rows.append((method, f"{target:g}", f"{median:.2f}",
                         ", ".join(f"s{seed} {mark}{ratio:.2f}" for seed, ratio, mark in ratios)))
    return rows


def plot(results: list[dict], path: Path) -> None:
    """The any-time curves: each method's median best score so far against time, with the
    range over seeds as a band."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for method in _methods(results):
        runs = [r for r in results if r["method"] == method]
        grid = [runs[0]["budget_s"] * i / 100 for i in range(1, 101)]
        per_seed = [[best_by(r["events"], t) for r in runs] for t in grid]
        shown = [(t, [v for v in vs if v is not None]) for t, vs in zip(grid, per_seed, strict=True)]
        shown = [(t, vs) for t, vs in shown if len(vs) == len(runs)]  # once every seed has a score
        if not shown:
            continue
        xs = [t / 60 for t, _ in shown]
        fig.add_trace(go.Scatter(x=xs + xs[::-1], y=[max(vs) for _, vs in shown] + [min(vs) for _, vs in shown][::-1],
                                 fill="toself", opacity=0.15, line={"width": 0}, showlegend=False, hoverinfo="skip",
                                 name=f"{method} range"))
        fig.add_trace(go.Scatter(x=xs, y=[statistics.median(vs) for _, vs in shown], mode="lines", name=method))
    fig.update_layout(title="Best full-fidelity val top-1 so far (median and range over seeds)",
                      xaxis_title="wall time (min)", yaxis_title="val top-1")
    fig.write_html(path, include_plotlyjs=True)


def _terminated(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # a `kill` stops the methods' process groups as Ctrl-C does


def main() -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)  # started in the background, Ctrl-C still stops it
    signal.signal(signal.SIGTERM, _terminated)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", default=",".join(METHODS), help=f"some of {', '.join(METHODS)}")
    parser.add_argument("--seeds", default="0,1,2", help="seeds, each a different random stream (default 0,1,2)")
    parser.add_argument("--budget", default="12m", help="wall-clock budget of each method and seed: 90s, 12m, 1h "
                        "(default 12m: on a 2-core CPU one full-fidelity run takes 2-5 min)")
    parser.add_argument("--targets", help="full-fidelity val top-1 levels to time (default: the setting's "
                        f"near-best targets, {'; '.join(f'{k} {a:g},{b:g}' for k, (a, b) in TARGETS.items())})")
    parser.add_argument("--data", default="cifar5", help="cifar5 (default) or digits (a quick smoke run)")
    parser.add_argument("--setting", choices=SETTINGS, default="near-best",
                        help="near-best (default): large_batch.yaml as shipped; costly: its whole runs at 32 px, "
                        "30-40 epochs, a wider net, far dearer than its proxies (benchmarks/search/ttt_settings.py)")
    parser.add_argument("--caches", choices=("own", "shared"), default="own",
                        help="own (default): every method and seed starts with empty compile and layout caches, "
                        "the data set shared; shared: all use the user's cache, so earlier runs' compiles help later ones")
    parser.add_argument("--parallel", type=int, default=1, metavar="K",
                        help="run K method-seeds at once, each on its own 1/K of the cores, all sharing the GPU "
                        "(default 1: one at a time, for CPU figures)")
    parser.add_argument("--keep", type=Path, help="keep every run's database, runs and result here; a method-seed "
                        "whose result is already there is read back, not run again (a cut benchmark resumes)")
    parser.add_argument("--report", type=Path, metavar="DIR", help="run nothing: summarise the runs kept in DIR")
    parser.add_argument("--plot", type=Path, help="write the any-time curves to this HTML file")
    parser.add_argument("--against", metavar="METHOD", help="also print every other method's per-seed ratios of "
                        "time to each target over this method's (e.g. optuna-tpe)")
    args = parser.parse_args()
    if args.report:
        results = kept_results(args.report)
        if warning := mixed_machines(results):
            print(warning, file=sys.stderr)
    else:
        methods = [m.strip() for m in args.methods.split(",")]
        unknown = sorted(set(methods) - set(METHODS))
        if unknown:
            sys.exit(f"time_to_target: unknown method {unknown[0]!r}; one of {', '.join(METHODS)}")
        if "ray-asha" in methods and importlib.util.find_spec("ray") is None:
            sys.exit("time_to_target: method 'ray-asha' needs Ray: pip install 'tianfeng[ray]', or leave it out of "
                     "--methods")
        if args.against and args.against not in methods:
            sys.exit(f"time_to_target: --against {args.against}: not one of the methods run ({', '.join(methods)})")
        if args.parallel < 1:
            sys.exit(f"time_to_target: --parallel must be 1 or more; got {args.parallel}")
        seeds = [int(s) for s in args.seeds.split(",")]
        budget_s = parse_duration(args.budget)
        with tempfile.TemporaryDirectory() as scratch:
            root = args.keep or Path(scratch)
            root.mkdir(parents=True, exist_ok=True)
            # seeds outermost: a drift of the machine over the hours touches every method alike
            jobs = [(m, s) for s in seeds for m in methods]
            results = run_all(jobs, root, budget_s, args.data, args.caches == "own", args.parallel, args.setting)
    spaces = sorted({r.get("setting", "near-best") for r in results})
    if args.targets:
        targets = [float(t) for t in args.targets.split(",")]
    else:  # a report's results say their setting
        targets = list(TARGETS[spaces[0] if len(spaces) == 1 else args.setting])
    budget = results[0]["budget_s"]
    headers = ("method", "seeds", *(f"time to {t:g}" for t in targets),
               *(f"best at {f * budget / 60:.1f} min" for f in FRACTIONS), "core-hours")
    data = "cifar5-dev" if args.data == "cifar5" else args.data
    if len(spaces) > 1:
        print(f"time_to_target: these results come from {len(spaces)} settings ({', '.join(spaces)}), each its own "
              "space: report each setting's folder alone", file=sys.stderr)
    print_table(f"{data}, setting {' + '.join(spaces)} (full fidelity = its space's target); budget {budget / 60:.1f} min per method "
                f"and seed; median [min, max] over seeds", summarise(results, targets), headers=headers)
    if args.against:
        if args.against not in {r["method"] for r in results}:
            sys.exit(f"time_to_target: --against {args.against}: no results of that method here")
        print_table(f"time to each target over {args.against}'s in the same seed (below 1: sooner); a side that "
                    "missed counts as the budget (< or >: a bound)", ratio_rows(results, targets, args.against),
                    headers=("method", "target", "median ratio", "per seed"))
    if args.plot:
        plot(results, args.plot)
        print(f"\nany-time curves: {args.plot}")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        print("time_to_target: interrupted; the runs finished so far are kept where --keep put them", file=sys.stderr)
        sys.exit(130)
