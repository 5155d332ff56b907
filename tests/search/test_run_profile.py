"""`tianfeng calibrate --from-run`: a promoted run's measured step times refine a throughput
profile, which then predicts that run's steps."""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil
import statistics
from pathlib import Path

import pytest

from tests.search.conftest import TINY_SPACE, write_space
from tests.search.test_study import spec_for
from tianfeng.cli import main
from tianfeng.core.errors import ConfigError
from tianfeng.cost.cluster import DEFAULT as V100_CLUSTER
from tianfeng.cost.step_time import DEVICES
from tianfeng.hpo.running.runner import run_search
from tianfeng.hpo.space.materialize import build_config
from tianfeng.hpo.space.read import load_space
from tianfeng.promotion.options import PromoteOptions
from tianfeng.promotion.run import promote
from tianfeng.promotion.run_profile import exposed_exchange_s, refitted, run_points
from tianfeng.storage.runs import RunStore


def _epoch(phase: int, world: int, samples_per_s: float, wait: float, resolution: int = 8, batch: int = 128) -> dict:
    return {"phase": phase, "world": world, "samples_per_s": samples_per_s, "data_wait_fraction": wait,
            "train_s": 1.0, "resolution": resolution, "batch_size": batch}


def _cfg(tmp_path: Path):
    space = load_space(write_space(tmp_path, copy.deepcopy(TINY_SPACE)))
    return build_config(space, {"optimizer": "sgd", "base_lr": 0.1, "warmup_epochs": 0.0, "batch_size": 128,
                                "momentum": 0.9}, "target")


def test_a_phase_point_is_its_median_step_less_its_waits_and_its_predicted_exchange(tmp_path: Path) -> None:
    """Bug caught: the mean instead of the median (a warm-up epoch moves it), the data wait left
    in, the global batch taken for the per-process one, or the exchange not taken off."""
    cfg = _cfg(tmp_path)
    run = {"id": 7, "epochs": [_epoch(0, 1, 128.0, 0.5), _epoch(0, 1, 1280.0, 0.0), _epoch(0, 1, 640.0, 0.0),
                               _epoch(0, 2, 256.0, 0.0)]}
    alone, pair = run_points(run, cfg, V100_CLUSTER, in_channels=1, classes=10)
    # world 1: steps of 0.5 (half of 1 s waited), 0.1 and 0.2 s: the median 0.2
    assert (alone["batch"], alone["world"], alone["epochs"]) == (128, 1, 3)
    assert alone["step_s"] == pytest.approx(0.2) and alone["exchange_s"] == 0.0 and alone["compute_s"] == 0.2
    # world 2 on one node: 64 per process, the exchange as the model predicts it there
    spec = dataclasses.replace(V100_CLUSTER, gpus=2, gpus_per_node=2)
    exchange = exposed_exchange_s(cfg, 0, spec, in_channels=1, classes=10)
    assert exchange > 0 and (pair["batch"], pair["nodes"]) == (64, 1)
    assert pair["compute_s"] == pytest.approx(0.5 - exchange) and pair["source"] == "run 7"
    with pytest.raises(ConfigError, match="has no timed epochs"):
        run_points({"id": 7, "epochs": [{**_epoch(0, 1, 1.0, 0.0), "world": None}]}, cfg, V100_CLUSTER,
                   in_channels=1, classes=10)


