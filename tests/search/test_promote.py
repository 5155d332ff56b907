"""Promotion end to end on a real small study: dry run, a real run, resuming on re-promotion."""

from __future__ import annotations

import copy
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from tests.search.conftest import TINY_SPACE, write_space
from tests.search.test_study import spec_for
from tianfeng.core.errors import ConfigError
from tianfeng.hpo.running.runner import run_search
from tianfeng.hpo.space.materialize import build_config
from tianfeng.hpo.space.read import load_space
from tianfeng.promotion.options import PromoteOptions
from tianfeng.promotion.run import promote
from tianfeng.promotion.transfer import transfer
from tianfeng.storage.runs import RunStore


@pytest.fixture(scope="module")
def _searched_once(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("promote-study")
    spec = spec_for(root, write_space(root, copy.deepcopy(TINY_SPACE)), trials=3, study="p")
    run_search(spec, workers=1, resume=False)
    return spec, root / "study.db"


@pytest.fixture
def finished_study(_searched_once, tmp_path: Path):
    """A finished 3-trial study of the tiny space: searched once for the module, each test
    promoting from its own copy of the database."""
    spec, db = _searched_once
    shutil.copyfile(db, tmp_path / "study.db")
    return spec.changed(storage=f"sqlite:///{tmp_path / 'study.db'}")


def test_transfer_rules_are_explicit(tmp_path: Path, tiny_space: dict) -> None:
    # a target budget unlike the base's (3 epochs) and the proxy's (2): kept and stretched differ
    tiny_space["fidelities"]["target"] = {"epochs": 6}
    space = load_space(write_space(tmp_path, tiny_space))
    values = {"optimizer": "sgd", "base_lr": 0.4, "warmup_epochs": 1.0, "batch_size": 64, "momentum": 0.9}
    full, changes = transfer(space, values, "proxy", batch_size=256, overrides=["optimizer.nesterov=true"])
    by_key = {c.key: c for c in changes}
    assert full.phases[0].batch_size == 256 and full.total_epochs == 6
    assert by_key["phases.0.epochs"].proxy == 2 and by_key["phases.0.epochs"].full == 6
    warmup = by_key["schedule.warmup_epochs"]  # 1 of the base's 3 epochs: a third of every run
    assert warmup.proxy == pytest.approx(2 / 3) and warmup.full == pytest.approx(2.0)
    assert "stretched" in warmup.rule and "x3: 2 -> 6 epochs" in warmup.rule
    assert by_key["model.width"].rule == "the full model width"
    assert by_key["optimizer.nesterov"].rule == "--set override"
    lr = by_key["phase 0 peak LR (computed)"]
    assert lr.proxy == pytest.approx(0.4 * 64 / 256) and lr.full == pytest.approx(0.4)  # linear: 64 -> 256
    assert "batch 64 -> 256" in lr.rule


def test_a_transfer_builds_the_target_config_once(tmp_path: Path, tiny_space: dict,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # the proxy's micro-batch count is the target's: it reuses the target config, not a rebuild;
    # and a promotion with no batch, override, name or folder to change keeps that config as it is
    import tianfeng.core.run_config as run_config
    import tianfeng.hpo.space.materialize as materialize

    space = load_space(write_space(tmp_path, tiny_space))
    assert space.cluster.device_memory_gib is not None  # the memory check runs, and reads the target
    built: list[str] = []

    def counted(raw: dict, source: str = "") -> object:
        built.append(source)
        return run_config_from_dict(raw, source)

    run_config_from_dict = run_config.config_from_dict
    monkeypatch.setattr(materialize, "config_from_dict", counted)
    monkeypatch.setattr(run_config, "config_from_dict", counted)
    values = {"optimizer": "sgd", "base_lr": 0.4, "warmup_epochs": 1.0, "batch_size": 64, "momentum": 0.9}
    full, _ = transfer(space, values, "proxy")
    assert [s.rsplit("[", 1)[-1] for s in built] == ["target]", "proxy]"], built
    assert full == build_config(space, values, "target")


def test_every_phase_shows_its_own_peak_lr(tmp_path: Path, tiny_space: dict) -> None:
    tiny_space["phases"] = {"stages": 2, "start_resolution": 8, "end_resolution": 12, "batch_size": "batch_size",
                            "scale_batch_with_resolution": True}
    space = load_space(write_space(tmp_path, tiny_space))
    values = {"optimizer": "sgd", "base_lr": 0.4, "warmup_epochs": 0.0, "batch_size": 64, "momentum": 0.9}
    full, changes = transfer(space, values, "proxy", batch_size=256)
    proxy = build_config(space, values, "proxy")
    rows = {c.key: c for c in changes if "peak LR" in c.key}
    assert set(rows) == {"phase 0 peak LR (computed)", "phase 1 peak LR (computed)"}
    # --batch-size names the last phase's batch; the earlier phase keeps its share of it
    assert full.phases[-1].batch_size == 256
    assert full.phases[0].batch_size == round(proxy.phases[0].batch_size * 256 / proxy.phases[-1].batch_size)
    assert full.phases[0].batch_size != full.phases[1].batch_size
    for i, (small, big) in enumerate(zip(proxy.phases, full.phases, strict=True)):
        row = rows[f"phase {i} peak LR (computed)"]  # each follows its own phase's batch, not the last one's
        assert row.proxy == pytest.approx(0.4 * small.batch_size / 256, abs=1e-6)
        assert row.full == pytest.approx(0.4 * big.batch_size / 256)
        assert f"batch {small.batch_size} -> {big.batch_size}" in row.rule


def test_promote_dry_run_then_real_run_then_resume(finished_study, tmp_path: Path) -> None:
    spec = finished_study
    runs_dir = tmp_path / "promoted"
    dry = promote(PromoteOptions(storage=spec.options.storage, study='p', runs_dir=runs_dir, dry_run=True), 0)
    assert dry["config"]["model"]["width"] == 8 and not Path(dry["run_dir"]).exists()
    assert RunStore(spec.options.storage).runs() == []

    first = promote(PromoteOptions(storage=spec.options.storage, study='p', runs_dir=runs_dir, dry_run=False), 0)
    assert first["status"] == "completed" and first["resumed"] is False
    rows = RunStore(spec.options.storage).runs("p")
    assert len(rows) == 1 and rows[0]["status"] == "completed" and len(rows[0]["epochs"]) == 3
    assert rows[0]["final_score"] == first["full_val_top1"] and rows[0]["proxy_score"] is not None
    assert Path(rows[0]["checkpoint"]).exists()

    again = promote(PromoteOptions(storage=spec.options.storage, study='p', runs_dir=runs_dir, dry_run=False), 0)
    assert again["resumed"] is True and again["run"] == first["run"]
    assert again["full_val_top1"] == first["full_val_top1"]  # resumed the finished run, no retraining
    assert len(RunStore(spec.options.storage).runs("p")) == 1


def test_promote_rejects_unknown_and_pruned_trials(finished_study, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such trial"):
        promote(PromoteOptions(storage=finished_study.options.storage, study='p', runs_dir=tmp_path, dry_run=True), 99)
    with pytest.raises(ConfigError, match="no such study"):
        promote(PromoteOptions(storage=finished_study.options.storage, study='nope', runs_dir=tmp_path, dry_run=True), 0)


def test_cli_promote_and_runs(finished_study, tmp_path: Path) -> None:
    base = [sys.executable, "-m", "tianfeng.cli"]
    out = subprocess.run([*base, "promote", "1", "--study", "p", "--storage", finished_study.options.storage,
                          "--runs-dir", str(tmp_path / "r"), "--json"], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["status"] == "completed" and "proxy -> full transfer" in out.stderr
    assert (tmp_path / result["report"]).exists()  # the study's report is rewritten after promote
    again = subprocess.run([*base, "promote", "1", "--study", "p", "--storage", finished_study.options.storage,
                            "--runs-dir", str(tmp_path / "r")], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert again.stdout.startswith("trial 1 of p completed: val_top1 ") and "reused from an earlier promotion" in again.stdout
    listed = subprocess.run([*base, "runs", "--storage", finished_study.options.storage, "--json"],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    rows = json.loads(listed.stdout)
    assert [r["trial_number"] for r in rows] == [1]
    bad = subprocess.run([*base, "promote", "42", "--study", "p", "--storage", finished_study.options.storage],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "no such trial" in bad.stderr


def test_calibrate_reuses_promoted_runs_and_ranks_like_with_like(tmp_path: Path, tiny_space: dict,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import optuna
    from scipy.stats import spearmanr

    from tianfeng.promotion import run as promote_run
    from tianfeng.promotion.calibration import calibrate

    tiny_space["objective"]["at"] = "best"  # the proxy score is a trial's best epoch: so must the full one be
    spec = spec_for(tmp_path, write_space(tmp_path, tiny_space), trials=5, study="cal")
    run_search(spec, workers=1, resume=False)
    best = optuna.load_study(study_name="cal", storage=spec.options.storage).best_trial.number
    first = promote(PromoteOptions(storage=spec.options.storage, study='cal', runs_dir=tmp_path / 'p', dry_run=False), best)
    trained = []
    real_train = promote_run.train
    monkeypatch.setattr(promote_run, "train", lambda cfg, cb: trained.append(cfg.name) or real_train(cfg, cb))
    result = calibrate(spec.options.storage, "cal", top_k=2, n_random=2, seed=0, runs_dir=tmp_path / "cal")
    assert len(result["pairs"]) == 4 and len(trained) == 3  # the promoted best trial was not trained again
    rows = {r["trial_number"]: r for r in RunStore(spec.options.storage).runs("cal")}
    assert len(rows) == 4 and rows[best]["run_dir"] == first["run_dir"] and rows[best]["kind"] == "promote"
    for r in rows.values():  # full scores by the same statistic as the proxy scores: the best epoch
        assert r["final_score"] == max(e["val_top1"] for e in r["epochs"])
    pairs = result["pairs"]
    expected = spearmanr([p["proxy"] for p in pairs], [p["full"] for p in pairs]).statistic
    assert result["spearman_rho"] == pytest.approx(expected) and result["pairs_used"] == 4
    stored = optuna.load_study(study_name="cal", storage=spec.options.storage).user_attrs["calibration"]
    assert stored["spearman_rho"] == result["spearman_rho"]
    # a second calibration finds every run done: zero epochs trained
    trained.clear()
    again = calibrate(spec.options.storage, "cal", top_k=2, n_random=2, seed=0, runs_dir=tmp_path / "cal")
    assert trained == [] and again["spearman_rho"] == result["spearman_rho"]
    assert {len(r["epochs"]) for r in RunStore(spec.options.storage).runs("cal")} == {3}  # no epoch added twice


def test_rho_needs_three_usable_pairs(tmp_path: Path, tiny_space_file: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture) -> None:
    from tianfeng.cli import main
    from tianfeng.promotion import calibration

    monkeypatch.chdir(tmp_path)  # calibrate rewrites the report in reports/
    spec = spec_for(tmp_path, tiny_space_file, trials=4, study="few")
    run_search(spec, workers=1, resume=False)
    scores = iter([70.0, None, None])  # two of three full runs without a score (diverged or failed)
    monkeypatch.setattr(calibration, "promote", lambda *a, **k: {"status": "diverged",
                                                                         "full_val_top1": next(scores)})
    code = main(["calibrate", "--study", "few", "--storage", spec.options.storage, "--top-k", "3", "--random", "0",
                 "--runs-dir", str(tmp_path / "c")])
    err = capsys.readouterr().err
    assert code == 1 and "1 of 3 promoted runs gave a usable score" in err and "not computed" in err


@pytest.mark.slow
def test_promote_through_a_launch_plan(finished_study, tmp_path: Path) -> None:
    """--nodes 2 --gpus-per-node 1: the launch plan is written; on CPU it runs here as two emulated nodes
    (torchrun + gloo) and the run is collected into the store; for GPUs it is left planned."""
    from tianfeng.promotion.run import Launch

    spec = finished_study
    runs_dir = tmp_path / "promoted"
    dry = promote(PromoteOptions(storage=spec.options.storage, study='p', runs_dir=runs_dir, dry_run=True), 0, launch=Launch(nodes=2, per_node=1, device='cuda'))
    launch_dir = Path(dry["launch"])
    assert sorted(p.name for p in launch_dir.iterdir()) == ["config.yaml", "node-0.sh", "node-1.sh", "ray-entry.sh",
                                                          "ray-job.sh", "sbatch.sh"]
    assert "--nnodes=2" in (launch_dir / "node-0.sh").read_text()
    assert "#SBATCH --gpus-per-node=1" in (launch_dir / "sbatch.sh").read_text()

    planned = promote(PromoteOptions(storage=spec.options.storage, study='p', runs_dir=runs_dir, dry_run=False), 0, launch=Launch(nodes=2, per_node=1, device='cuda'))
    assert planned["status"] == "planned" and RunStore(spec.options.storage).runs("p")[0]["status"] == "planned"

    ran = promote(PromoteOptions(storage=spec.options.storage, study='p', runs_dir=runs_dir, dry_run=False), 0, launch=Launch(nodes=2, per_node=1, device='cpu'))
    assert ran["status"] == "completed", ran
    row = next(r for r in RunStore(spec.options.storage).runs("p") if r["id"] == ran["run"])
    assert row["status"] == "completed" and len(row["epochs"]) == 3 and row["final_score"] == ran["full_val_top1"]
    assert ran["run"] == planned["run"] and ran["run_dir"].endswith("-2x1")
    single = promote(PromoteOptions(storage=spec.options.storage, study='p', runs_dir=runs_dir, dry_run=False), 0)
    assert single["run_dir"] != ran["run_dir"]  # one process is another run than 2 nodes x 1

    # the report sets the measured scaling beside the cost model's prediction
    from tianfeng.reporting.build import build_report
    from tianfeng.reporting.measured_scaling import scaling_rows

    rows = scaling_rows(RunStore(spec.options.storage).runs("p"))
    assert len(rows) == 1 and rows[0]["layout"] == "2 x 1" and rows[0]["variant"] == "flat"
    row = rows[0]
    # measured: the median images/s of each run's epochs after the first (warm-up), from the runs
    # as recorded; efficiency is the 2-rank rate against twice the single process's
    two, one = (next(r for r in RunStore(spec.options.storage).runs("p") if r["id"] == i) for i in (ran["run"], single["run"]))
    assert row["measured"] == pytest.approx(statistics.median(e["samples_per_s"] for e in two["epochs"][1:]))
    assert row["single"] == pytest.approx(statistics.median(e["samples_per_s"] for e in one["epochs"][1:]))
    assert row["efficiency"] == pytest.approx(row["measured"] / (2 * row["single"]))
    # predicted: the cost model's efficiency scales the single rate to both ranks
    assert row["predicted_samples"] == pytest.approx(row["predicted"] * 2 * row["single"])
    assert 0 < row["predicted"] <= 1
    html = build_report(spec.options.storage, "p", tmp_path / "p.html").read_text()
    assert "Scaling of distributed runs" in html and "2 x 1" in html
    result = json.loads((Path(ran["run_dir"]) / "result.json").read_text())
    assert result["final"]["val_top1"] == ran["full_val_top1"]


def test_promote_plan_must_fit_the_world(finished_study, tmp_path: Path) -> None:
    from tianfeng.promotion.run import Launch

    with pytest.raises(ConfigError, match=r"must be divisible by nodes x GPUs \(3 x 1 = 3\)"):
        promote(PromoteOptions(storage=finished_study.options.storage, study='p', runs_dir=tmp_path, dry_run=True), 0, launch=Launch(nodes=3, per_node=1))


def test_runs_set_each_promoted_runs_measured_time_beside_its_trials_prediction(finished_study, tmp_path: Path) -> None:
    """Bug: the engine's per-epoch times not recorded, or `runs` comparing a run with another
    trial's prediction."""
    import optuna

    from tianfeng import api

    study = optuna.load_study(study_name="p", storage=finished_study.options.storage)
    ran = promote(PromoteOptions(storage=finished_study.options.storage, study='p', runs_dir=tmp_path, dry_run=False), 1)
    row = next(r for r in api.runs("p", storage=finished_study.options.storage) if r["id"] == ran["run"])
    check = row["time_check"]
    predicted = study.trials[1].user_attrs["predicted"]
    assert check["epochs"] == check["of_epochs"] == len(row["epochs"]) and check["cluster"] == predicted["cluster"]
    parts = check["parts"]
    assert parts["evaluation"]["predicted_s"] == pytest.approx(predicted["parts"]["evaluation"])
    from tianfeng.promotion.measured import TRAINING_PARTS

    assert parts["training"]["predicted_s"] == pytest.approx(sum(predicted["parts"][p] for p in TRAINING_PARTS))
    others = {round(sum(t.user_attrs["predicted"]["parts"][p] for p in TRAINING_PARTS), 9) for t in study.trials
              if t.number != 1}
    assert round(parts["training"]["predicted_s"], 9) not in others  # its own trial's, no other's
    assert parts["training"]["measured_s"] > 0 and parts["startup"]["measured_s"] > 0
    assert parts["training"]["measured_s"] < sum(e["elapsed_s"] for e in row["epochs"][-1:]) + 1e-9


def test_an_elastic_promotion_writes_a_range_of_nodes_and_restarts(finished_study, tmp_path: Path) -> None:
    """Bug: --min-nodes lost between promote and its launch plan, or the run's batch not checked
    at the smaller node counts it may run at."""
    from tianfeng.promotion.run import Launch

    dry = promote(PromoteOptions(storage=finished_study.options.storage, study='p', runs_dir=tmp_path, dry_run=True), 0, launch=Launch(nodes=2, per_node=1, device='cuda', min_nodes=1))
    node = (Path(dry["launch"]) / "node-0.sh").read_text()
    assert "--nnodes=1:2" in node and "--max-restarts=3" in node
    assert "#SBATCH --nodes=1-2" in (Path(dry["launch"]) / "sbatch.sh").read_text()
    with pytest.raises(ConfigError, match=r"\(3 x 1 = 3\) at 3 of the elastic launch's up to 4 nodes"):
        promote(PromoteOptions(storage=finished_study.options.storage, study='p', runs_dir=tmp_path, dry_run=True), 0, launch=Launch(nodes=4, per_node=1, min_nodes=2))


def test_a_study_made_before_complete_priors_still_promotes(tmp_path: Path, tiny_space: dict) -> None:
    """Its stored space is re-read as it ran: a prior may leave parameters out, no min_steps."""
    import optuna
    import yaml

    from tianfeng.hpo.space.stored import store_space_text

    spec = spec_for(tmp_path, write_space(tmp_path, tiny_space), trials=1, study="old")
    run_search(spec, workers=1, resume=False)
    study = optuna.load_study(study_name="old", storage=spec.options.storage)
    old = dict(tiny_space, priors=[{"name": "goyal", "params": {"optimizer": "sgd", "base_lr": 0.4, "batch_size": 128}}])
    del old["min_steps"]
    store_space_text(study, yaml.safe_dump(old))
    study.set_user_attr("space_format", 1)
    out = promote(PromoteOptions(storage=spec.options.storage, study='old', runs_dir=tmp_path / 'p', dry_run=True), 0)
    assert out["dry_run"] and out["trial"] == 0
    study.set_user_attr("space_format", 2)  # the same space in a new study is refused
    with pytest.raises(ConfigError, match="sets no value for 'warmup_epochs'"):
        promote(PromoteOptions(storage=spec.options.storage, study='old', runs_dir=tmp_path / 'p', dry_run=True), 0)


@pytest.mark.slow
def test_a_killed_promotion_is_listed_as_interrupted_and_resumes(finished_study, tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    """A real `tianfeng promote` process: while it trains, a second promotion of the same run is
    refused (its run directory is locked) and `tianfeng runs` says running; after SIGKILL, which
    the process cannot answer, the record still says running but the listing says interrupted,
    and promoting again continues from the checkpoint."""
    import os
    import signal
    import time

    base = [sys.executable, "-m", "tianfeng.cli"]
    storage = finished_study.options.storage
    promote_args = [*base, "promote", "0", "--study", "p", "--storage", storage, "--runs-dir", str(tmp_path / "r"),
                    "--set", "phases.0.epochs=120"]
    first = subprocess.Popen(promote_args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 180
        while not any(len(r["epochs"]) >= 2 for r in RunStore(storage).runs("p")):
            assert first.poll() is None and time.monotonic() < deadline, "the promotion ended before two epochs"
            time.sleep(0.2)
        listed = subprocess.run([*base, "runs", "--storage", storage, "--json"], capture_output=True, text=True,
                                timeout=120, cwd=tmp_path)
        assert [r["status"] for r in json.loads(listed.stdout)] == ["running"]
        second = subprocess.run(promote_args, capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert second.returncode == 2 and second.stderr.count("\n") == 1, second.stderr
        assert "is being trained by another process" in second.stderr
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
    record = RunStore(storage).runs("p")[0]
    assert record["status"] == "running"  # nothing could say otherwise: the process was killed
    done = len(record["epochs"])
    listed = subprocess.run([*base, "runs", "--storage", storage, "--json"], capture_output=True, text=True,
                            timeout=120, cwd=tmp_path)
    assert [r["status"] for r in json.loads(listed.stdout)] == ["interrupted"]

    with caplog.at_level("INFO", logger="tianfeng.engine"):
        resumed = promote(PromoteOptions(storage=storage, study='p', overrides=tuple(['phases.0.epochs=120']), runs_dir=tmp_path / 'r', dry_run=False), 0)
    # the checkpoint of an epoch is written before its record: the kill may fall in between
    at = [int(m.split(" at epoch ")[1].split(",")[0]) for m in caplog.messages if m.startswith("resumed from ")]
    assert len(at) == 1 and done + 1 <= at[0] <= done + 2, caplog.messages
    assert resumed["resumed"] is True and resumed["status"] == "completed"
    record = RunStore(storage).runs("p")[0]
    assert record["status"] == "completed" and len(record["epochs"]) == 120 and done >= 2
