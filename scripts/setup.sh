#!/usr/bin/env bash
# Creates .venv in the checkout and installs tianfeng into it. --dev adds DALI, Ray, the
# PostgreSQL driver and the test tools, and the Debian packages the tests drive for real
# (a PostgreSQL server, headless Chromium) when they are missing and we may install them.
# torch is pinned to 2.13.0, the CPU build pip finds on this machine's disk: nothing here may
# pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
extras=""
[[ "${1:-}" == "--dev" ]] && extras="[dev]"
[[ -x .venv/bin/python ]] || python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".${extras}"

if [[ -n "$extras" ]]; then
  missing=()
  compgen -G "/usr/lib/postgresql/*/bin/initdb" > /dev/null || missing+=(postgresql)
  command -v chromium > /dev/null || missing+=(chromium)
  if (( ${#missing[@]} )); then
    if [[ $(id -u) == 0 ]] && command -v apt-get > /dev/null; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" > /dev/null
    else
      echo "setup: the tests need Debian packages: ${missing[*]} (install them as root)" >&2
    fi
  fi
fi