def test_refitting_keeps_a_measured_shape_at_the_runs_level_and_fits_two_batches_exactly() -> None:
    fits = {"8": {"fixed_s": 0.02, "image_s": 0.001}, "16": {"fixed_s": 0.05, "image_s": 0.004}}
    one = [{"resolution": 8, "batch": 60, "compute_s": 0.16}]  # the fit said 0.08: twice as slow
    new = refitted(fits, one, half_batch=None)
    assert new["8"] == pytest.approx({"fixed_s": 0.04, "image_s": 0.002}) and new["16"] == fits["16"]
    two = [{"resolution": 16, "batch": 10, "compute_s": 0.3}, {"resolution": 16, "batch": 30, "compute_s": 0.7}]
    assert refitted(fits, two, half_batch=None)["16"] == pytest.approx({"fixed_s": 0.1, "image_s": 0.02})
    # a resolution the profile lacks takes the nearest one's shape; a new profile the table's
    assert refitted(fits, [{"resolution": 12, "batch": 60, "compute_s": 0.16}], None)["12"] == pytest.approx(
        {"fixed_s": 0.04, "image_s": 0.002})
    assert refitted({}, one, half_batch=40.0)["8"] == pytest.approx({"fixed_s": 40 * 0.0016, "image_s": 0.0016})


@pytest.fixture(scope="module")
def promoted(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, int, Path]:
    root = tmp_path_factory.mktemp("run-profile")
    spec = spec_for(root, write_space(root, copy.deepcopy(TINY_SPACE)), trials=2, study="p")
    run_search(spec, workers=1, resume=False)
    ran = promote(PromoteOptions(storage=spec.options.storage, study='p', runs_dir=root / 'runs', dry_run=False), 0)
    return spec.options.storage, ran["run"], root


