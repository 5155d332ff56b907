"""Every benchmark runs at its smallest size: a benchmark whose code rotted (a moved module, a
renamed field, an API that changed shape) fails here, not on the day someone reruns it for a
figure. Each run is the script itself, in a process of its own, on this machine's CPU and the
data that ships with the checkout (scikit-learn's digits, or a data set the script writes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchmarks.test_every_benchmark_starts import PATHS, SCRIPTS

pytestmark = pytest.mark.slow

# the smallest arguments of each script the other benchmark tests do not already run
SMALLEST: dict[str, list[str]] = {
    "loader_rates": ["--seconds", "0.1", "--resolutions", "16"],
    "published_records": [],
    "batch_prep": ["--images", "2048", "--repeats", "1"],
    "comm_hooks": ["--steps", "2", "--batch", "8"],
    "engine_overhead": ["--repeats", "1", "--steps", "4", "--batch", "16", "--resolution", "8", "--width", "4"],
    "optimizer_compile": ["--repeats", "1"],
    "optimizer_step": ["--repeats", "1", "--steps", "1"],
    "per_gpu_bn": ["--repeats", "1", "--steps", "1"],
    "precision": ["--repeats", "1", "--steps", "1"],
    "torch_builds": ["--baseline", sys.executable, "--candidate", sys.executable, "--repeats", "1", "--steps", "1"],
    "mutation": ["--only", "peers.py", "--timeout", "120"],
    "report_load": ["--trials", "4"],
    "stop_latency": ["--signals", "1", "--compile", "off"],
    "search_speed": ["--data", "digits", "--trials", "2", "--no-full"],
    "record_pool": ["--data", "digits", "--recipes", "1", "--rungs", "target", "--table", "pool.jsonl.gz", "--keep", "runs"],
    "whole_run_share": ["--data", "digits", "--trials", "1", "--keep", "share"],
}
# what writes its figures to a file rather than stdout
WRITES = {"record_pool": "pool.jsonl.gz"}
# run at their smallest size by a test file of their own beside this one
RUN_ELSEWHERE = {
    "lcbench": "test_lcbench_benchmark.py", "replay": "test_replay_benchmark.py",
    "search_methods": "test_time_to_target_benchmark.py",
    "search_overhead": "test_search_overhead_benchmark.py", "time_to_target": "test_time_to_target_benchmark.py",
}
# what cannot run at a smaller size than its figure, and why
NOT_HERE = {
    "first_hour": "its figure is a whole fresh clone's setup and first commands (minutes); the docs tests run the same commands",
    "compression_accuracy": "trains on the cifar5-dev archive beside the checkout, which a user's clone does not have",
    "data_loaders": "reads the cifar5-dev archive's JPEGs beside the checkout, which a user's clone does not have",
    "mlperf_logs": "reads clones of the MLPerf results repositories, which cannot be fetched here; its log "
                   "reader runs on a written log in tests/cost/test_published_records.py",
    "proxy_fidelity": "trains recipes on the cifar5-dev archive beside the checkout, which a user's clone does not have",
}


def test_every_script_is_run_somewhere_or_says_why_not() -> None:
    here = Path(__file__).parent
    assert set(SMALLEST) | set(RUN_ELSEWHERE) | set(NOT_HERE) == set(SCRIPTS)
    assert not set(SMALLEST) & set(RUN_ELSEWHERE) and not set(NOT_HERE) & (set(SMALLEST) | set(RUN_ELSEWHERE))
    for name, test_file in RUN_ELSEWHERE.items():
        assert name in (here / test_file).read_text(), (name, test_file)


@pytest.mark.parametrize("name", sorted(SMALLEST))
def test_the_benchmark_runs_at_its_smallest_size(name: str, tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TIANFENG_CACHE": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, str(PATHS[name]), *SMALLEST[name]], capture_output=True, text=True,
                         timeout=540, stdin=subprocess.DEVNULL, cwd=tmp_path, env=env)
    assert out.returncode == 0, (out.stdout[-1500:], out.stderr[-3000:])
    if name in WRITES:
        assert (tmp_path / WRITES[name]).stat().st_size > 0
    else:
        assert out.stdout.strip(), "a benchmark prints its figures"
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
