"""The figures the wall-time model takes from NVIDIA's MLPerf ResNet-50 logs, read again from the
logs themselves: each per-GPU rate of tianfeng.cost.published_rates and each MLPerf record's time
in benchmarks/cost/published_records.py, and, per result, what the model has no term for (the first
epoch's extra time and what each evaluation boundary costs beyond a median epoch).

Needs clones of the public results repositories, one folder per round, named as GitHub names
them (`git clone https://github.com/mlcommons/training_results_v1.1`, and v0.7, v1.0, v2.1,
v3.0, v3.1, v4.0) under `--repos DIR`. `--check` exits 1 when a cited figure differs from what
its logs give."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # common.py, one folder up

import common  # noqa: F401  (puts the repository on the path)

from tianfeng.cost.published_rates import POINTS

IMAGENET_TRAIN = 1_281_167


@dataclass(frozen=True)
class RunFigures:
    """One successful result file, in seconds and images per second over the whole cluster."""
    run_s: float  # run_start to run_stop: MLPerf's clock
    epochs: int
    median_epoch_rate: float  # an epoch's images over its median duration, the first epoch left out
    span_rate: float  # every epoch after the first over their span, evaluations left out
    first_epoch_extra_s: float  # run_start to the first epoch's end, beyond a median epoch
    boundary_extra_s: float  # median, per evaluation after the first: the block's last epoch beyond
    # a median epoch, plus the wait from its end to the evaluation's start
    evaluations: int


def events(text: str) -> Iterator[dict]:
    """The `:::MLLOG {...}` lines of a result file, parsed; other lines and broken ones skipped."""
    for line in text.splitlines():
        at = line.find(":::MLLOG ")
        if at < 0:
            continue
        try:
            event = json.loads(line[at + len(":::MLLOG "):])
        except ValueError:
            continue
        if isinstance(event, dict) and "key" in event and "time_ms" in event:
            yield event


def run_figures(text: str) -> RunFigures | None:
    """A result file's figures, or None where the run did not succeed or logged no epochs."""
    run_start = run_stop = None
    status = None
    starts: dict[int, float] = {}
    epochs: list[tuple[float, float]] = []  # (start, stop) in the order logged
    evaluations: list[tuple[float, float]] = []
    open_eval = None
    for e in events(text):
        key, t, meta = e["key"], e["time_ms"] / 1000, e.get("metadata") or {}
        if key == "run_start":
            run_start = t
        elif key == "run_stop":
            run_stop, status = t, meta.get("status")
        elif key == "epoch_start":
            starts[meta.get("epoch_num")] = t
        elif key == "epoch_stop" and meta.get("epoch_num") in starts:
            epochs.append((starts[meta["epoch_num"]], t))
        elif key == "eval_start":
            open_eval = t
        elif key == "eval_stop" and open_eval is not None:
            evaluations.append((open_eval, t))
            open_eval = None
    if status != "success" or run_start is None or run_stop is None or len(epochs) < 2:
        return None
    median = statistics.median(stop - start for start, stop in epochs[1:])
    first_end, last_end = epochs[0][1], epochs[-1][1]
    evaluating = sum(stop - start for start, stop in evaluations if first_end <= start <= last_end)
    extras = []
    for start, _ in evaluations[1:]:
        before = [ep for ep in epochs if ep[1] <= start]
        if before:
            ep_start, ep_stop = before[-1]
            extras.append(ep_stop - ep_start - median + start - ep_stop)
    return RunFigures(run_stop - run_start, len(epochs), IMAGENET_TRAIN / median,
                      IMAGENET_TRAIN * (len(epochs) - 1) / (last_end - first_end - evaluating),
                      first_end - run_start - median, statistics.median(extras) if extras else 0.0,
                      len(evaluations))


def result_files(repos: Path, rnd: str, system: str) -> list[Path]:
    folder = repos / f"training_results_{rnd}" / "NVIDIA" / "results" / system / "resnet"
    return sorted(folder.glob("result_*.txt"))


