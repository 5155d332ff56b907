"""The report's numbers against the study they describe, read back from the HTML: the trial counts
by outcome, the budget used, the pruned share, the best trial and its value, every row of the
trial table. Computed here from the trials themselves, not through the report's own helpers."""

from __future__ import annotations

import copy
import re
from html.parser import HTMLParser

import optuna
import pytest
from optuna.trial import TrialState

from tests.search.conftest import TINY_SPACE, write_space
from tests.search.test_study import spec_for
from tianfeng.hpo.running.runner import run_search
from tianfeng.reporting.build import build_report


class _Tables(HTMLParser):
    """Every table of the page as lists of cell texts, and the page's text."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.text: list[str] = []
        self._cell: list[str] | None = None
        self._skip = 0

    def handle_starttag(self, tag: str, attrs) -> None:
        if tag in ("script", "style"):
            self._skip += 1
        elif tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style"):
            self._skip -= 1
        elif tag in ("td", "th") and self._cell is not None and self.tables and self.tables[-1]:
            self.tables[-1][-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)


@pytest.fixture(scope="module")
def study_and_page(tmp_path_factory: pytest.TempPathFactory) -> tuple[optuna.Study, _Tables]:
    tmp = tmp_path_factory.mktemp("report-numbers")
    space = copy.deepcopy(TINY_SPACE)
    space["parameters"]["batch_size"]["choices"] = [64, 4096]  # 4096 > digits' training set: those fail
    space["priors"] = []
    plan = spec_for(tmp, write_space(tmp, space), trials=6, study="nums", seed=3, pruner="asha")
    run_search(plan, workers=1, resume=False)
    study = optuna.load_study(study_name="nums", storage=plan.options.storage)
    page = _Tables()
    page.feed(build_report(plan.options.storage, "nums", tmp / "nums.html").read_text())
    return study, page


def _seconds(t: optuna.trial.FrozenTrial) -> float:
    return (t.datetime_complete - t.datetime_start).total_seconds()


def test_the_summary_counts_and_budget_match_the_trials(study_and_page) -> None:
    study, page = study_and_page
    trials = study.get_trials()
    summary = next({row[0]: row[1] for row in t if len(row) == 2} for t in page.tables if ["trials"] in [r[:1] for r in t])
    states = [t.state for t in trials]
    failed = sum(t.state == TrialState.FAIL and t.user_attrs.get("status") == "failed" for t in trials)
    assert failed >= 1, "the study was meant to hold a failed trial"
    assert summary["trials"] == (f"{len(trials)}: {states.count(TrialState.COMPLETE)} completed, "
                                 f"{states.count(TrialState.PRUNED)} pruned, {failed} failed")
    wall = sum(_seconds(t) for t in trials)
    cores = sum(_seconds(t) * float(t.user_attrs["cores"]) for t in trials)
    pruned = sum(_seconds(t) for t in trials if t.state == TrialState.PRUNED)
    assert summary["budget used"] == (f"{wall / 3600:.3f} trial-hours, {cores / 3600:.3f} core-hours ({wall:.0f} s "
                                      f"of trial wall time, {pruned / wall:.0%} of it in pruned trials)")


def test_the_best_trial_and_the_trial_table_match_the_study(study_and_page) -> None:
    study, page = study_and_page
    trials = study.get_trials()
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    best = max(complete, key=lambda t: t.value)
    text = " ".join("".join(page.text).split())
    assert re.search(rf"Trial #{best.number}: val_top1 = {best.value:.4g}\b", text), text[:2000]
    table = next(t for t in page.tables if t and t[0][:3] == ["trial", "state", "val_top1"])
    header, rows = table[0], table[1:]
    assert [int(r[0]) for r in rows] == [t.number for t in trials]
    for row, t in zip(rows, trials, strict=True):
        cells = dict(zip(header, row, strict=True))
        shown_state = {TrialState.FAIL: "failed", TrialState.COMPLETE: "completed"}.get(t.state, t.state.name.lower())
        assert cells["state"] == shown_state
        # a pruned trial shows the value it was pruned at (Optuna keeps its last report)
        assert cells["val_top1"] == (f"{t.value:.4g}" if t.value is not None else "-")
        assert cells["epochs run"] == str(max(map(int, t.intermediate_values), default=0))
        assert cells["seconds"] == f"{_seconds(t):.4g}"
        for name, value in t.params.items():
            assert cells[name] == (f"{value:.4g}" if isinstance(value, float) else str(value))
        # the LR the optimizer trained at: the sampled base LR scaled for the batch by the schedule's rule
        cfg = t.user_attrs.get("config")
        if cfg:
            scaled = cfg["optimizer"]["lr"] * cfg["phases"][-1]["batch_size"] / cfg["schedule"]["reference_batch_size"]
            assert cfg["schedule"]["scaling_rule"] == "linear"
            assert cells["peak lr (trained at)"] == f"{scaled:.4g}", (cells, cfg["schedule"])
