#!/usr/bin/env bash
# Creates .venv in the checkout and installs tianfeng into it; --dev adds DALI, Ray, the
# PostgreSQL driver and the test tools. torch is pinned to 2.13.0, the CPU build pip finds on
# this machine's disk: nothing here may pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
extras=""
[[ "${1:-}" == "--dev" ]] && extras="[dev]"
[[ -x .venv/bin/python ]] || python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".${extras}"
