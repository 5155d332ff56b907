"""How many plausible bugs in the search's decisions and the cost model the tests catch.

Each mutation is one small edit a reviewer could believe (a comparison flipped, a filter or a
factor dropped, a phase index swapped) in a decision module: the Pareto front and its floor,
time-to-target's choice, the peer rule, the budget count, the transfer rules and the wall-time
model. For each, the repository's `tianfeng/`, `tests/` and `pyproject.toml` are copied to a
scratch folder, the edit is planted there, and the tests that target that module run against
the copy (PYTHONPATH puts it before the installed package). A mutation is caught when those
tests fail. The baseline is the same tests on the unmutated copy, in the same run: they must
pass, or nothing is measured. Prints each mutation's result and the share caught.

    python benchmarks/platform/mutation.py                   # all mutations, ~5 min on 2 cores
    python benchmarks/platform/mutation.py --only scores     # the mutations of one module
    python benchmarks/platform/mutation.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # common.py, one folder up

from common import ROOT, print_table

DECISIONS = ["tests/search/test_decisions.py"]
FRONT = [*DECISIONS, *(f"tests/search/test_time_to_accuracy.py::{name}" for name in (
    "test_peer_pruner_compares_only_with_trials_as_fast_or_faster", "test_rungs_are_fractions_of_each_trials_own_run",
    "test_pareto_front_by_hand", "test_the_default_floor_is_never_chance_and_follows_the_classes"))]
TRANSFER = ["tests/search/test_promote.py::test_transfer_rules_are_explicit",
            "tests/search/test_promote.py::test_every_phase_shows_its_own_peak_lr", "tests/core/test_run_config.py"]
WALLTIME = ["tests/trainers/test_accumulation.py", "tests/search/test_walltime_by_hand.py", "tests/cost/test_costmodel.py"]


@dataclass(frozen=True)
class Mutation:
    name: str
    path: str  # under the repository
    before: str  # must occur exactly once in the file
    after: str
    tests: tuple[str, ...]


MUTATIONS = [
    Mutation("front: constraint filter dropped", "tianfeng/hpo/judge/scores.py",
             "predicted_s(t) is not None and all(c <= 0 for c in t.constraints.values())",
             "predicted_s(t) is not None", tuple(FRONT)),
    Mutation("front: floor not applied", "tianfeng/hpo/judge/scores.py",
             "and (floor is None or score(t) >= floor)]", "]", tuple(FRONT)),
    Mutation("front: dominance needs no strict gain", "tianfeng/hpo/judge/scores.py",
             "and (sign * score(o) > sign * score(t) or predicted_s(o) < predicted_s(t)) for o in feasible)",
             "for o in feasible)", tuple(FRONT)),
    Mutation("front: metric direction ignored", "tianfeng/hpo/judge/scores.py",
             "sign = 1 if maximizing(study) else -1", "sign = 1", tuple(FRONT)),
    Mutation("floor: relative part a quarter of the way", "tianfeng/hpo/judge/scores.py",
             "(max(score(t) for t in done) - chance) / 2", "(max(score(t) for t in done) - chance) / 4",
             tuple(FRONT)),
    Mutation("floor: a given floor replaced by the relative one", "tianfeng/hpo/judge/scores.py",
             "return relative if floor is None else max(floor, relative)", "return relative", tuple(FRONT)),
    Mutation("default floor: 10 points above chance dropped", "tianfeng/hpo/judge/front.py",
             "chance + max(chance, 10.0)", "chance + chance", tuple(FRONT)),
    Mutation("time-to-target: slowest reaching trial", "tianfeng/hpo/judge/scores.py",
             "return min(feasible, key=lambda t: t.values[0])",
             "return max(feasible, key=lambda t: t.values[0])", tuple(FRONT)),
    Mutation("time-to-target: infeasible trials chosen too", "tianfeng/hpo/judge/scores.py",
             "feasible = [t for t in trials if all(c <= 0 for c in t.constraints.values())]",
             "feasible = list(trials)", tuple(FRONT)),
    Mutation("peer rule: slack dropped", "tianfeng/hpo/judge/peers.py",
             "theirs > self.slack * mine", "theirs > mine", tuple(FRONT)),
    Mutation("peer rule: minimise branch flipped", "tianfeng/hpo/judge/peers.py",
             "return value < median if self.maximize else value > median",
             "return value < median if self.maximize else value < median", tuple(FRONT)),
    Mutation("peer rule: one peer too few suffices", "tianfeng/hpo/judge/peers.py",
             "if len(peers) < self.min_peers:", "if len(peers) < self.min_peers - 1:", tuple(FRONT)),
    Mutation("peer rule: ties pruned", "tianfeng/hpo/judge/peers.py",
             "return value < median if self.maximize", "return value <= median if self.maximize", tuple(FRONT)),
    Mutation("peer rule: a rung at the last epoch", "tianfeng/hpo/judge/peers.py",
             "and epoch < total:", "and epoch <= total:", tuple(FRONT)),
    Mutation("budget: failed trials not counted", "tianfeng/hpo/running/budget.py",
             "(*FINISHED, TrialState.RUNNING) or failed(t)]", "(*FINISHED, TrialState.RUNNING)]", tuple(DECISIONS)),
    Mutation("budget: interrupted trials counted", "tianfeng/hpo/running/budget.py",
             "(*FINISHED, TrialState.RUNNING) or failed(t)]",
             "(*FINISHED, TrialState.RUNNING, TrialState.FAIL)]", tuple(DECISIONS)),
    Mutation("transfer: batch factor from phase 0", "tianfeng/core/run_config.py",
             'factor = last_batch / raw["phases"][-1]["batch_size"]',
             'factor = last_batch / raw["phases"][0]["batch_size"]', tuple(TRANSFER)),
    Mutation("transfer: every proxy LR from the last phase", "tianfeng/promotion/transfer.py",
             "lr_proxy = peak_lr(proxy, i) if", "lr_proxy = peak_lr(proxy, len(proxy.phases) - 1) if",
             tuple(TRANSFER)),
    Mutation("transfer: every full LR from the last phase", "tianfeng/promotion/transfer.py",
             "lr_full = peak_lr(full, i) if", "lr_full = peak_lr(full, len(full.phases) - 1) if", tuple(TRANSFER)),
    Mutation("wall time: exchange hidden behind all micro-batches", "tianfeng/cost/walltime.py",
             "grad_bytes=grad_bytes, compute_s=micro,", "grad_bytes=grad_bytes, compute_s=compute,",
             tuple(WALLTIME)),
    Mutation("wall time: one fixed part per accumulated step", "tianfeng/cost/walltime.py",
             "compute = chunks * micro", "compute = micro + (chunks - 1) * (micro - model.fixed_s)",
             tuple(WALLTIME)),
    Mutation("cost model: ring sends every rank's share", "tianfeng/cost/exchange.py",
             "return halves * (ranks - 1) * (alpha_s + nbytes / ranks / bytes_per_s)",
             "return halves * ranks * (alpha_s + nbytes / ranks / bytes_per_s)", tuple(WALLTIME)),
    Mutation("cost model: the last bucket hidden too", "tianfeng/cost/exchange.py",
             "exposed = max(comm - backward_share * compute_s, last_bucket)",
             "exposed = max(comm - backward_share * compute_s, 0.0)", tuple(WALLTIME)),
]


def scratch_copy(dest: Path) -> None:
    for name in ("tianfeng", "tests"):
        shutil.copytree(ROOT / name, dest / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")


def run_tests(root: Path, tests: tuple[str, ...], timeout_s: float) -> tuple[bool, float, str]:
    """Whether the tests pass against the copy at `root`, how long they took, and the end of
    what they printed."""
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    start = time.perf_counter()
    try:
        out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-m", "not slow",
                              *tests], cwd=root, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return False, time.perf_counter() - start, "timed out"  # a mutation that hangs the tests is caught
    return out.returncode == 0, time.perf_counter() - start, (out.stdout + out.stderr)[-3000:]


def plant(root: Path, m: Mutation) -> str:
    """Apply the mutation in the copy; returns the original text to restore."""
    path = root / m.path
    text = path.read_text()
    if text.count(m.before) != 1:
        sys.exit(f"mutation {m.name!r}: {m.path} holds {text.count(m.before)} copies of its text, not 1: "
                 "update the mutation to the code")
    path.write_text(text.replace(m.before, m.after))
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="run the mutations whose module path contains this text")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds for one mutation's tests")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    mutations = [m for m in MUTATIONS if not args.only or args.only in m.path]
    if not mutations:
        sys.exit(f"--only: no mutation's module contains {args.only!r}")
    rows, results = [], []
    with tempfile.TemporaryDirectory(prefix="tianfeng-mutation-") as tmp:
        root = Path(tmp)
        scratch_copy(root)
        for tests in sorted({m.tests for m in mutations}):
            ok, took, tail = run_tests(root, tests, args.timeout)
            if not ok:
                print(tail, file=sys.stderr)
                sys.exit(f"baseline: {' '.join(tests)} fail without any mutation: fix them first")
            print(f"baseline {' '.join(tests)}: pass in {took:.1f} s", file=sys.stderr)
        for i, m in enumerate(mutations, 1):
            original = plant(root, m)
            try:
                survived, took, _ = run_tests(root, m.tests, args.timeout)
            finally:
                (root / m.path).write_text(original)
            print(f"[{i}/{len(mutations)}] {m.name}: {'SURVIVED' if survived else 'caught'} ({took:.1f} s)",
                  file=sys.stderr)
            results.append({"mutation": m.name, "module": m.path, "caught": not survived, "seconds": round(took, 1)})
            rows.append([m.name, m.path.removeprefix("tianfeng/"), "survived" if survived else "caught"])
    caught = sum(r["caught"] for r in results)
    print_table("Mutations planted in the decision modules", rows, headers=("mutation", "module", "result"))
    print(f"caught {caught} of {len(results)} mutations ({caught / len(results):.0%}); aim: at least 90%")
    if args.json:
        args.json.write_text(json.dumps({"caught": caught, "total": len(results), "mutations": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