def test_a_profile_from_a_run_predicts_that_runs_steps_and_refining_again_changes_nothing(promoted, tmp_path: Path,
                                                                                          capsys) -> None:
    storage, run, root = promoted
    db = tmp_path / "study.db"
    shutil.copyfile(Path(storage.removeprefix("sqlite:///")), db)
    storage = f"sqlite:///{db}"
    out = tmp_path / "from-run.json"
    assert main(["calibrate", "--from-run", str(run), "--storage", storage, "-o", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    row = next(r for r in RunStore(storage).runs() if r["id"] == run)
    (point,) = result["points"]
    by_hand = statistics.median(e["batch_size"] * (1 - e["data_wait_fraction"]) / e["samples_per_s"]
                                for e in row["epochs"])
    assert point["step_s"] == pytest.approx(by_hand) and point["world"] == 1 and point["epochs"] == len(row["epochs"])
    assert point["after_s"] == pytest.approx(point["compute_s"], rel=1e-9)  # it now predicts the run's own step
    data = json.loads(out.read_text())
    fit = data["fits"][str(point["resolution"])]
    assert fit["fixed_s"] / fit["image_s"] == pytest.approx(DEVICES["v100"].half_batch)  # the table's shape
    assert data["links"] is None and data["runs"][0]["run"] == run
    # refining the same profile with the same run again: the same fits, the run's points once
    again = tmp_path / "again.json"
    assert main(["calibrate", "--from-run", str(run), "--storage", storage, "--profile", str(out),
                 "-o", str(again)]) == 0
    twice = json.loads(again.read_text())
    assert twice["fits"].keys() == data["fits"].keys() and len(twice["points"]) == len(data["points"])
    assert all(twice["fits"][r] == pytest.approx(data["fits"][r], rel=1e-9) for r in data["fits"])
    assert len(twice["runs"]) == 1


def test_an_unknown_run_and_another_models_profile_are_one_line(promoted, tmp_path: Path, capsys) -> None:
    storage, run, _ = promoted
    assert main(["calibrate", "--from-run", "999", "--storage", storage]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--from-run: 999: no such run" in err
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"kind": "tianfeng-throughput", "fits": {"8": {"fixed_s": 0.0, "image_s": 1e-4}},
                                 "model": {"name": "resnet50"}, "in_channels": 3, "classes": 10}))
    assert main(["calibrate", "--from-run", str(run), "--storage", storage, "--profile", str(other)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "the profile measured {'name': 'resnet50'}" in err


def test_plan_and_search_predict_with_the_profile_a_run_refined(promoted, tmp_path: Path, capsys,
                                                                monkeypatch) -> None:
    """Bug caught: --profile dropped by `plan`, by the search, or by the study (promote re-reads the
    study's cluster from it)."""
    import optuna

    from tianfeng.promotion.run import study_space

    storage, run, root = promoted
    monkeypatch.chdir(tmp_path)  # the search writes its report below the working directory
    profile = tmp_path / "profile.json"
    assert main(["calibrate", "--from-run", str(run), "--storage", storage, "-o", str(profile), "--json"]) == 0
    (point,) = json.loads(capsys.readouterr().out)["points"]
    row = next(r for r in RunStore(storage).runs() if r["id"] == run)
    config = tmp_path / "run.yaml"
    config.write_text(row["config_yaml"])
    assert main(["plan", "--config", str(config), "--gpus", "1", "--gpus-per-node", "1", "--train-images", "1280",
                 "--profile", str(profile), "--json"]) == 0
    captured = capsys.readouterr()
    flat = next(r for r in json.loads(captured.out) if r["gpus"] == 1 and r["variant"] == "flat")
    epochs = sum(p["epochs"] for p in build_config_phases(row))
    assert flat["parts"]["compute"] == pytest.approx(epochs * (1280 // 128) * point["compute_s"], rel=1e-9)
    assert "step curve measured" in captured.err
    db = f"sqlite:///{tmp_path / 'search.db'}"
    assert main(["search", "--space", str(write_space(tmp_path, copy.deepcopy(TINY_SPACE))), "--storage", db,
                 "--study", "m", "--trials", "1", "--objective", "pareto", "--profile", str(profile),
                 "--runs-dir", str(tmp_path / "runs")]) == 0
    study = optuna.load_study(study_name="m", storage=db)
    assert study.user_attrs["profile"] == str(profile.resolve())
    assert f"measured ({profile.resolve()})" in study.trials[0].user_attrs["predicted"]["cluster"]
    assert study_space(study).cluster.throughput == str(profile.resolve())


def build_config_phases(row: dict) -> list[dict]:
    import yaml

    return yaml.safe_load(row["config_yaml"])["phases"]


@pytest.mark.parametrize(("field", "value"), [("samples_per_s", float("nan")), ("world", "2"), ("batch_size", 0),
                                               ("data_wait_fraction", 3.0), ("phase", 0.5)])
def test_an_edited_epoch_is_one_line_naming_the_run_the_epoch_and_the_field(tmp_path: Path, field, value) -> None:
    epochs = [_epoch(0, 1, 1000.0, 0.1), {**_epoch(0, 1, 1000.0, 0.1), field: value}]
    with pytest.raises(ConfigError) as info:
        run_points({"id": 7, "epochs": epochs}, _cfg(tmp_path), V100_CLUSTER, in_channels=1, classes=10)
    assert f"epochs.1.{field}: must be" in str(info.value) and "--from-run: 7:" in str(info.value)


def test_a_truncated_epochs_record_lists_without_epochs_and_is_refused_in_one_line(promoted, tmp_path: Path,
                                                                                   capsys) -> None:
    storage, run, _ = promoted
    copy_db = tmp_path / "cut.db"
    shutil.copyfile(storage.removeprefix("sqlite:///"), copy_db)
    cut = f"sqlite:///{copy_db}"
    from sqlalchemy import create_engine, text

    with create_engine(cut).begin() as connection:
        connection.execute(text("UPDATE tianfeng_promoted_runs SET epochs_json = '[{\"epoch\": 1, \"pha' WHERE id = :i"),
                           {"i": run})
    listed = RunStore(cut).runs()  # every run still lists
    assert [r["epochs"] for r in listed if r["id"] == run] == [[]]
    assert main(["calibrate", "--from-run", str(run), "--storage", cut]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"run {run}: epochs: JSONDecodeError" in err, err


def test_profile_none_makes_a_new_profile_from_the_run_alone(promoted, tmp_path: Path, capsys) -> None:
    storage, run, _ = promoted
    out = tmp_path / "fresh.json"
    assert main(["calibrate", "--from-run", str(run), "--storage", storage, "--profile", "none", "-o", str(out)]) == 0
    assert json.loads(out.read_text())["kind"] == "tianfeng-throughput"
