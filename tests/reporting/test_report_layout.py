"""The report's layout in real headless Chromium, on a 30- and a 200-trial study of the shipped
space, in a 1400- and an 800-pixel window: no two text labels of a figure overlap, and every column of the trials table can be
scrolled into view with the trial number and state staying in sight."""

from __future__ import annotations

import json
import re
from pathlib import Path

import optuna
import pytest

from tests.reporting.test_report import chromium
from tianfeng.hpo.running.objective import ProxyObjective
from tianfeng.hpo.running.study import open_study
from tianfeng.hpo.space.read import load_space
from tianfeng.hpo.spec import SearchSpec
from tianfeng.reporting.build import build_report
from tianfeng.trainers.engine import EpochMetrics, RunResult

REPO = Path(__file__).resolve().parents[2]

# Runs in the page once every figure is drawn; writes what it measured into <pre id="layout">.
CHECK = """
<script>
setTimeout(function () {
  function boxes(root, selector) {
    return Array.from(root.querySelectorAll(selector)).map(function (e) { return e.getBoundingClientRect(); })
      .filter(function (r) { return r.width > 0 && r.height > 0; });
  }
  function overlaps(a, b) { return a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1; }
  var figures = {};
  document.querySelectorAll("div.figure").forEach(function (div) {
    var labels = boxes(div, "g.textpoint text, g.annotation");
    var clashes = 0;
    for (var i = 0; i < labels.length; i++) for (var j = i + 1; j < labels.length; j++) if (overlaps(labels[i], labels[j])) clashes++;
    figures[div.id] = {labels: labels.length, clashes: clashes, drawn: !!div.querySelector("svg")};
  });
  var scroll = document.getElementById("trials-scroll"), heads = scroll.querySelectorAll("th");
  var box = scroll.getBoundingClientRect();
  scroll.scrollLeft = scroll.scrollWidth;
  var last = heads[heads.length - 1].getBoundingClientRect(), first = heads[0].getBoundingClientRect();
  document.getElementById("layout").textContent = JSON.stringify({
    figures: figures, columns: heads.length, overflow: getComputedStyle(scroll).overflowX,
    page_wider_than_window: document.documentElement.scrollWidth > window.innerWidth,
    table_wider_than_box: scroll.scrollWidth > scroll.clientWidth,
    last_visible: last.right <= box.right + 1 && last.left >= box.left,
    first_stays: Math.abs(first.left - box.left) < 2});
}, 4000);
</script>
<pre id="layout"></pre>
"""


def pseudo_trainer(cfg, callback) -> RunResult:
    """A score that depends on the recipe (not a real training run: this test is about layout)."""
    score = 50 + (hash((cfg.optimizer.lr, cfg.phases[-1].batch_size)) % 4000) / 100
    epochs = []
    for e in range(1, cfg.total_epochs + 1):
        m = EpochMetrics(epoch=e, phase=0, resolution=cfg.phases[0].resolution, batch_size=cfg.phases[0].batch_size,
                         lr=cfg.optimizer.lr, train_loss=1.0 / e, val_loss=1.0 / e, val_top1=score * e / cfg.total_epochs,
                         val_top5=90.0, samples_per_s=1000.0, data_wait_fraction=0.0, skipped_steps=0, elapsed_s=e)
        callback(m)
        epochs.append(m)
    return RunResult("completed", epochs, Path(cfg.resolved_run_dir), "fp32")


@pytest.mark.slow
@pytest.mark.parametrize(("trials", "width", "sampler"), [(30, 1400, "tpe"), (30, 800, "tpe"), (200, 1400, "random")])
def test_no_labels_overlap_and_every_column_is_reachable(tmp_path: Path, trials: int, width: int, sampler: str) -> None:
    """TPE's clustered recipes crowd the labels most; the large study samples at random (TPE over
    200 trials spends most of a minute sampling, and the layout is what is tested)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space_path = REPO / "search_spaces" / "large_batch.yaml"
    spec = SearchSpec.of(space_path=str(space_path), data=None, storage=f"sqlite:///{tmp_path}/r.db", study="lay",
                      sampler=sampler, pruner="none", seed=0, trials=trials, timeout_s=None,
                      runs_dir=str(tmp_path / "runs"), rung="proxy")
    space = load_space(space_path)
    study = open_study(spec, space, resume=False)
    study.optimize(ProxyObjective(space, "lay", tmp_path / "runs", "proxy", trainer=pseudo_trainer), n_trials=trials)
    report = build_report(spec.options.storage, "lay", tmp_path / "lay.html")
    checked = tmp_path / "checked.html"
    checked.write_text(report.read_text().replace("</body>", CHECK + "</body>"))
    dom = chromium(f"--window-size={width},30000", "--dump-dom", checked.as_uri(), profile=tmp_path / "p")
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = re.search(r'<pre id="layout">(.*?)</pre>', dom.stdout, re.S)
    assert found and found.group(1), "the layout check did not run"
    layout = json.loads(found.group(1).replace("&quot;", '"'))
    drawn = {k: v for k, v in layout["figures"].items() if v["drawn"]}
    assert len(drawn) >= 7, layout["figures"]
    for fig_id, f in drawn.items():
        assert f["clashes"] == 0, (fig_id, f)
    assert layout["columns"] >= 15  # trial, state, metric, epochs, seconds, prior and every parameter
    assert layout["table_wider_than_box"] and layout["overflow"] in ("auto", "scroll")
    assert not layout["page_wider_than_window"]  # the table scrolls inside the page, not the page
    assert layout["last_visible"] and layout["first_stays"], layout
