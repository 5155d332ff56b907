"""The wall-time model against the published GPU records it can be checked on (the inputs and
their sources are in benchmarks/published_records.py): each record predicted from tables fitted
without its own logged rate (leave-one-out), with one device, stack and network table; the
records of MLPerf rounds kept out of the fit are the independent check."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import published_records  # noqa: E402


def _off(ratio: float) -> float:
    return max(ratio, 1 / ratio)


def test_every_record_is_predicted_within_the_bounds_measured() -> None:
    rows = {r.name: (r, published_records.predict(r, leave_one_out=True)) for r in published_records.RECORDS}
    fitted = [row["ratio"] for r, row in rows.values() if not r.check]
    check = [row["ratio"] for r, row in rows.values() if r.check]
    assert len(fitted) >= 8 and len(check) >= 5
    assert all(_off(x) <= 1.5 for x in fitted) and 1 / 1.1 <= statistics.median(fitted) <= 1.1
    assert all(_off(x) <= 1.6 for x in check) and 1 / 1.1 <= statistics.median(check) <= 1.1
    for r, row in rows.values():
        assert row["predicted_s"] == sum(row["parts"].values())
        assert (row["parts"]["startup"] == 0) == r.timed_from_first_step  # MLPerf's clock starts after initialisation
    assert {r.device for r, _ in rows.values()} >= {"p100", "v100", "a100", "h100"}
    assert max(r.gpus for r, _ in rows.values()) >= 2048 and min(r.gpus for r, _ in rows.values()) == 8


def test_leaving_a_records_rate_out_changes_only_its_own_fit() -> None:
    """A record of a fitted round is predicted without its own point: at 4,320 A100s (15 a GPU,
    the smallest batch) the refitted curve differs; a paper record has no point to leave out."""
    by_name = {r.name: r for r in published_records.RECORDS}
    small = by_name["NVIDIA MLPerf v1.1 4320 GPUs"]
    assert published_records.predict(small, True)["ratio"] != published_records.predict(small)["ratio"]
    goyal = by_name["Goyal et al. 2017"]
    assert published_records.predict(goyal, True)["ratio"] == published_records.predict(goyal)["ratio"]
