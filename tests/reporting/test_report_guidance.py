"""What the report tells its reader first: the next step, the front as a table, the contents,
the caveats of small samples, the best-so-far line and labels that do not hide a choice."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import optuna
import pytest

from tests.search.conftest import TINY_SPACE, write_space
from tests.search.test_study import spec_for
from tianfeng.hpo.judge.scores import pareto_front, predicted_s, score
from tianfeng.hpo.running.runner import run_search
from tianfeng.reporting import figures
from tianfeng.reporting.build import build_report
from tianfeng.reporting.guidance import FEW_FOR_IMPORTANCES, front_rows, next_step
from tianfeng.storage.runs import RunStore


@pytest.fixture(scope="module")
def pareto_study(tmp_path_factory: pytest.TempPathFactory) -> tuple[optuna.Study, Path]:
    tmp = tmp_path_factory.mktemp("guidance")
    space = copy.deepcopy(TINY_SPACE)
    space["objective"] = {**space.get("objective", {}), "mode": "pareto"}
    space["parameters"]["decay"] = {"type": "categorical", "choices": ["step", "cosine", "poly", "linear"]}
    plan = spec_for(tmp, write_space(tmp, space), trials=6, study="g", seed=1)
    run_search(plan, workers=1, resume=False)
    study = optuna.load_study(study_name="g", storage=plan.options.storage)
    return study, build_report(plan.options.storage, "g", tmp / "g.html")


def test_the_page_opens_with_contents_whose_every_link_has_a_target(pareto_study) -> None:
    _, page = pareto_study
    html = page.read_text()
    nav = re.search(r'<nav class="toc">(.*?)</nav>', html, re.S).group(1)
    links = re.findall(r'href="#([^"]+)"', nav)
    ids = set(re.findall(r'\bid="([^"]+)"', html))
    assert len(links) >= 15 and not set(links) - ids, set(links) - ids
    assert html.index('id="next-step"') < html.index('id="summary"') < html.index('id="all-trials"')


def _front_by_hand(study) -> list:
    """The completed trials at or above the floor (the given one, or halfway from chance to the
    best) that no other such trial matches or beats on both score and predicted time."""
    done = [t for t in study.get_trials() if t.state.name == "COMPLETE" and predicted_s(t) is not None]
    floor = study.user_attrs.get("min_accuracy") or 0.0
    if study.user_attrs.get("chance") is not None:
        chance = study.user_attrs["chance"]
        floor = max(floor, chance + (max(score(t) for t in done) - chance) / 2)
    ok = [t for t in done if score(t) >= floor]
    return [t for t in ok if not any((score(o), -predicted_s(o)) != (score(t), -predicted_s(t))
                                     and score(o) >= score(t) and predicted_s(o) <= predicted_s(t) for o in ok)]


def test_a_pareto_study_shows_its_front_fastest_first_with_a_promote_command(pareto_study) -> None:
    study, page = pareto_study
    rows = front_rows(study)
    front = _front_by_hand(study)
    assert sorted(int(r["number"]) for r in rows) == sorted(t.number for t in front) and rows
    by_number = {t.number: t for t in front}
    scores = [score(by_number[r["number"]]) for r in rows]
    seconds = [predicted_s(by_number[r["number"]]) for r in rows]
    assert seconds == sorted(seconds) and scores == sorted(scores)  # each more accurate than the faster ones
    table = re.search(r'<table id="front-table">(.*?)</table>', page.read_text(), re.S).group(1)
    assert re.findall(r"<td>#(\d+)</td>", table) == [str(r["number"]) for r in rows]
    step = next_step(study, [], max(front, key=score), "--study g")
    assert step.command == f"tianfeng promote {max(front, key=score).number} --study g"


def test_the_next_step_after_a_promotion_names_its_result_and_asks_for_calibration(pareto_study) -> None:
    study, _ = pareto_study
    best = max(pareto_front(study), key=score)
    run = {"id": 4, "trial_number": best.number, "kind": "promote", "final_score": 91.25, "proxy_score": 80.5}
    step = next_step(study, [run], best, "--study g")
    assert f"Trial #{best.number} was promoted (run 4, promote)" in step.text and "91.25" in step.text
    assert step.command == "tianfeng calibrate --study g"
    assert next_step(study, [], None, "--study g").command == ""  # nothing complete: nothing to promote


def test_importances_from_few_trials_carry_a_warning_and_rho_asks_for_calibrate(pareto_study) -> None:
    study, page = pareto_study
    html = page.read_text()
    assert len(figures.completed(study)) < FEW_FOR_IMPORTANCES
    assert re.search(r'<p class="warn">Estimated from \d+ complete trials \(fewer than 10\)', html)
    assert re.search(r'<p class="warn">How well the proxy ranks recipes is not measured \(0 proxy/full pairs.*'
                     r'run tianfeng calibrate --study g', html)
    assert RunStore(f"sqlite:///{page.parent / 'study.db'}").runs("g") == []


def test_the_history_draws_the_best_so_far_in_a_pareto_study(pareto_study) -> None:
    study, _ = pareto_study
    fig, _ = figures.history(study)
    points, best = fig.data
    assert best.name == "best so far" and len(best.y) == len(points.y)
    running = [max(points.y[: i + 1]) for i in range(len(points.y))]
    assert list(best.y) == running and list(points.x) == sorted(points.x)


def test_parallel_coordinates_label_every_choice_of_a_categorical_parameter(pareto_study) -> None:
    study, _ = pareto_study
    fig, _ = figures.parallel(study)
    labels = {a.text for a in fig.layout.annotations}
    assert {"step", "cosine", "poly", "linear"} <= labels


@pytest.mark.parametrize(("largest", "step"), [(3, 1), (10, 1), (11, 2), (30, 5), (90, 10), (199, 20), (480, 50)])
def test_integer_axes_tick_at_round_steps(largest: int, step: int) -> None:
    assert figures.integer_axis(largest) == {"tick0": 0, "dtick": step}


def test_the_trial_table_has_unique_column_names(tmp_path: Path) -> None:
    space = copy.deepcopy(TINY_SPACE)
    space["parameters"]["seconds"] = {"type": "categorical", "choices": [1, 2]}  # a parameter named like a column
    plan = spec_for(tmp_path, write_space(tmp_path, space), trials=2, study="u")
    run_search(plan, workers=1, resume=False)
    html = build_report(plan.options.storage, "u", tmp_path / "u.html").read_text()
    header = re.search(r'<table id="trials">\s*<thead><tr>(.*?)</tr>', html, re.S).group(1)
    names = re.findall(r"<th[^>]*>(.*?)</th>", header)
    assert len(names) == len(set(names)) and "seconds (parameter)" in names and "seconds" in names


@pytest.mark.parametrize(("values", "kind", "ticks"), [
    ([34.3, 44.4, 45.0], "linear", None),           # well under a decade: log ticks would read as linear
    ([12.0, 900.0], "log", [10, 20, 50, 100, 200, 500, 1000]),
    ([3.5, 11.0], "log", [5, 10]),
])
def test_the_wall_time_axis_is_the_scale_its_title_names(values: list[float], kind: str, ticks) -> None:
    axis = figures.seconds_axis(values, "predicted wall time")
    assert axis["type"] == kind and ("log scale" in axis["title"]) == (kind == "log")
    assert axis.get("tickvals") == ticks


def test_the_pareto_plot_uses_that_axis(pareto_study) -> None:
    study, _ = pareto_study
    fig, _ = figures.pareto(study, [])
    times = [predicted_s(t) for t in study.get_trials() if t.state.name == "COMPLETE" and predicted_s(t) is not None]
    assert fig.layout.xaxis.type == figures.seconds_axis(times, "predicted wall time")["type"]
    assert fig.layout.xaxis.title.text == figures.seconds_axis(times, "predicted wall time")["title"]
