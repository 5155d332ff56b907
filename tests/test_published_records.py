"""The wall-time model against the published GPU records it can be checked on (the inputs and
their sources are in benchmarks/published_records.py): every record within 1.5x of its
published time, the median within 1.25x, with one device and one network table."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import published_records  # noqa: E402


def test_every_record_is_predicted_within_the_aim() -> None:
    rows = [published_records.predict(r) for r in published_records.RECORDS]
    assert len(rows) >= 3
    for row in rows:
        assert 1 / 1.5 <= row["ratio"] <= 1.5, row
        assert row["predicted_s"] == sum(row["parts"].values())
    assert 1 / 1.25 <= statistics.median(r["ratio"] for r in rows) <= 1.25
    by_name = {r["record"]: r for r in rows}
    for mlperf in ("Fujitsu MLPerf v0.6", "NVIDIA MLPerf v1.0"):  # MLPerf's clock starts after initialisation
        assert by_name[mlperf]["parts"]["startup"] == 0
    assert {r.device for r in published_records.RECORDS} >= {"p100", "v100", "a100"}  # three GPU generations
    assert by_name["Goyal et al. 2017"]["parts"]["startup"] > 0
