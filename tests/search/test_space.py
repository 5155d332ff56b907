"""Space files: malformed ones fail at load with file, key path and what is allowed."""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path

import pytest

from tests.search.conftest import TINY_SPACE, write_space
from tianfeng.core.errors import ConfigError
from tianfeng.hpo.space.expressions import Expression, ExpressionError
from tianfeng.hpo.space.materialize import build_config, build_phases, is_active, split_epochs
from tianfeng.hpo.space.read import load_space

REPO = Path(__file__).resolve().parents[2]


def mutate(path: str, value) -> dict:
    space = copy.deepcopy(TINY_SPACE)
    *parents, last = path.split("/")
    node = space
    for p in parents:
        node = node[p]
    if value is DELETE:
        del node[last]
    else:
        node[last] = value
    return space


DELETE = object()

MALFORMED = [
    ("parameters/base_lr/type", "number", "parameters.base_lr.type", "must be one of float, int, categorical, fixed"),
    ("parameters/base_lr/low", DELETE, "parameters.base_lr.low", "is required"),
    ("parameters/base_lr/high", 0.01, "parameters.base_lr.high", "must be > low"),
    ("parameters/base_lr/low", -1.0, "parameters.base_lr.low", "must be > 0 when log is true"),
    ("parameters/base_lr/log", "yes", "parameters.base_lr.log", "must be true or false"),
    ("parameters/base_lr/spread", 2, "parameters.base_lr.spread", "unknown key; allowed: type, low, high, log, step, when"),
    ("parameters/warmup_epochs/step", -0.5, "parameters.warmup_epochs.step", "must be > 0"),
    ("parameters/batch_size/choices", [], "parameters.batch_size.choices", "must be a non-empty list"),
    ("parameters/batch_size/choices", [64, 64], "parameters.batch_size.choices", "must not repeat a value"),
    ("parameters/momentum/value", DELETE, "parameters.momentum.value", "is required for a fixed parameter"),
    ("parameters/trust_coefficient/when", "optimiser == 'lars'", "parameters.trust_coefficient.when", "unknown name 'optimiser'"),
    ("parameters/trust_coefficient/when", "__import__('os')", "parameters.trust_coefficient.when", "is not allowed"),
    ("parameters", {}, "parameters", "must map at least one parameter"),
    ("set/optimizer.learning_rate", "base_lr", "set.optimizer.learning_rate", "is not a run config key"),
    ("set/optimizer.lr", "base_lr * scale", "set.optimizer.lr", "unknown name 'scale'"),
    ("set/optimizer.lr", "base_lr.real", "set.optimizer.lr", "is not allowed"),
    ("phases/batch_size", DELETE, "phases.batch_size", "is required"),
    ("phases/stride", 2, "phases.stride", "unknown key; allowed: epochs, stages"),
    ("fidelities", {"proxy": {"epochs": 1}}, "fidelities", "include `target`"),
    ("fidelities/proxy/epochs", 0, "fidelities.proxy.epochs", "must be >= 1"),
    ("fidelities/proxy/precision", "fp8", "fidelities.proxy.precision", "must be one of auto, fp32, bf16, fp16"),
    ("fidelities/proxy/data_fraction", 1.5, "fidelities.proxy.data_fraction", "must be > 0 and <= 1"),
    ("search_fidelity", "cheap", "search_fidelity", "must be one of proxy, target"),
    ("objective/metric", "accuracy", "objective.metric", "must be one of resolution, batch_size, lr, train_loss, val_loss, val_top1"),
    ("objective/direction", "up", "objective.direction", "must be one of maximize, minimize"),
    ("objective/constraints", ["speed > 10"], "objective.constraints.0", "unknown metric 'speed'"),
    ("priors", [{"name": "x", "params": {"base_lr": 99.0}}], "priors.0.params.base_lr", "outside the parameter's range [0.05, 5]"),
    ("priors", [{"name": "x", "params": {"lr": 0.1}}], "priors.0.params.lr", "is not a parameter"),
    ("priors", [{"name": "x", "params": {"optimizer": "lars", "base_lr": 0.1, "batch_size": 64, "warmup_epochs": 0.0}}],
     "priors.0.params", "sets no value for 'trust_coefficient', which it makes active"),
    ("base/optimizer/name", "adam", "base.optimizer.name", "must be one of sgd, lars, lamb"),
    ("set/optimizer.name", "lars", "set.optimizer.name", "unknown name 'lars'"),
    ("bogus", 1, "bogus", "unknown key; allowed: name, description, base"),
]


