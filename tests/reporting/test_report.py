"""The HTML report of a real small study, opened in real headless Chromium."""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path

import optuna
import pytest

from tests.search.test_study import spec_for
from tianfeng.hpo.running.runner import run_search
from tianfeng.promotion.calibration import calibrate
from tianfeng.reporting.build import build_report

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--virtual-time-budget=8000", "--enable-logging=stderr", "--v=0"]


def chromium(*args: str, profile: Path) -> subprocess.CompletedProcess:
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        raise FileNotFoundError("headless Chromium is not installed: run `bash scripts/setup.sh --dev` "
                                "(it installs Debian's chromium package)")
    return subprocess.run([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.search.conftest import TINY_SPACE, write_space

    tmp = tmp_path_factory.mktemp("report")
    space = copy.deepcopy(TINY_SPACE)
    space["priors"][0]["name"] = "<script>document.title='pwned'</script>"  # a user-supplied string
    plan = spec_for(tmp, write_space(tmp, space), trials=6, study="rep")
    run_search(plan, workers=1, resume=False)
    calibrate(plan.options.storage, "rep", top_k=2, n_random=1, seed=0, runs_dir=tmp / "runs")
    optuna.load_study(study_name="rep", storage=plan.options.storage).set_user_attr(
        "data", "<script>alert('pwned')</script>")
    return build_report(plan.options.storage, "rep", tmp / "rep.html")


def test_report_is_self_contained_and_escapes_user_strings(report: Path) -> None:
    html = report.read_text()
    assert "<script>alert(" not in html and "&lt;script&gt;alert(&#39;pwned&#39;)&lt;/script&gt;" in html
    assert "<script>document.title" not in html
    assert not re.search(r"<script[^>]+src=", html)  # plotly.js is inlined, nothing loads from a network
    assert report.stat().st_size < 10 * 2**20
    assert re.search(r"\d\.\d{3} core-hours", html)


def test_timeline_has_a_row_per_worker(report: Path) -> None:
    import socket

    from tianfeng.reporting.figures import timeline

    study = optuna.load_study(study_name="rep", storage=f"sqlite:///{report.parent / 'study.db'}")
    fig, _ = timeline(study)
    rows = {y for trace in fig.data for y in trace.y}
    assert len(rows) == 1 and next(iter(rows)).startswith(socket.gethostname() + ":")
    assert sum(len(trace.y) for trace in fig.data) == len(study.trials)


@pytest.mark.slow
def test_every_figure_draws_in_headless_chromium(report: Path, tmp_path: Path) -> None:
    # a window tall enough to hold every figure: each is drawn when it comes into view
    dom = chromium("--window-size=1300,20000", "--dump-dom", report.as_uri(), profile=tmp_path / "p1")
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    divs = re.findall(r'<div class="figure[^"]*" id="(fig-\d+)"', html)
    assert len(divs) >= 8, divs  # history, timeline, curves, importances, parallel, slices, schedules, proxy/full
    for fig_id in divs:
        start = html.index(f'id="{fig_id}"')
        end = html.find('<div class="figure', start + 10)
        assert "<svg" in html[start:end if end > 0 else None], f"{fig_id} drew no SVG"
    console_errors = [line for line in dom.stderr.splitlines()
                      if "CONSOLE" in line and ("Error" in line or "Uncaught" in line)]
    assert not console_errors, console_errors
    assert "pwned" not in re.search(r"<title>(.*?)</title>", html).group(1)
    # in a normal window only the figures near the first screen are drawn at load
    first = chromium("--window-size=1300,900", "--dump-dom", report.as_uri(), profile=tmp_path / "p3")
    drawn = [i for i in divs if "<svg" in first.stdout[first.stdout.index(f'id="{i}"'):][:3000]]
    assert drawn and drawn[0] == "fig-0" and divs[-1] not in drawn, drawn
    ARTIFACTS.mkdir(exist_ok=True)
    shot = chromium("--window-size=1300,6000", f"--screenshot={ARTIFACTS / 'study-report.png'}",
                    report.as_uri(), profile=tmp_path / "p2")
    assert shot.returncode == 0 and (ARTIFACTS / "study-report.png").stat().st_size > 50_000


def test_report_embeds_the_basic_plotly_bundle(report: Path) -> None:
    """setup.sh installs plotly.js's basic bundle; every figure here is scatter or bar, so the
    report embeds it (a quarter of the full bundle) rather than the full one."""
    from plotly.offline import get_plotlyjs_version

    from tianfeng.reporting.plotlyjs import basic_bundle_path

    assert basic_bundle_path().is_file(), f"{basic_bundle_path()} missing: run scripts/setup.sh (needs npm)"
    html = report.read_text()
    assert f"plotly.js (basic - minified) v{get_plotlyjs_version()}" in html
    assert len(html) < 3 * 2**20  # the full bundle alone is 4.6 MB


def test_a_figure_outside_the_basic_bundle_gets_the_full_one(tmp_path: Path, monkeypatch) -> None:
    import plotly.graph_objects as go
    from plotly.offline import get_plotlyjs

    from tianfeng.reporting import plotlyjs

    basic = plotlyjs.bundle_for([go.Figure(go.Scatter(x=[1], y=[1])), None])
    assert len(basic) < len(get_plotlyjs()) / 2
    assert plotlyjs.bundle_for([go.Figure(go.Heatmap(z=[[1]]))]) == get_plotlyjs()
    monkeypatch.setenv("TIANFENG_PLOTLYJS_BASIC", str(tmp_path / "missing.js"))
    plotlyjs._basic_bundle.cache_clear()
    try:
        assert plotlyjs.bundle_for([go.Figure(go.Scatter(x=[1], y=[1]))]) == get_plotlyjs()
    finally:
        plotlyjs._basic_bundle.cache_clear()


def test_a_noise_scale_estimate_at_or_below_zero_breaks_the_line_and_is_marked_as_too_little_signal() -> None:
    """On a log axis a negative estimate has no place; drawn as a point it became a line to the
    axis. It is noise swamping the signal, and is shown as that."""
    from optuna.trial import TrialState, create_trial

    from tianfeng.reporting.figures import noise_scale

    trial = create_trial(state=TrialState.COMPLETE, value=1.0,
                         user_attrs={"noise_curve": {"1": 120.0, "2": -35.0, "3": 410.0, "4": 0.0}})
    trial.number = 4
    run = {"id": 2, "trial_number": 4, "epochs": [{"epoch": 1, "noise_scale": -8.0}, {"epoch": 2, "noise_scale": 90.0}]}
    fig, note = noise_scale([trial], [run])
    assert note == ""
    lines = {t.name: list(t.y) for t in fig.data}
    assert lines["trial #4"] == [120.0, None, 410.0, None] and lines["run 2 (trial #4)"] == [None, 90.0]
    assert all(t.connectgaps is False for t in fig.data[:2])
    marked = fig.data[-1]
    assert marked.name == "estimate <= 0: too little signal" and marked.mode == "markers"
    assert list(marked.x) == [2, 4, 1] and set(marked.y) == {45.0}  # at half the least measured scale
    assert list(marked.text) == ["trial #4, epoch 2: estimate -35", "trial #4, epoch 4: estimate 0",
                                 "run 2 (trial #4), epoch 1: estimate -8"]
