#!/usr/bin/env bash
# The test suite: every test that does not depend on timing runs in parallel processes, one per
# core (pytest-xdist); the tests marked `alone` (signals at a moment, deadlines, time budgets,
# kills, Ray) then run one at a time with the machine to themselves.
#   bash scripts/test.sh            the tests not marked `slow`
#   bash scripts/test.sh --all      every test, the slow end-to-end ones too (what CI runs)
#   bash scripts/test.sh --results  also write docs/results/test_suite.json (counts, minutes,
#                                   commit, date, machine), which the README quotes
# Other arguments go to pytest, in both parts.
set -uo pipefail
cd "$(dirname "$0")/.."
selection=quick results=""
args=()
for arg in "$@"; do
    case "$arg" in
        --all) selection=all ;;
        --results) results=$(mktemp -d) ;;
        *) args+=("$arg") ;;
    esac
done
slow=" and not slow"
[ "$selection" = all ] && slow=""
status=0
run() {  # pytest's exit 5 (no test selected, e.g. by a -k of the caller's) is not a failure
    local part=$1
    shift
    TIANFENG_SUITE_RESULTS=$results TIANFENG_SUITE_PART=$part .venv/bin/python -m pytest -q "$@" "${args[@]}"
    local rc=$?
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ] && [ "$status" -eq 0 ]; then status=$rc; fi
}
run parallel -n auto -m "not alone$slow"
run alone -m "alone$slow"
if [ -n "$results" ]; then
    .venv/bin/python scripts/suite_results.py "$results" --selection "$selection" || status=1
    rm -rf "$results"
fi
exit "$status"
