"""Record a fixed pool of recipes once, so that any search can be replayed against it in seconds
(benchmarks/search/replay.py): the space's published priors, then a scrambled Sobol draw, each recipe
trained whole at the target rung and at each proxy rung the search uses, every epoch's
validation scores kept with the CPU seconds and wall seconds it cost.

    python benchmarks/search/record_pool.py --keep /tmp/pool --recipes 96 --workers 2
    python benchmarks/search/record_pool.py --keep /tmp/pool --recipes 192 --workers 2   # 96 more, same draw

The table (`--table`, default docs/results/replay/<setting>.jsonl.gz) is gzip-compressed JSON
lines: a header (commit, machine, torch, seeds, rungs, the space's digest) and one line per
recipe, appended as each recipe's rungs are all recorded, so a cut recording loses at most the
recipes in training; run the same command again to go on (recipes already in the table are not
trained again; `--keep` holds the run folders). A whole run's first epochs (what the one-epoch
peer ranks by) need no run of their own. Costs are CPU seconds of the training process, so the
recording may share the machine with other work; wall seconds are kept for reference only.
A table holds one kind of machine: its CPU, and the precision `precision: auto` picks there (bf16
where the CPU has bf16 instructions); recording into it on another kind is refused. Another kind
records the same draw into a table of its own, which `replay.py --beside` compares recipe by recipe:

    python benchmarks/search/record_pool.py --keep /tmp/pool --recipes 108 --workers 2 \
        --table docs/results/replay/near-best-xeon-bf16.jsonl.gz   # a 2-core Intel Xeon with AMX
"""

from __future__ import annotations

import argparse
import fcntl
import gzip
import hashlib
import json
import math
import multiprocessing
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # common.py, one folder up

import yaml
from common import ROOT, data_source, provenance
from ttt_settings import SETTINGS, space_for

from tianfeng.hpo.space.read import Parameter, SearchSpace, load_space

TABLES = ROOT / "docs" / "results" / "replay"
RUNGS = ("target", "proxy", "lowres_half")
METRICS = ("val_top1", "val_loss")


def draw_pool(space: SearchSpace, recipes: int, seed: int) -> list[dict[str, Any]]:
    """The pool: the space's priors (each missing active value from the draw), then scrambled
    Sobol points, one coordinate per parameter in file order (inactive ones unused). The same
    `seed` gives the same first recipes whatever `recipes` is, so a pool grows by asking for more."""
    from scipy.stats import qmc

    from tianfeng.hpo.space.materialize import sample_active

    names = [p.name for p in space.parameters]
    n_points = max(1, recipes)
    points = qmc.Sobol(d=len(names), scramble=True, seed=seed).random(1 << math.ceil(math.log2(n_points)))
    pool: list[dict[str, Any]] = []
    for i in range(recipes):
        point = dict(zip(names, points[i], strict=True))
        prior = space.priors[i] if i < len(space.priors) else None
        given = prior.params if prior else {}
        values = sample_active(space, lambda p, pt=point, g=given: g[p.name] if p.name in g else from_unit(p, pt[p.name]))
        pool.append({"id": i, "source": f"prior:{prior.name}" if prior else "sobol", "params": values})
    return pool


def from_unit(p: Parameter, u: float) -> Any:
    """The value of parameter `p` at `u` in [0, 1): log-uniform where the parameter is log, on
    its step grid where it has one."""
    if p.type == "categorical":
        return p.choices[min(int(u * len(p.choices)), len(p.choices) - 1)]
    low, high = float(p.low), float(p.high)
    x = math.exp(math.log(low) + u * (math.log(high) - math.log(low))) if p.log else low + u * (high - low)
    if p.type == "int":
        step = int(p.step or 1)
        return int(min(high, max(low, low + step * math.floor((x - low) / step + 0.5))))
    if p.step:
        x = low + p.step * math.floor((x - low) / p.step + 0.5)
    return float(min(high, max(low, x)))


