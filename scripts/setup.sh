#!/usr/bin/env bash
# Creates .venv in the checkout and installs tianfeng into it. --dev adds DALI, Ray, the
# PostgreSQL driver and the test tools, and the Debian packages the tests drive for real
# (a PostgreSQL server, headless Chromium, a Slurm controller and node with munge) when they are
# missing and we may install them: it names them first; --no-system leaves them out (a login node).
# torch and torchvision come as the tested pair in constraints.txt (pip finds both on this
# machine's disk); nothing here may pull another torch build.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="" system=1
for arg in "$@"; do
  case "$arg" in
    --dev) extras="[dev]" ;;
    --no-system) system=0 ;;
    *) echo "setup: unknown option $arg (--dev, --no-system)" >&2; exit 2 ;;
  esac
done
[[ -x .venv/bin/python ]] || python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -c constraints.txt -e ".${extras}"

# Per-GPU BatchNorm's CPU kernel, compiled once per torch install (about a minute) so that no run
# pays for it; without a C++ compiler the runs use the slower eager path and say so.
.venv/bin/python -c "import logging, sys; logging.basicConfig(stream=sys.stderr, format='setup: %(message)s', level=logging.INFO); \
from tianfeng.trainers.grouped_bn_kernel import kernel; kernel()"

# Reports embed plotly.js; its basic bundle (scatter, bar) from the npm registry, the version the
# plotly package draws for, opens in about half the time of the full one. Without npm, reports
# embed the full bundle and still work offline.
plotly_js=$(.venv/bin/python -c "from plotly.offline import get_plotlyjs_version as v; print(v())")
if command -v npm > /dev/null; then
  npm install --silent --no-audit --no-fund --no-save --prefix .venv/share/tianfeng \
    "plotly.js-basic-dist-min@${plotly_js}" 2>&1 | grep -v 'Unknown user config' >&2 || true
else
  echo "setup: npm not found; reports will embed the full plotly.js (slower to open)" >&2
fi

if [[ -n "$extras" && "$system" == 1 ]]; then
  missing=()
  compgen -G "/usr/lib/postgresql/*/bin/initdb" > /dev/null || missing+=(postgresql)
  command -v chromium > /dev/null || missing+=(chromium)
  [[ -x /usr/sbin/slurmctld && -x /usr/sbin/munged ]] || missing+=(slurm-wlm munge)
  command -v ip > /dev/null || missing+=(iproute2)  # the two-node test Slurm's network namespaces
  if (( ${#missing[@]} )); then
    if [[ $(id -u) == 0 ]] && command -v apt-get > /dev/null; then
      echo "setup: installing Debian packages the tests drive: ${missing[*]} (--no-system skips this)" >&2
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" > /dev/null
    else
      echo "setup: the tests need Debian packages: ${missing[*]} (install them as root)" >&2
    fi
  fi
fi
