#!/usr/bin/env bash
# The first checks to run on a GPU machine, each PASS or FAIL with its figures, each under 10
# minutes: nccl, resume, precision, overlap, loaders and the figure checks per_gpu_bn, step_curve,
# dali, search (see scripts/gpu_check.py); --out DIR keeps the results as files. Pass check names
# to run some only. Without a CUDA GPU it says so and exits 0 having run nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
python=.venv/bin/python
[[ -x "$python" ]] || python=python3
exec "$python" scripts/gpu_check.py "$@"