def record_rung(space: SearchSpace, values: dict[str, Any], rung: str, run_dir: Path) -> dict[str, Any]:
    """Train `values` at `rung` from scratch; every epoch's metrics and what it cost."""
    from tianfeng.hpo.space.materialize import build_config
    from tianfeng.trainers.engine import train

    if run_dir.exists():
        shutil.rmtree(run_dir)  # a cut recipe starts over: its epochs' costs must be one process's
    cfg = build_config(space, values, rung, name=run_dir.name, run_dir=str(run_dir))
    epochs: list[dict[str, Any]] = []
    last = {"cpu": time.process_time(), "wall": time.perf_counter()}

    def on_epoch(m) -> None:
        cpu, wall = time.process_time(), time.perf_counter()
        epochs.append({"epoch": m.epoch, **{k: finite(getattr(m, k)) for k in METRICS},
                       "cpu_s": round(cpu - last["cpu"], 3), "wall_s": round(wall - last["wall"], 3),
                       "resolution": m.resolution,
                       **({"startup_s": round(m.startup_s, 3)} if m.startup_s is not None else {})})
        last.update(cpu=cpu, wall=wall)

    result = train(cfg, on_epoch)
    shutil.rmtree(run_dir, ignore_errors=True)  # checkpoints are not kept: the table is the record
    return {"status": str(result.status.value if hasattr(result.status, "value") else result.status),
            "total_epochs": cfg.total_epochs, "epochs": epochs}


def finite(x: float) -> float | None:
    return round(float(x), 4) if x is not None and math.isfinite(x) else None


def predicted_seconds(space: SearchSpace, values: dict[str, Any]) -> float | None:
    from tianfeng.hpo.running.objective import predict_trial

    try:
        return round(predict_trial(space, values).seconds, 3)
    except Exception:  # noqa: BLE001 - a recipe the model cannot price is still recorded
        return None


def read_table(path: Path) -> tuple[dict | None, list[dict]]:
    """The header and recipe rows of a table (an absent file: none)."""
    if not path.exists():
        return None, []
    header, rows = None, []
    with gzip.open(path, "rt") as f:
        for line in f:
            row = json.loads(line)
            if row.get("kind") == "header":
                header = header or row
            else:
                rows.append(row)
    return header, rows


def append_row(path: Path, row: dict) -> None:
    """Append one JSON line as its own gzip member (a reader sees the members as one stream)."""
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with gzip.open(path, "at") as f:
            f.write(json.dumps(row, separators=(",", ":")) + "\n")


def space_digest(path: Path, rungs: list[str]) -> str:
    """What a table's recipes depend on in the space file: its content without comments and
    without the rungs the table does not record, so that a rung added or dropped elsewhere, or a
    comment, leaves the table the same space's; so does the rung a search runs by default
    (`search_fidelity`), since the table names the rungs it records."""
    raw = yaml.safe_load(path.read_text())
    raw.pop("search_fidelity", None)
    raw["fidelities"] = {name: rung for name, rung in (raw.get("fidelities") or {}).items() if name in rungs}
    return hashlib.sha256(json.dumps(raw, sort_keys=True).encode()).hexdigest()[:12]


