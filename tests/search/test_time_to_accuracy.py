"""Issue 14: the cluster section, predicted wall time per trial, pareto and time-to-target
objectives, peer pruning, promote --front / --fastest-to."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

from tests.search.conftest import write_space
from tianfeng.cli import main
from tianfeng.core.errors import ConfigError
from tianfeng.core.run_config import config_from_dict
from tianfeng.cost.cluster import ClusterSpec
from tianfeng.cost.step_time import DEVICES, reference_step_model
from tianfeng.cost.walltime import predict_wall_time
from tianfeng.hpo.judge.peers import PeerPruner, record_rung, rung_passed
from tianfeng.hpo.judge.scores import best_trial, pareto_front
from tianfeng.hpo.optuna_private import frozen_trial
from tianfeng.hpo.space.materialize import build_config
from tianfeng.hpo.space.read import load_space


def _run(model: dict, phases: list[dict], precision: str = "auto"):
    return config_from_dict({"model": model, "phases": phases, "precision": {"mode": precision},
                             "data": {"source": "digits"}}, "test")


RN50 = {"name": "resnet50"}


def test_reference_step_model_reproduces_the_cited_throughput() -> None:
    for device in DEVICES.values():
        model = reference_step_model(device.mixed_images_per_s, device.batch, device.half_batch)
        assert model.images_per_s(device.batch) == pytest.approx(device.mixed_images_per_s)
        # half the asymptotic peak at half_batch: the saturating curve the search weighs
        peak = 1 / model.image_s
        assert model.images_per_s(round(device.half_batch)) == pytest.approx(peak / 2, rel=0.02)
        # a GPU given 8 images runs at 8 / (8 + half_batch) of its peak: far from it
        assert model.images_per_s(8) == pytest.approx(peak * 8 / (8 + device.half_batch), rel=1e-9)
        assert model.images_per_s(8) < 0.5 * peak


def test_one_v100_runs_resnet50_at_the_cited_rate() -> None:
    """90 epochs of ImageNet at 256 images per step on one V100: steps x 256 / 1,200 img/s."""
    cfg = _run(RN50, [{"epochs": 90, "resolution": 224, "batch_size": 256}])
    w = predict_wall_time(cfg, ClusterSpec(gpus=1, gpus_per_node=1), train_images=1_281_167, val_images=0,
                          classes=1000)
    assert w.parts["compute"] == pytest.approx(90 * (1_281_167 // 256) * 256 / 1200, rel=1e-6)
    # one GPU: nothing to exchange; DALI on a DGX-1's 5 cores per GPU keeps up at 224 px
    assert w.parts["exchange"] == w.parts["data_wait"] == w.parts["sync_bn"] == 0
    assert w.parts["noise_scale"] > 0 and w.parts["startup"] > 0
    fp32 = predict_wall_time(_run(RN50, [{"epochs": 90, "resolution": 224, "batch_size": 256}], "fp32"),
                             ClusterSpec(gpus=1, gpus_per_node=1), train_images=1_281_167, val_images=0, classes=1000)
    assert fp32.parts["compute"] / w.parts["compute"] == pytest.approx(1200 / 367, rel=1e-6)


def test_predicted_time_follows_what_the_search_changes() -> None:
    # loader cores to spare: the GPU's own step sets the pace (a DGX-1's 5 cores per GPU would
    # not feed this small net: checked at the end)
    spec = ClusterSpec(gpus=128, gpus_per_node=8, cpu_cores_per_gpu=1000)
    small = {"name": "resnet_small", "width": 16}

    def seconds(epochs: int, resolution: int, batch: int) -> float:
        cfg = _run(small, [{"epochs": epochs, "resolution": resolution, "batch_size": batch}])
        return predict_wall_time(cfg, spec, train_images=25_000, val_images=5_000, classes=5,
                                 startup=False).seconds

    base = seconds(12, 32, 1024)
    assert seconds(24, 32, 1024) == pytest.approx(2 * base, rel=1e-6)  # epochs scale every phase
    assert seconds(12, 32, 4096) < base / 2.5  # 4x fewer steps; per-step overhead dominates
    assert seconds(12, 64, 1024) > base  # more pixels per image
    # progressive resizing: a low-resolution first stage costs less than the same epochs at full size
    two_stage = _run(small, [{"epochs": 6, "resolution": 16, "batch_size": 1024},
                             {"epochs": 6, "resolution": 64, "batch_size": 1024}])
    assert predict_wall_time(two_stage, spec, train_images=25_000, val_images=5_000, classes=5,
                             startup=False).seconds < seconds(12, 64, 1024)
    # start-up: one more warm-up per distinct shape, and more for more ranks
    one = _run(small, [{"epochs": 12, "resolution": 64, "batch_size": 1024}])
    start = {name: predict_wall_time(c, s, train_images=25_000, val_images=5_000, classes=5).parts["startup"]
             for name, c, s in (("one", one, spec), ("two", two_stage, spec),
                                ("more ranks", one, ClusterSpec(gpus=1024, gpus_per_node=8)))}
    assert start["two"] > start["one"] and start["more ranks"] > start["one"]
    fast = _run(small, [{"epochs": 12, "resolution": 32, "batch_size": 4096}])
    dgx1 = predict_wall_time(fast, ClusterSpec(gpus=128, gpus_per_node=8), train_images=25_000, val_images=5_000,
                             classes=5)
    assert dgx1.parts["data_wait"] > dgx1.parts["compute"] and "data-bound" in dgx1.notes[0]
    with pytest.raises(ConfigError, match="smaller than the cluster's 128 GPUs"):
        seconds(12, 32, 64)


def _space(tiny_space: dict, **changes) -> dict:
    space = {**tiny_space, **changes}
    return space


def test_bounds_tied_to_the_data_and_batches_snapped_to_the_gpus(tmp_path: Path, tiny_space: dict) -> None:
    space = _space(tiny_space, cluster={"gpus": 16, "gpus_per_node": 8})
    space["parameters"]["batch_size"] = {"type": "int", "low": 16, "high": "train_images / 4", "log": True}
    space["phases"] = {**space["phases"], "batch_size": "gpus * max(1, round(batch_size / gpus))",
                       "epochs": "epochs"}
    space["parameters"]["epochs"] = {"type": "int", "low": 2, "high": 6}
    space["fidelities"] = {"proxy": {"epoch_fraction": 0.5, "width_scale": 0.5}, "target": {}}
    loaded = load_space(write_space(tmp_path, space))
    batch = next(p for p in loaded.parameters if p.name == "batch_size")
    assert batch.high == loaded.constants["train_images"] // 4 and loaded.constants["gpus"] == 16
    values = {"optimizer": "sgd", "base_lr": 0.1, "warmup_epochs": 0.0, "batch_size": 100, "momentum": 0.9,
              "epochs": 6}
    target = build_config(loaded, values, "target")
    assert target.phases[0].batch_size == 96 and target.total_epochs == 6  # 100 snapped to 6 x 16
    assert build_config(loaded, values, "proxy").total_epochs == 3  # half of the trial's own epochs
    assert build_config(loaded, {**values, "epochs": 2}, "proxy").total_epochs == 1
    # unsnapped, the low corner (16) leaves GPUs of a 64-GPU cluster without an image: refused at load
    unsnapped = {**space, "phases": {**space["phases"], "batch_size": "batch_size"},
                 "cluster": {"gpus": 64, "gpus_per_node": 8}}
    with pytest.raises(ConfigError, match="16 is smaller than the cluster's 64 GPUs"):
        load_space(write_space(tmp_path, unsnapped))


@pytest.mark.parametrize(("cluster", "flags", "expected"), [
    ({"gpus": 0}, [], "cluster.gpus: must be an integer >= 1; got 0"),
    ({"gpus": 12, "gpus_per_node": 8}, [], "cluster.gpus: must be a multiple of gpus_per_node (8); got 12"),
    ({"device": "tpu"}, [], "cluster.device: must be one of v100, a100, p100, h100, measured; got 'tpu'"),
    ({"images_per_s": -5}, [], "cluster.images_per_s: must be a number > 0; got -5"),
    ({"overlap": 1.5}, [], "cluster.overlap: must be a number >= 0 and <= 1; got 1.5"),
    ({"exchange": "ring"}, [], "cluster.exchange: must be one of flat, hierarchical"),
    ({"gpu": 8}, [], "cluster.gpu: unknown key; allowed: gpus"),
    ({}, ["--gpus", "0"], "--gpus: must be an integer >= 1; got 0"),
    ({}, ["--gpus", "24", "--gpus-per-node", "16"], "--gpus: must be a multiple of gpus_per_node (16); got 24"),
    ({}, ["--objective", "time-to-target"], "--target: is required with --objective time-to-target"),
])
def test_bad_cluster_values_are_one_line_errors(tmp_path: Path, tiny_space: dict, capsys, cluster: dict,
                                                flags: list[str], expected: str) -> None:
    path = write_space(tmp_path, _space(tiny_space, cluster=cluster) if cluster else tiny_space)
    code = main(["search", "--space", str(path), "--storage", f"sqlite:///{tmp_path}/s.db",
                 "--runs-dir", str(tmp_path / "runs"), "--trials", "1", *flags])
    err = capsys.readouterr().err.strip()
    assert code == 2 and expected in err, err
    assert err.count("\n") == 0, err
    assert not (tmp_path / "runs").exists()


def test_pareto_search_front_and_fastest_to(tmp_path: Path, tiny_space: dict, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    tiny_space["parameters"]["batch_size"] = {"type": "categorical", "choices": [32, 64, 128, 256]}
    path = write_space(tmp_path, _space(tiny_space, cluster={"gpus": 8, "gpus_per_node": 8}))
    db = f"sqlite:///{tmp_path}/s.db"
    # no accuracy floor: the tiny proxies score ~10-20% on digits, below the default (20% for 10 classes)
    assert main(["search", "--space", str(path), "--storage", db, "--trials", "6", "--objective", "pareto",
                 "--sampler", "random", "--study", "p", "--min-accuracy", "0"]) == 0
    out = capsys.readouterr()
    assert "objective pareto" in out.out and "Pareto front of p" in out.out
    study = optuna.load_study(study_name="p", storage=db)
    assert len(study.directions) == 2
    done = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert done and all(len(t.values) == 2 and t.values[1] == t.user_attrs["predicted"]["seconds"] for t in done)
    assert all(t.values[0] == t.user_attrs["score"] for t in done)
    front = pareto_front(study)
    assert {t.number for t in front} == {t.number for t in study.best_trials}  # Optuna's own front agrees
    # the lowest level any front trial reaches: the fastest front trial is promoted
    level = min(t.values[0] for t in front)
    assert main(["promote", "--fastest-to", str(level), "--storage", db, "--study", "p", "--dry-run"]) == 0
    assert f"promote-trial-{front[0].number}-" in capsys.readouterr().err
    # a level only the most accurate front trial reaches
    top = max(front, key=lambda t: t.values[0])
    assert main(["promote", "--fastest-to", str(top.values[0]), "--storage", db, "--study", "p", "--dry-run"]) == 0
    assert f"promote-trial-{top.number}-" in capsys.readouterr().err
    assert main(["promote", "--fastest-to", "101", "--storage", db, "--study", "p"]) == 2
    assert "no complete trial of study p reaches val_top1 101" in capsys.readouterr().err
    assert main(["promote", "--front", "--storage", db, "--study", "p"]) == 0
    listed = capsys.readouterr().out
    assert all(f"│ {t.number} " in listed for t in front)
    assert main(["promote", "--front", "--storage", db, "--study", "p", "--json"]) == 0
    assert [r["trial"] for r in json.loads(capsys.readouterr().out)] == [t.number for t in front]
    # the search's summary for programs: the budget is spent, so resuming only summarises
    assert main(["search", "--space", str(path), "--storage", db, "--trials", "6", "--objective", "pareto",
                 "--study", "p", "--min-accuracy", "0", "--resume", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["trials"] == sum(summary["outcomes"].values()) == len(study.trials) == 6
    assert [r["trial"] for r in summary["front"]] == [t.number for t in front]
    assert summary["report"].endswith("p.html")
    assert main(["status", "--storage", db, "--study", "p", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    recorded = {t.number: t.user_attrs["predicted"]["seconds"] for t in done}
    shown = {r["trial"]: r["predicted_s"] for r in rows if r["state"] == "completed"}
    assert shown == pytest.approx(recorded) and len(shown) == len(recorded) > 0
    assert main(["report", "--study", "p", "--storage", db]) == 0
    html = (tmp_path / "reports" / "p.html").read_text()
    assert "Accuracy against predicted wall time on the cluster" in html and "predicted full run" in html
    # a pareto study is resumed as one
    assert main(["search", "--space", str(path), "--storage", db, "--trials", "7", "--study", "p", "--resume"]) == 2
    assert "was created with objective pareto" in capsys.readouterr().err


def test_time_to_target_prefers_the_fastest_trial_that_reaches_it(tmp_path: Path, tiny_space: dict, capsys,
                                                                  monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    tiny_space["parameters"]["batch_size"] = {"type": "categorical", "choices": [32, 64, 128, 256]}
    path = write_space(tmp_path, tiny_space)
    db = f"sqlite:///{tmp_path}/s.db"
    # a target every trial reaches (digits' top-1 is never 0): the choice is the fastest of them;
    # the choice among trials some of which miss the target is tested on studies built by hand
    assert main(["search", "--space", str(path), "--storage", db, "--trials", "6", "--objective", "time-to-target",
                 "--target", "0", "--sampler", "random", "--study", "t"]) == 0
    study = optuna.load_study(study_name="t", storage=db)
    done = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert len({t.values[0] for t in done}) > 1  # the batch sizes make the predicted times differ
    for t in done:
        assert t.values == [t.user_attrs["predicted"]["seconds"]]
        assert t.constraints["target"] == pytest.approx(0 - t.user_attrs["score"])
    best = best_trial(study)
    assert best.number == min(done, key=lambda t: t.values[0]).number
    assert f"fastest trial reaching the target: #{best.number}" in capsys.readouterr().out


def _trial(study: optuna.Study, seconds: float, rung_value: float | None, state=TrialState.COMPLETE):
    attrs = {"predicted": {"seconds": seconds, "gpu_hours": seconds / 450}, "score": rung_value or 0.0}
    if rung_value is not None:
        attrs["rung_values"] = {"0.333": rung_value}
    study.add_trial(create_trial(state=state, values=[rung_value or 0.0, seconds] if state == TrialState.COMPLETE
                                 else None, params={"x": 0.5}, distributions={"x": FloatDistribution(0, 1)},
                                 user_attrs=attrs))


def test_peer_pruner_compares_only_with_trials_as_fast_or_faster() -> None:
    study = optuna.create_study(directions=["maximize", "minimize"])
    for value in (50, 60, 70, 80):  # fast trials
        _trial(study, 10.0, value)
    for value in (90, 95, 96, 97):  # slow, accurate trials
        _trial(study, 100.0, value)
    pruner = PeerPruner(maximize=True, slack=1.25, min_peers=4)

    def judged(seconds: float, value: float) -> bool:
        trial = study.ask()
        trial.set_user_attr("predicted", {"seconds": seconds})
        record_rung(trial, "0.333", value)
        verdict = pruner.prune(study, frozen_trial(trial))
        study.tell(trial, state=TrialState.FAIL)
        assert trial.user_attrs["rung_values"] == {"0.333": value}  # recorded for later peers
        return verdict

    assert not judged(10.0, 66)  # above the median (65) of the four fast peers
    assert judged(10.0, 64)
    assert not judged(5.0, 1)  # faster than every trial: no peers, so nothing to lose to
    assert judged(100.0, 84)  # slow and less accurate than the median (85) of all eight
    assert not judged(100.0, 86)


def test_rungs_are_fractions_of_each_trials_own_run() -> None:
    assert [e for e in range(1, 7) if rung_passed(e, 6)] == [2, 4]
    assert [e for e in range(1, 4) if rung_passed(e, 3)] == [1, 2]
    assert [rung_passed(e, 30) for e in (10, 20, 30)] == ["0.333", "0.667", None]  # never after the last


def test_pareto_front_by_hand() -> None:
    study = optuna.create_study(directions=["maximize", "minimize"])
    study.set_user_attr("direction", "maximize")
    for seconds, value in ((10, 50), (20, 70), (15, 40), (30, 70), (40, 90)):
        _trial(study, seconds, value)
    assert [t.user_attrs["predicted"]["seconds"] for t in pareto_front(study)] == [10, 20, 40]


def test_calibrate_throughput_writes_a_fit_that_a_measured_cluster_predicts_with(tmp_path: Path, tiny_space: dict,
                                                                                  capsys) -> None:
    space_file = write_space(tmp_path, tiny_space)
    out = tmp_path / "tp.json"
    assert main(["calibrate", "--throughput", "--space", str(space_file), "--resolutions", "8,12",
                 "--batches", "8,32", "--output", str(out)]) == 0
    data = json.loads(out.read_text())
    assert sorted(data["fits"]) == ["12", "8"] and len(data["points"]) == 4
    assert all(f["fixed_s"] >= 0 and f["image_s"] > 0 for f in data["fits"].values())
    assert data["model"]["width"] == 8 and data["classes"] == 10
    # a measured cluster predicts with those fits: steps x (fixed + batch x per image), plus evaluation
    measured = {**tiny_space, "cluster": {"gpus": 1, "gpus_per_node": 1, "device": "measured",
                                          "throughput": str(out)}}
    space = load_space(write_space(tmp_path, measured, "measured.yaml"))
    cfg = build_config(space, {"optimizer": "sgd", "base_lr": 0.1, "warmup_epochs": 0.0, "batch_size": 64,
                               "momentum": 0.9}, "target")
    w = predict_wall_time(cfg, space.cluster, train_images=1000, val_images=0, classes=10,
                          in_channels=data["in_channels"])
    fit = data["fits"]["8"]
    assert w.parts["compute"] == pytest.approx(3 * (1000 // 64) * (fit["fixed_s"] + 64 * fit["image_s"]), rel=1e-9)


@pytest.mark.parametrize(("cluster", "expected"), [
    ({"device": "measured"}, "cluster.throughput: goes with device: measured"),
    ({"device": "v100", "throughput": "x.json"}, "cluster.throughput: goes with device: measured"),
    ({"device": "measured", "throughput": "missing.json"}, "cluster.throughput: cannot read missing.json"),
])
def test_bad_measured_clusters(tmp_path: Path, tiny_space: dict, cluster: dict, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_space(write_space(tmp_path, {**tiny_space, "cluster": cluster}))
    assert expected in str(info.value) and "\n" not in str(info.value)


@pytest.mark.slow
def test_calibrate_with_processes_fits_gloo_links_that_the_cost_model_uses(tmp_path: Path, tiny_space: dict) -> None:
    out = tmp_path / "tp2.json"
    assert main(["calibrate", "--throughput", "--space", str(write_space(tmp_path, tiny_space)), "--resolutions", "8",
                 "--batches", "8,32", "--processes", "2", "--output", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["processes"] == 2 and data["threads"] == 1
    links = data["links"]
    assert links["intra"]["gbit_s"] > 0 and links["intra"]["latency_us"] >= 0 and links["inter"] is None
    # gloo on one machine: emulated nodes share its loopback, so the measured tier is every link
    measured = {**tiny_space, "cluster": {"gpus": 2, "gpus_per_node": 1, "device": "measured", "throughput": str(out)}}
    cluster = load_space(write_space(tmp_path, measured, "m.yaml")).cluster.links()
    assert cluster.inter.gbit_s == pytest.approx(links["intra"]["gbit_s"]) and cluster.adapters_per_node == 1


def test_the_default_floor_is_never_chance_and_follows_the_classes() -> None:
    from tianfeng.hpo.judge.front import default_floor

    assert default_floor("val_top1", 5) == 40.0 and default_floor("val_top1", 10) == 20.0
    assert default_floor("val_top1", 1000) == pytest.approx(10.1) and default_floor("val_top1", 2) == 75.0
    assert default_floor("val_top5", 5) is None and default_floor("val_loss", 10) is None
    assert default_floor("val_top5", 100) == 15.0  # 5% chance + 10 points


def test_trials_below_the_accuracy_floor_are_infeasible_and_off_the_front(tmp_path: Path, tiny_space: dict,
                                                                          capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = write_space(tmp_path, _space(tiny_space, cluster={"gpus": 8, "gpus_per_node": 8}))
    db = f"sqlite:///{tmp_path}/s.db"
    assert main(["search", "--space", str(path), "--storage", db, "--trials", "5", "--objective", "pareto",
                 "--sampler", "random", "--study", "f", "--min-accuracy", "13"]) == 0
    out = capsys.readouterr()
    study = optuna.load_study(study_name="f", storage=db)
    assert study.user_attrs["min_accuracy"] == 13
    done = [t for t in study.trials if t.state == TrialState.COMPLETE]
    for t in done:  # Optuna's constraint: <= 0 feasible, the shortfall otherwise
        assert t.constraints["min_accuracy"] == pytest.approx(13 - t.values[0])
    assert "chance" not in study.user_attrs  # a floor the user gave is not raised with the best
    front = {t.number for t in pareto_front(study)}
    above = [t for t in done if t.values[0] >= 13]
    by_hand = {t.number for t in above if not any(o.values[0] >= t.values[0] and o.values[1] <= t.values[1]
                                                  and o.values != t.values for o in above)}
    assert front == by_hand and front
    assert "trials below 13 are off it" in " ".join(out.out.split())  # the title may wrap
    # a floor above every score: the front is empty, and the summary says why
    assert main(["search", "--space", str(path), "--storage", db, "--trials", "2", "--objective", "pareto",
                 "--sampler", "random", "--study", "g", "--min-accuracy", "99.99"]) == 0
    assert "no complete trial reaches the accuracy floor of 99.99" in capsys.readouterr().err
    assert pareto_front(optuna.load_study(study_name="g", storage=db)) == []


def test_the_default_floor_rises_with_the_best_and_keeps_near_chance_recipes_off_the_front(
        tmp_path: Path, tiny_space: dict, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = write_space(tmp_path, _space(tiny_space, cluster={"gpus": 8, "gpus_per_node": 8}))
    db = f"sqlite:///{tmp_path}/s.db"
    # seeded: five unseeded random recipes of this tiny space all ended near chance now and then,
    # leaving the front empty for a reason this test is not about
    assert main(["search", "--space", str(path), "--storage", db, "--trials", "5", "--objective", "pareto",
                 "--sampler", "random", "--study", "d", "--seed", "0"]) == 0
    study = optuna.load_study(study_name="d", storage=db)
    # digits has 10 classes: chance 10%, the default floor 20%, recorded for every worker
    assert study.user_attrs["chance"] == 10.0 and study.user_attrs["min_accuracy"] == 20.0
    done = [t for t in study.trials if t.state == TrialState.COMPLETE]
    halfway = 10.0 + (max(t.values[0] for t in done) - 10.0) / 2
    front = pareto_front(study)
    assert front and all(t.values[0] >= max(20.0, halfway) for t in front)
    assert f"trials below {max(20.0, halfway):.4g} are off it" in " ".join(capsys.readouterr().out.split())


def test_the_fastest_full_run_to_the_target_is_the_quickest_predicted_among_those_whose_full_run_reached_it() -> None:
    from tianfeng.hpo.results.summary import fastest_full_run_to_target

    study = optuna.create_study(direction="minimize")
    for key, value in {"objective_mode": "time-to-target", "target": 75.0, "direction": "maximize"}.items():
        study.set_user_attr(key, value)
    for seconds in (300.0, 100.0, 200.0, 50.0):
        study.add_trial(create_trial(value=seconds, params={"x": 0.5}, distributions={"x": FloatDistribution(0, 1)},
                                     user_attrs={"predicted": {"seconds": seconds}}))
    runs = [{"trial_number": 0, "final_score": 76.0}, {"trial_number": 1, "final_score": 74.9},  # 1 missed it
            {"trial_number": 2, "final_score": 75.0}, {"trial_number": 3, "final_score": None}]  # 3 did not complete
    assert fastest_full_run_to_target(study, runs).number == 2
    assert fastest_full_run_to_target(study, runs[:2]).number == 0
    assert fastest_full_run_to_target(study, runs[1:2]) is None
    study.set_user_attr("objective_mode", "accuracy")
    assert fastest_full_run_to_target(study, runs) is None
