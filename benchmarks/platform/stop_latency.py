"""How soon `tianfeng train` stops after its scheduler's signal, in each phase of a run.

Slurm sends SIGTERM on a requeue or preemption (and the batch shell's trap turns the pre-timeout
USR1 into a requeue), then kills whatever still runs after KillWait, 30 s by default. A run must
leave within that: after its checkpoint while it trains or evaluates, at once while it starts
up or compiles (nothing new to save there).

One uncut run is timed first; then each victim run, with a cache of its own (so every compile
is a cold one, as on a new node), is signalled at an even share of that time. The phase is what
the run said when it stopped. Per phase: signals, median and longest seconds from the signal to
the process's exit, that longest as a ratio of KillWait, and the checkpoints written.

    python benchmarks/platform/stop_latency.py                  # 8 signals, engine.compile on
    python benchmarks/platform/stop_latency.py --signals 16 --compile off --signal USR1
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # common.py, one folder up

import yaml
from common import ROOT, add_results_argument, provenance, write_results

KILL_WAIT_S = 30.0  # Slurm's default KillWait
PHASES = [("starting up", "start-up"), ("compiling", "compile"), ("evaluating", "evaluation"), (" step ", "training")]


def run_config(folder: Path, compile_setting: str) -> Path:
    """A digits run whose evaluation is a good share of each epoch (a tenth of the training
    images, the whole validation split in small batches), so every phase gets signals."""
    from tianfeng.core.run_config import RunConfig, config_to_dict

    raw = config_to_dict(RunConfig())
    raw.update(name="stop-latency", run_dir=str(folder / "run"), device="cpu")
    raw["data"].update(fraction=0.1, val_batch_size=16, workers=0, cache_dir=str(folder / "cache"))
    raw["model"].update(width=32, stages=3)
    raw["phases"] = [{"epochs": 30, "resolution": 24, "batch_size": 32}]
    raw["engine"]["compile"] = compile_setting
    raw["precision"]["mode"] = "fp32"
    path = folder / "run.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def launch(config: Path) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCHINDUCTOR_CACHE_DIR": str(config.parent / "inductor")}
    return subprocess.Popen([sys.executable, "-m", "tianfeng.cli", "train", "--config", str(config)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)


def phase_of(stderr: str, code: int) -> str:
    """Where the run was, from the line it left with (killed outright: before its handlers)."""
    said = next((line for line in reversed(stderr.splitlines()) if "stopped on SIG" in line), "")
    if not said:
        return "start-up (before the handlers)" if code < 0 else "ended before the signal"
    return next(name for words, name in PHASES if words in said)


def victim(folder: Path, compile_setting: str, after_s: float, signum: int) -> dict:
    config = run_config(folder, compile_setting)
    proc = launch(config)
    time.sleep(after_s)
    checkpoint = folder / "run" / "checkpoints" / "last.pt"
    before = checkpoint.stat().st_mtime if checkpoint.exists() else None
    sent = time.time()
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=600)
    left = time.time() - sent
    after = checkpoint.stat().st_mtime if checkpoint.exists() else None
    return {"after_s": after_s, "phase": phase_of(err, proc.returncode), "seconds": left, "code": proc.returncode,
            "checkpoint": after is not None and after != before and after >= sent}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--signals", type=int, default=8, help="victim runs, each signalled once (default 8)")
    parser.add_argument("--signal", choices=["TERM", "USR1"], default="TERM", help="the signal (default TERM)")
    parser.add_argument("--compile", choices=["on", "off", "auto"], default="on", help="engine.compile (default on)")
    add_results_argument(parser, ROOT / "docs" / "results" / "stop_latency.json", "the figures")
    args = parser.parse_args()
    signum = getattr(signal, f"SIG{args.signal}")
    with tempfile.TemporaryDirectory(prefix="stop-latency-") as tmp:
        reference = Path(tmp, "uncut")
        reference.mkdir()
        started = time.time()
        proc = launch(run_config(reference, args.compile))
        _, err = proc.communicate(timeout=1800)
        if proc.returncode != 0:
            sys.exit(f"stop_latency: the uncut run failed: {err[-2000:]}")
        whole_s = time.time() - started
        print(f"uncut run: {whole_s:.1f} s", file=sys.stderr)
        results = []
        for i in range(args.signals):
            folder = Path(tmp, f"v{i}")
            folder.mkdir()
            result = victim(folder, args.compile, whole_s * (i + 0.5) / args.signals, signum)
            results.append(result)
            print(f"signal {i + 1}/{args.signals} at {result['after_s']:.1f} s: {result['phase']}, left after "
                  f"{result['seconds']:.1f} s{', checkpoint written' if result['checkpoint'] else ''}",
                  file=sys.stderr)
    print(f"SIG{args.signal} to `tianfeng train` (engine.compile {args.compile}; uncut run {whole_s:.0f} s); "
          f"KillWait {KILL_WAIT_S:.0f} s")
    print(f"{'phase':32} {'signals':>7} {'median s':>9} {'longest s':>10} {'/KillWait':>9} {'checkpoints':>11}")
    by_phase: dict[str, list[dict]] = {}
    for r in results:
        by_phase.setdefault(r["phase"], []).append(r)
    figures = {}
    for phase, rows in by_phase.items():
        seconds = [r["seconds"] for r in rows]
        figures[phase] = {"signals": len(rows), "median_s": statistics.median(seconds), "longest_s": max(seconds),
                          "checkpoints": sum(r["checkpoint"] for r in rows)}
        print(f"{phase:32} {len(rows):>7} {statistics.median(seconds):>9.1f} {max(seconds):>10.1f} "
              f"{max(seconds) / KILL_WAIT_S:>9.2f} {figures[phase]['checkpoints']:>11}")
    if args.results:
        write_results(args.results, {**provenance(), "signal": args.signal, "compile": args.compile,
                                     "uncut_s": whole_s, "phases": figures, "runs": results})


if __name__ == "__main__":
    main()