def worker(k: int, workers: int, args: argparse.Namespace, space_path: str, data: str | None, todo: list[dict]) -> None:
    import torch

    torch.set_num_threads(args.threads)
    space = load_space(space_path, data=data)
    mine = todo[k::workers]
    for n, recipe in enumerate(mine, 1):
        t0 = time.perf_counter()
        rungs = {rung: record_rung(space, recipe["params"], rung, args.keep / "runs" / f"w{k}-{rung}")
                 for rung in args.rungs}
        row = {**recipe, "predicted_s": predicted_seconds(space, recipe["params"]), "rungs": rungs}
        append_row(args.table, row)
        whole = rungs["target"]["epochs"]
        print(f"worker {k}: recipe {recipe['id']} ({n}/{len(mine)}) {rungs['target']['status']} "
              f"val_top1 {whole[-1]['val_top1'] if whole else '-'} after {len(whole)} epochs, "
              f"{time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", type=Path, required=True, help="the folder of the runs in training")
    parser.add_argument("--recipes", type=int, default=96, help="recipes in the pool (default 96; the priors first)")
    parser.add_argument("--setting", choices=SETTINGS, default="near-best", help="the space (ttt_settings.py)")
    parser.add_argument("--seed", type=int, default=0, help="the Sobol draw's scrambling seed (default 0)")
    parser.add_argument("--data", default="cifar5", help="cifar5 (default) or digits (a quick smoke run)")
    parser.add_argument("--rungs", default=",".join(RUNGS), help=f"rungs to record (default {','.join(RUNGS)})")
    parser.add_argument("--workers", type=int, default=1, help="processes recording at once (default 1)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process (default 1)")
    parser.add_argument("--table", type=Path, default=None, help="the table (default docs/results/replay/<setting>.jsonl.gz)")
    parser.add_argument("--limit", type=int, default=None, help="record at most this many recipes this run")
    args = parser.parse_args()
    args.rungs = [r.strip() for r in args.rungs.split(",") if r.strip()]
    if "target" not in args.rungs:
        parser.error("--rungs: must include target (the whole run)")
    args.table = args.table or TABLES / f"{args.setting}{'' if args.data == 'cifar5' else '-' + args.data}.jsonl.gz"
    args.keep.mkdir(parents=True, exist_ok=True)
    space_path = space_for(args.setting, args.keep)
    data = data_source(args.data)
    space = load_space(space_path, data=data)
    unknown = [r for r in args.rungs if r not in space.fidelities]
    if unknown:
        parser.error(f"--rungs: {', '.join(unknown)} not in {space_path.name}; one of {', '.join(space.fidelities)}")
    import torch

    from tianfeng.trainers.precision import resolve_mode

    header, rows = read_table(args.table)
    wanted = {"setting": args.setting, "data": args.data, "seed": args.seed, "rungs": args.rungs,
              "space_sha256": space_digest(space_path, args.rungs)}
    # a recipe's costs are this machine's CPU seconds, and `precision: auto` trains bf16 where the
    # CPU has bf16 instructions: a table holds one kind of machine
    made = provenance()  # git asked once: the commit, date and machine
    here = {"machine": made["machine"], "cpu_precision": resolve_mode("auto", torch.device("cpu"))[0]}
    if header is not None:
        clash = {k: (header.get(k), v) for k, v in wanted.items() if header.get(k) != v}
        if clash:
            sys.exit(f"record_pool: {args.table}: recorded with other settings {clash}; give another --table")
        other = {k: (header[k], v) for k, v in here.items() if k in header and header[k] != v}
        if other:
            sys.exit(f"record_pool: {args.table}: recorded on another kind of machine {other}: its costs and "
                     "numerics are not this machine's; give another --table")
    else:
        args.table.parent.mkdir(parents=True, exist_ok=True)
        append_row(args.table, {"kind": "header", **made, **here, "torch": torch.__version__,
                                "python": sys.version.split()[0],
                                "cost": "cpu_s: the training process's CPU seconds per epoch (the first with set-up)",
                                **wanted})
    done = {r["id"] for r in rows}
    todo = [r for r in draw_pool(space, args.recipes, args.seed) if r["id"] not in done][:args.limit]
    print(f"record_pool: {len(done)} recipes in {args.table.name}, {len(todo)} to record "
          f"({args.workers} workers x {args.threads} threads)", file=sys.stderr, flush=True)
    data_arg = data
    if args.workers == 1:
        worker(0, 1, args, str(space_path), data_arg, todo)
        return
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=worker, args=(k, args.workers, args, str(space_path), data_arg, todo))
             for k in range(args.workers)]
    # a SIGTERM to this process alone (kill, timeout) stops its workers as Ctrl-C stops them all:
    # without it they would record on, orphaned
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join()
    except KeyboardInterrupt:
        for p in procs:
            p.terminate()
        for p in procs:
            p.join()
        sys.exit(f"record_pool: interrupted: the recorded recipes are kept in {args.table}; run again to go on")
    sys.exit(max((p.exitcode or 0) for p in procs))


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