def system_gpus(repos: Path, rnd: str, system: str) -> int:
    """nodes x accelerators a node, from the round's NVIDIA/systems/<system>.json."""
    path = repos / f"training_results_{rnd}" / "NVIDIA" / "systems" / f"{system}.json"
    try:
        data = json.loads(path.read_text())
        return int(data["number_of_nodes"]) * int(data["accelerators_per_node"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SystemExit(f"mlperf_logs: {path}: cannot read number_of_nodes x accelerators_per_node "
                         f"({type(exc).__name__})") from None


def system_figures(repos: Path, rnd: str, system: str) -> list[RunFigures]:
    files = result_files(repos, rnd, system)
    if not files:
        raise SystemExit(f"mlperf_logs: no result_*.txt under {repos / f'training_results_{rnd}'} for {system}; "
                         f"clone https://github.com/mlcommons/training_results_{rnd} into {repos}")
    return [f for f in (run_figures(p.read_text(errors="replace")) for p in files) if f]


def main() -> int:
    from published_records import MLPERF_RECORDS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repos", type=Path, required=True, help="folder holding the training_results_vX.Y clones")
    parser.add_argument("--check", action="store_true", help="exit 1 when a cited figure differs from its logs")
    parser.add_argument("--json", action="store_true", help="every system's figures as JSON")
    args = parser.parse_args()
    wanted = {(p.round, p.system): p for p in POINTS}
    systems = list(dict.fromkeys([*wanted, *(r.mlperf for r in MLPERF_RECORDS)]))
    rows, wrong = [], []
    for rnd, system in systems:
        runs = system_figures(args.repos, rnd, system)
        med = {k: statistics.median(getattr(f, k) for f in runs) for k in RunFigures.__dataclass_fields__}
        point = wanted.get((rnd, system))
        n = system_gpus(args.repos, rnd, system)
        row = {"round": rnd, "system": system, "runs": len(runs), "gpus": n, **med,
               "median_epoch_rate_per_gpu": med["median_epoch_rate"] / n, "span_rate_per_gpu": med["span_rate"] / n}
        rows.append(row)
        if point and abs(row["median_epoch_rate_per_gpu"] - point.images_per_s) > 0.05:
            wrong.append(f"{rnd} {system}: published_rates says {point.images_per_s} img/s a GPU, "
                         f"the logs {row['median_epoch_rate_per_gpu']:.1f}")
        record = next((r for r in MLPERF_RECORDS if r.mlperf == (rnd, system)), None)
        if record and record.gpus != n:
            wrong.append(f"{record.name}: published_records says {record.gpus} GPUs, the system file {n}")
        if record and abs(record.published_s - med["run_s"]) > 0.05:
            wrong.append(f"{record.name}: published_records says {record.published_s} s, the logs {med['run_s']:.1f}")
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(f"{'round':<5} {'system':<40} {'runs':>4} {'GPUs':>5} {'run':>8} {'median-epoch':>12} {'span':>7} "
              f"{'1st epoch+':>10} {'per eval+':>9}")
        for r in rows:
            print(f"{r['round']:<5} {r['system']:<40} {r['runs']:>4} {r['gpus']:>5} {r['run_s']:>7.1f}s "
                  f"{r['median_epoch_rate_per_gpu']:>12.1f} {r['span_rate_per_gpu']:>7.1f} "
                  f"{r['first_epoch_extra_s']:>9.2f}s {r['boundary_extra_s'] * 1e3:>7.0f}ms")
        print("rates are images a second a GPU; 1st epoch+ and per eval+: beyond a median epoch (medians of the runs)")
    for line in wrong:
        print(f"mlperf_logs: {line}", file=sys.stderr)
    return 1 if args.check and wrong else 0


if __name__ == "__main__":
    sys.exit(main())