@pytest.mark.parametrize(("where", "value", "key", "expected"), MALFORMED)
def test_malformed_space(tmp_path: Path, where: str, value, key: str, expected: str) -> None:
    path = write_space(tmp_path, mutate(where, value))
    with pytest.raises(ConfigError) as info:
        load_space(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: {key}: "), message
    assert expected in message, message


def test_not_yaml(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("parameters: [unclosed\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: line \d+: not valid YAML"):
        load_space(path)


def test_shipped_spaces_load() -> None:
    space = load_space(REPO / "search_spaces" / "large_batch.yaml")
    assert space.search_fidelity == "lowres_half" and len(space.priors) == 3


def test_conditional_parameter_only_when_condition_holds(tiny_space_file: Path) -> None:
    space = load_space(tiny_space_file)
    tc = next(p for p in space.parameters if p.name == "trust_coefficient")
    assert is_active(tc, {"optimizer": "lars"}) and not is_active(tc, {"optimizer": "sgd"})


def test_derived_values_and_fidelity_applied(tiny_space_file: Path) -> None:
    space = load_space(tiny_space_file)
    values = {"optimizer": "lars", "base_lr": 2.0, "trust_coefficient": 0.02, "warmup_epochs": 1.0,
              "batch_size": 64, "momentum": 0.9}
    proxy = build_config(space, values, "proxy")
    assert proxy.optimizer.name == "lars" and proxy.optimizer.lars.trust_coefficient == 0.02
    assert proxy.phases[0].batch_size == 64
    assert proxy.total_epochs == 2 and proxy.model.width == 4  # the proxy rung shrank the run
    assert proxy.schedule.warmup_epochs == pytest.approx(1.0 * 2 / 3)  # warm-up compressed too
    target = build_config(space, values, "target")
    assert target.total_epochs == 3 and target.model.width == 8
    sgd = build_config(space, {**values, "optimizer": "sgd"} | {"trust_coefficient": None} and
                       {k: v for k, v in values.items() if k != "trust_coefficient"} | {"optimizer": "sgd"}, "proxy")
    assert sgd.optimizer.lars.trust_coefficient == 0.001  # inactive: the base value stays


def test_phase_template_progressive_resizing() -> None:
    from tianfeng.hpo.space.read import PhasesTemplate

    t = PhasesTemplate(stages=Expression("3"), start_resolution=Expression("16"),
                       end_resolution=Expression("32"), batch_size=Expression("256"),
                       final_stage_fraction=Expression("0.2"),
                       scale_batch_with_resolution=Expression("True"))
    phases = build_phases(t, {}, total_epochs=10)
    assert [p["resolution"] for p in phases] == [16, 24, 32]
    assert [p["batch_size"] for p in phases] == [1024, 456, 256]
    assert sum(p["epochs"] for p in phases) == 10 and phases[-1]["epochs"] == 2


def test_split_epochs_keeps_totals_and_minimum() -> None:
    assert split_epochs(10, [1, 1, 1]) == [4, 3, 3]
    assert split_epochs(3, [10, 1, 1]) == [1, 1, 1]
    assert sum(split_epochs(17, [0.4, 0.4, 0.2])) == 17


@pytest.mark.parametrize("text", ["open('x')", "a.b", "a[0]", "lambda: 1", "[x for x in y]", "{'a': 1}",
                                  "x := 1", "f'{x}'"])
def test_expressions_reject_everything_but_arithmetic(text: str) -> None:
    with pytest.raises(ExpressionError):
        Expression(text)


def test_expressions_evaluate_and_short_circuit() -> None:
    assert Expression("base_lr * batch_size / 256").evaluate({"base_lr": 0.1, "batch_size": 1024}) == pytest.approx(0.4)
    assert Expression("x if s > 1 else 16").evaluate({"s": 1}) == 16  # x is never read
    assert Expression("max(8, round(sqrt(y)))").evaluate({"y": 100}) == 10
    with pytest.raises(ExpressionError, match="too large"):
        Expression("10 ** 10 ** 10").evaluate({})


@pytest.mark.parametrize("text", [
    "((10**64)**64)**64", "2**62 * 2**62 * 2**62", "9**9**9", "(2**63)**(2**63)", "'a' * 10**9",
    "('ab' * 500) * 500", "'%0999999d' % 1", "10.0**400", "-" * 999 + "1", "not " * 240 + "1",
    "max(" * 60 + "1" + ")" * 60, "1" + "+1" * 499, "[1] * 10**9", "[0] + [0] * 2**40", "[[1, 2] * 9] * 9",
])
def test_hostile_expressions_stop_fast_in_little_memory(text: str) -> None:
    """Each either evaluates to something small or is refused, within a memory bound that only a
    runaway allocation would break (the unbounded language took minutes and gigabytes); a hang
    is the suite's timeout."""
    import tracemalloc

    tracemalloc.start()
    with contextlib.suppress(ExpressionError):
        Expression(text).evaluate({})
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 20 * 2**20, peak


def test_list_literals_evaluate_but_cannot_be_computed_with() -> None:
    assert Expression("[epochs / 3, epochs * 2 / 3]").evaluate({"epochs": 9}) == [3.0, 6.0]
    with pytest.raises(ExpressionError, match="lists are written out"):
        Expression("[1] * 3").evaluate({})


def test_and_or_return_the_deciding_operand_as_python_does() -> None:
    assert Expression("0 or 'x'").evaluate({}) == "x"
    assert Expression("a and b").evaluate({"a": 2, "b": 3}) == 3
    assert Expression("a or b").evaluate({"a": 0.5, "b": 3}) == 0.5
    assert Expression("a and b").evaluate({"a": 0}) == 0  # b is never read


def test_cli_names_match_the_registry() -> None:
    from tianfeng.defaults import PRUNER_NAMES, SAMPLER_NAMES
    from tianfeng.hpo.sampling.registry import PRUNERS, SAMPLERS

    assert set(SAMPLERS) == set(SAMPLER_NAMES) and set(PRUNERS) == set(PRUNER_NAMES)


def test_imagenet_space_checks_and_builds_its_rungs() -> None:
    space = load_space(REPO / "search_spaces" / "imagenet_resnet50.yaml")
    prior = next(p for p in space.priors if p.name == "google-mlperf-v1.0-32k")
    values = {**prior.params, "stages": 3, "start_resolution": 128, "end_resolution": 288}
    proxy = build_config(space, values, "proxy")
    target = build_config(space, values, "target")
    assert target.model.name == "resnet50" and target.total_epochs == 60
    assert [p.resolution for p in target.phases] == [128, 208, 288]
    assert [p.resolution for p in proxy.phases] == [64, 104, 144]
    assert proxy.data.fraction == pytest.approx(0.1) and proxy.precision.mode == "bf16"
    assert proxy.schedule.warmup_epochs == pytest.approx(18.0 * 5 / 60)
    assert target.data.min_crop_scale == 0.08
    assert len(space.priors) == 7  # of 10: the 64K, 64,480 and 86,016 batches do not fit 128 V100 16 GB
    # 256 per GPU at 224 px; at 288 px (288/224)^2 of the memory per image: what fits of it
    assert [p.batch_size for p in target.phases] == [128 * 189] * 3
    assert space.constants["max_per_gpu"] * 224**2 // 288**2 == 189


def test_min_steps_stretches_a_rung_that_leaves_too_few_steps(tmp_path: Path) -> None:
    space = mutate("min_steps", 50)
    space["parameters"]["batch_size"]["choices"] = [16, 512]
    space["fidelities"]["proxy"]["data_fraction"] = 0.5
    space["priors"] = []
    loaded = load_space(write_space(tmp_path, space))
    train = loaded.constants["all_train_images"]
    values = {"optimizer": "sgd", "base_lr": 0.1, "warmup_epochs": 0.0, "momentum": 0.9}
    small = build_config(loaded, {**values, "batch_size": 16}, "proxy")
    assert small.total_epochs == 2 and small.data.fraction == 0.5  # 2 x (train/2 // 16) steps: enough
    big = build_config(loaded, {**values, "batch_size": 512}, "proxy")
    target = build_config(loaded, {**values, "batch_size": 512}, "target")
    steps = big.total_epochs * (int(train * big.data.fraction) // 512)
    assert big.data.fraction == 1.0 and big.total_epochs > 2
    assert steps >= min(50, target.total_epochs * (train // 512)) and big.total_epochs <= target.total_epochs
    with pytest.raises(ConfigError, match="min_steps: must be an integer >= 0"):
        load_space(write_space(tmp_path, mutate("min_steps", -1)))


def test_a_rung_too_short_for_its_phases_and_identical_stages_merged(tmp_path: Path) -> None:
    three = mutate("phases/stages", 3)
    three["phases"]["end_resolution"] = 16  # 8, 12, 16 px: three phases
    with pytest.raises(ConfigError, match="fidelities.proxy: .*2 epochs cannot fill 3 phases"):
        load_space(write_space(tmp_path, three))
    same = mutate("phases/stages", 3)  # start = end: three stages at one resolution are one phase
    space = load_space(write_space(tmp_path, same))
    values = {"optimizer": "sgd", "base_lr": 0.1, "warmup_epochs": 0.0, "batch_size": 64, "momentum": 0.9}
    assert [(p.epochs, p.resolution) for p in build_config(space, values, "target").phases] == [(3, 8)]


def test_a_left_out_prior_is_said_once_per_command_not_once_per_worker(monkeypatch) -> None:
    """The search's worker processes inherit what the command has said: a prior left out is
    warned about by the command alone. A new command says it again."""
    import os
    import subprocess
    import sys

    from tianfeng.hpo.space import read

    monkeypatch.delenv(read.PRIORS_TOLD_ENV, raising=False)
    assert read._first_telling("space.yaml:goyal") and not read._first_telling("space.yaml:goyal")
    assert read._first_telling("space.yaml:mlperf")
    child = subprocess.run([sys.executable, "-c", "from tianfeng.hpo.space import read; "
                            "print(read._first_telling('space.yaml:goyal'), read._first_telling('space.yaml:new'))"],
                           capture_output=True, text=True, env=dict(os.environ), check=True)
    assert child.stdout.split() == ["False", "True"]
    from tianfeng.cli import main

    main(["spaces"])  # any command starts afresh
    assert "space.yaml:goyal" not in os.environ.get(read.PRIORS_TOLD_ENV, "")
