"""Gradient exchange at world 4 (2 emulated nodes x 2 gloo ranks, one machine): bytes each rank
sends between nodes per step and step time, for every variant, as ratios to the flat allreduce
timed in the same run. Expectation: hierarchical sends 1/local_size (1/2) of flat's bytes."""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # common.py, one folder up

from common import ROOT, print_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=32, help="per rank")
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=4",
                          f"--master-port={port}", str(Path(__file__).with_name("comm_worker.py")),
                          str(args.steps), str(args.batch)], capture_output=True, text=True, env=env,
                         timeout=900, check=True)
    results = json.loads(out.stdout.strip().splitlines()[-1])
    flat = results["flat"]
    print_table(f"gradient exchange, world 4 = 2 nodes x 2 (gloo, one machine), resnet_small width 16, "
                f"{args.steps} steps",
                [(v, f"{r['inter_bytes'] / 1e3:,.1f} kB ({r['inter_bytes'] / flat['inter_bytes']:.3f})",
                  f"{1000 * r['step_s']:.1f} ms ({r['step_s'] / flat['step_s']:.2f})") for v, r in results.items()],
                headers=("variant", "inter-node bytes/step/rank (vs flat)", "step time (vs flat)"))
    print("\n  on one machine every 'link' is loopback: step times say what the hooks cost in compute "
          "and extra collectives, not what a slow network would save (tianfeng plan models that)")


if __name__ == "__main__":
    main()
