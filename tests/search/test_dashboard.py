"""optuna-dashboard on tianfeng studies: objective names, per-epoch curves for every objective
mode (read through the dashboard's own HTTP API), the space kept out of the user attributes."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from optuna_dashboard import wsgi

from tests.search.conftest import write_space
from tests.search.test_study import spec_for
from tianfeng.hpo.results.dashboard import CURVES_ID, publish_curves
from tianfeng.hpo.running.runner import run_search
from tianfeng.hpo.space.stored import space_text


def _get(app, path: str) -> dict:
    """One GET through the dashboard's WSGI application, as its web page asks."""
    status: list[str] = []
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": "", "SERVER_NAME": "localhost",
               "SERVER_PORT": "80", "wsgi.url_scheme": "http", "wsgi.input": io.BytesIO(), "wsgi.errors": sys.stderr}
    body = b"".join(app(environ, lambda s, headers, exc_info=None: status.append(s)))
    assert status[0].startswith("200"), (status, body[:300])
    return json.loads(body)


@pytest.mark.parametrize("mode", ["pareto", "accuracy"])
def test_the_dashboard_api_shows_metric_names_and_curves(tmp_path: Path, tiny_space: dict, mode: str) -> None:
    tiny_space["objective"]["mode"] = mode
    spec = spec_for(tmp_path, write_space(tmp_path, tiny_space), trials=3, pruner="none")
    run_search(spec, workers=1, resume=False)
    study = optuna.load_study(study_name=spec.study, storage=spec.options.storage)
    assert publish_curves(study)

    app = wsgi(spec.options.storage)
    listed = _get(app, "/api/studies")["study_summaries"]
    detail = _get(app, f"/api/studies/{listed[0]['study_id']}")
    names = ["val_top1", "predicted_seconds"] if mode == "pareto" else ["val_top1"]
    assert detail["objective_names"] == names
    figures = {g["id"]: json.loads(g["graph_object"]) for g in detail["plotly_graph_objects"]}
    traces = figures[CURVES_ID]["data"]
    assert len(traces) == 3 and all(len(t["y"]) == 2 for t in traces)  # 3 trials of 2 proxy epochs
    stored = {t["number"]: t for t in detail["trials"]}
    if mode == "pareto":  # the curve a trial recorded is the one drawn
        first = study.trials[0].user_attrs["curve"]
        assert traces[0]["y"] == [first["1"], first["2"]]
    user_attrs = {a["key"] for a in detail["user_attrs"]}
    assert "metric" in user_attrs and "space_yaml" not in user_attrs and len(stored) == 3
    assert space_text(study) == (tmp_path / "space.yaml").read_text()


def test_a_study_made_before_still_finds_its_space_in_the_user_attributes() -> None:
    study = optuna.create_study()
    study.set_user_attr("space_yaml", "name: old\n")
    assert space_text(study) == "name: old\n"


def test_tianfeng_dashboard_saves_the_curves_and_names_a_missing_study(tmp_path: Path, tiny_space: dict) -> None:
    tiny_space["objective"]["mode"] = "pareto"
    spec = spec_for(tmp_path, write_space(tmp_path, tiny_space), trials=2, pruner="none")
    run_search(spec, workers=1, resume=False)
    cli = [sys.executable, "-m", "tianfeng.cli", "dashboard"]
    done = subprocess.run([*cli, "s", "--storage", spec.options.storage, "--no-serve"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "study s: per-epoch curves saved" in done.stderr
    study = optuna.load_study(study_name="s", storage=spec.options.storage)
    attrs = study._storage.get_study_system_attrs(study._study_id)
    assert any(CURVES_ID in key for key in attrs)
    missing = subprocess.run([*cli, "--study", "nope", "--storage", spec.options.storage, "--no-serve"], capture_output=True, text=True)
    assert missing.returncode == 2 and "--study: nope: no such study" in missing.stderr
