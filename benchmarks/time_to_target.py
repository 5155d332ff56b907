"""Search methods x seeds on cifar5-dev, each method given the same wall-clock budget, so that no
single lucky or unlucky draw decides the comparison. Methods (benchmarks/search_methods.py):
tianfeng's default (proxies with TPE, ASHA and priors for half the budget, then its best trials
promoted to full fidelity one after another); tianfeng-async (the same search with full fidelity
as the top rung of ASHA's ladder: from the start, a proxy trial in the top third of the complete
ones is promoted by one of the two workers, at one thread, while the other searches);
tianfeng-pause (the same, but the search pauses while a promoted run trains on both cores);
tianfeng-leader (`tianfeng search --promote leader`: each new proxy leader trained at full
fidelity while the search waits); plain Optuna TPE at full
fidelity; Optuna TPE + HyperbandPruner at full fidelity; Ray Tune ASHA at full
fidelity (random sampling); one epoch of random recipes for half the budget, then the best of
them trained whole (Egele et al. 2023); one-epoch-leader (the same screening, each new leader by
its first epoch trained whole at once); and tianfeng-screen (`tianfeng search --fidelity screen
--promote leader`: the published priors, then random recipes (the default sampler on a screening
rung), scored by the full run's first epoch, each new leader trained whole; tianfeng-screen-tpe
and tianfeng-screen-qmc the same with `--sampler tpe` or `--sampler qmc`, the priors still
first; tianfeng-screen-to75 the same told its target, `--objective time-to-target --target 75`:
each full run is the recipe with the least predicted time forecast to reach 75;
tianfeng-screen-tpe-to75 that with `--sampler tpe`); and pbt (Population Based Training: populations of four random 12-epoch recipes, the
worst member taking over the best's checkpoint and moving its LR, weight decay and trust
coefficient every 2 epochs, benchmarks/pbt.py). Full fidelity is
`large_batch.yaml`'s `target` rung.

Each method and seed runs in a fresh process that is stopped (Ctrl-C) when its budget is up;
the time counts from that process's start, so start-up is paid by every method. Each process
starts with empty compile and layout caches of its own (`--caches own`, the data set decoded
once and shared), as on a fresh machine, so what a run pays does not depend on the runs before it. Reported per
method, median [min, max] over seeds: the time until a full-fidelity score first reaches each
target, the best full-fidelity score found by each fraction of the budget (the any-time curve,
also drawn to an HTML file), and the compute used.

    python benchmarks/time_to_target.py --budget 12m --seeds 0,1,2 --keep /tmp/ttt --plot ttt.html
    python benchmarks/time_to_target.py --report /tmp/ttt --targets 70,75,80   # the kept runs again

Each result records the machine's host name; `--report` over results of several machines warns
on stderr, since two VMs of the same kind can train the same recipe at very different speeds.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, data_source, own_cache, print_table
from search_methods import METHODS, read_back

from tianfeng.hpo.options import parse_duration
from tianfeng.trainers.data.sources import default_cache_dir

FRACTIONS = (0.25, 0.5, 0.75, 1.0)


def run_one(method: str, seed: int, root: Path, budget_s: float, data: str, own_caches: bool = True) -> dict:
    """One method and seed in its own process, stopped at the budget; its scores read back. With
    `own_caches` the process starts with empty compile and layout caches of its own (the data set
    decoded once and shared), so what it pays does not depend on the runs before it."""
    directory = root / f"{method}-s{seed}"
    env = dict(os.environ)
    if own_caches:
        data = data_source(data) or data  # the shared copy's path, not one inside the run's own cache
        env["TIANFENG_CACHE"] = str(own_cache(directory / "cache", default_cache_dir()))
        env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    command = [sys.executable, str(ROOT / "benchmarks" / "search_methods.py"), method, "--seed", str(seed),
               "--dir", str(directory), "--budget-s", str(budget_s), "--data", data]
    t0 = time.time()
    child = subprocess.Popen(command, start_new_session=True, env=env)
    try:
        child.wait(timeout=budget_s)
    except (subprocess.TimeoutExpired, KeyboardInterrupt) as stopped:
        _stop(child)
        if isinstance(stopped, KeyboardInterrupt):  # the user's Ctrl-C: the method's own session got none
            raise
    result = {"method": method, "seed": seed, "budget_s": budget_s, "machine": platform.node(),
              **read_back(method, directory, t0)}
    result["events"] = [(t, v) for t, v in result["events"] if t <= budget_s]  # nothing after the budget counts
    (root / f"{method}-s{seed}.json").write_text(json.dumps(result))
    return result


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


def mixed_machines(results: list[dict]) -> str | None:
    """A warning when the results were measured on more than one machine (by host name): the same
    recipe can train at very different speeds on two VMs of the same kind, so their times do not
    pool; None when they share one machine."""
    hosts = sorted({r.get("machine") or "unrecorded" for r in results})
    if len(hosts) < 2:
        return None
    return (f"time_to_target: these results come from {len(hosts)} machines ({', '.join(hosts)}): their times are "
            "pooled below; compare methods within the results of one machine")


def _methods(results: list[dict]) -> list[str]:
    """The methods of `results` in the protocol's order (a kept run's files come in name order)."""
    order = {m: i for i, m in enumerate(METHODS)}
    return sorted({r["method"] for r in results}, key=lambda m: order.get(m, len(order)))


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


def main() -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)  # started in the background, Ctrl-C still stops it
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", default=",".join(METHODS), help=f"some of {', '.join(METHODS)}")
    parser.add_argument("--seeds", default="0,1,2", help="seeds, each a different random stream (default 0,1,2)")
    parser.add_argument("--budget", default="12m", help="wall-clock budget of each method and seed: 90s, 12m, 1h "
                        "(default 12m: on a 2-core CPU one full-fidelity run takes 2-5 min)")
    parser.add_argument("--targets", default="70,75,80", help="full-fidelity val top-1 levels to time")
    parser.add_argument("--data", default="cifar5", help="cifar5 (default) or digits (a quick smoke run)")
    parser.add_argument("--caches", choices=("own", "shared"), default="own",
                        help="own (default): every method and seed starts with empty compile and layout caches, "
                        "the data set shared; shared: all use the user's cache, so earlier runs' compiles help later ones")
    parser.add_argument("--keep", type=Path, help="keep every run's database, runs and result here")
    parser.add_argument("--report", type=Path, metavar="DIR", help="run nothing: summarise the runs kept in DIR")
    parser.add_argument("--plot", type=Path, help="write the any-time curves to this HTML file")
    args = parser.parse_args()
    targets = [float(t) for t in args.targets.split(",")]
    if args.report:
        results = [json.loads(p.read_text()) for p in sorted(args.report.glob("*-s*.json"))]
        if warning := mixed_machines(results):
            print(warning, file=sys.stderr)
    else:
        methods = [m.strip() for m in args.methods.split(",")]
        unknown = sorted(set(methods) - set(METHODS))
        if unknown:
            sys.exit(f"time_to_target: unknown method {unknown[0]!r}; one of {', '.join(METHODS)}")
        seeds = [int(s) for s in args.seeds.split(",")]
        budget_s = parse_duration(args.budget)
        with tempfile.TemporaryDirectory() as scratch:
            root = args.keep or Path(scratch)
            root.mkdir(parents=True, exist_ok=True)
            # seeds outermost: a drift of the machine over the hours touches every method alike
            results = [run_one(m, s, root, budget_s, args.data, args.caches == "own") for s in seeds for m in methods]
    budget = results[0]["budget_s"]
    headers = ("method", "seeds", *(f"time to {t:g}" for t in targets),
               *(f"best at {f * budget / 60:.1f} min" for f in FRACTIONS), "core-hours")
    data = "cifar5-dev" if args.data == "cifar5" else args.data
    print_table(f"{data}, full fidelity = large_batch.yaml's target; budget {budget / 60:.1f} min per method "
                f"and seed; median [min, max] over seeds", summarise(results, targets), headers=headers)
    if args.plot:
        plot(results, args.plot)
        print(f"\nany-time curves: {args.plot}")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        print("time_to_target: interrupted; the runs finished so far are kept where --keep put them", file=sys.stderr)
        sys.exit(130)
