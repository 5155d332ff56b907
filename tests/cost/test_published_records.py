"""The wall-time model against the published GPU records it can be checked on (the inputs and
their sources are in benchmarks/cost/published_records.py): each record predicted from tables fitted
without its own logged rate (leave-one-out), with one device, stack and network table; the
records of MLPerf rounds kept out of the fit are the independent check."""

from __future__ import annotations

import statistics

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


def _mllog(key: str, t: float, **meta) -> str:
    import json

    return ":::MLLOG " + json.dumps({"namespace": "", "time_ms": int(t * 1000), "event_type": "POINT_IN_TIME",
                                     "key": key, "value": None, "metadata": meta})


def test_the_log_reader_takes_rates_and_boundary_costs_from_an_mllog_file() -> None:
    """A made-up result file: a 3-s first epoch, then four epochs of 1 s except the block's last
    (1.5 s), 0.2 s before the second evaluation. Bugs caught: the first epoch in the median, the
    evaluations counted as training time, the boundary's wait left out, a failed run used."""
    import mlperf_logs

    epochs = [(0.0, 3.0), (3.2, 4.2), (4.2, 5.2), (5.2, 6.2), (6.2, 7.7)]
    lines = [_mllog("run_start", 0.0), "noise that is not a log line", ":::MLLOG {broken"]
    for n, (start, stop) in enumerate(epochs, 1):
        lines += [_mllog("epoch_start", start, epoch_num=n), _mllog("epoch_stop", stop, epoch_num=n)]
        if n == 1:
            lines += [_mllog("eval_start", 3.1), _mllog("eval_stop", 3.2)]
    lines += [_mllog("eval_start", 7.9), _mllog("eval_stop", 8.0), _mllog("run_stop", 8.0, status="success")]
    got = mlperf_logs.run_figures("\n".join(lines))
    images = mlperf_logs.IMAGENET_TRAIN
    assert got.run_s == 8.0 and got.epochs == 5 and got.evaluations == 2
    assert got.median_epoch_rate == images / 1.0
    assert abs(got.span_rate - 4 * images / (7.7 - 3.0 - 0.1)) < 1e-6
    assert abs(got.first_epoch_extra_s - 2.0) < 1e-9
    assert abs(got.boundary_extra_s - (0.5 + 0.2)) < 1e-9
    failed = "\n".join(lines).replace('"status": "success"', '"status": "aborted"')
    assert mlperf_logs.run_figures(failed) is None
