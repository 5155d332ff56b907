#!/usr/bin/env bash
# The test suite: every test that does not depend on timing runs in parallel processes, one per
# core (pytest-xdist); the tests marked `alone` (signals at a moment, deadlines, time budgets,
# kills, Ray) then run one at a time with the machine to themselves. Extra arguments go to both.
set -uo pipefail
cd "$(dirname "$0")/.."
status=0
run() {  # pytest's exit 5 (no test selected, e.g. by a -k of the caller's) is not a failure
    .venv/bin/python -m pytest -q "$@"
    local rc=$?
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ] && [ "$status" -eq 0 ]; then status=$rc; fi
}
run -n auto -m "not alone" "$@"
run -m alone "$@"
exit "$status"
