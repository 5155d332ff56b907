"""The search's own decisions on studies built by hand, and their properties over many random
studies (hypothesis): the Pareto front and its floor, the peer rule in both directions,
time-to-target's choice and what the budget counts. Each test names the bug it is there for."""

from __future__ import annotations

import optuna
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

from tianfeng.defaults import ObjectiveMode
from tianfeng.hpo.judge.peers import PeerPruner, record_rung, rung_passed
from tianfeng.hpo.judge.scores import best_trial, front_floor, pareto_front
from tianfeng.hpo.optuna_private import frozen_trial
from tianfeng.hpo.running.budget import RETRIES, Budget, counted
from tianfeng.hpo.trial_attrs import TrialStatus

optuna.logging.set_verbosity(optuna.logging.WARNING)
PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _study(mode: ObjectiveMode = ObjectiveMode.PARETO, *, floor: float | None = None, chance: float | None = None,
           target: float | None = None, direction: str = "maximize") -> optuna.Study:
    directions = [direction, "minimize"] if mode == ObjectiveMode.PARETO else ["minimize"]
    study = optuna.create_study(directions=directions)
    study.set_user_attr("objective_mode", mode)
    study.set_user_attr("direction", direction)
    for key, value in (("min_accuracy", floor), ("chance", chance), ("target", target)):
        if value is not None:
            study.set_user_attr(key, value)
    return study


def _add(study: optuna.Study, score: float, seconds: float, *, constraints: tuple[float, ...] = (),
         state: TrialState = TrialState.COMPLETE, rung: float | None = None, status: str | None = None) -> None:
    attrs = {"predicted": {"seconds": seconds, "gpu_hours": seconds / 3600}, "score": score}
    if rung is not None:
        attrs["rung_values"] = {"0.333": rung, "0.667": rung}
    if status is not None:
        attrs["status"] = status
    if state != TrialState.COMPLETE:
        values = None
    elif len(study.directions) == 2:
        values = [score, seconds]
    else:
        values = [seconds]
    study.add_trial(create_trial(state=state, values=values, params={"x": 0.5},
                                 distributions={"x": FloatDistribution(0, 1)}, user_attrs=attrs,
                                 constraints={f"c{i}": c for i, c in enumerate(constraints)} or None))


def _seconds(trials) -> list[float]:
    return [t.user_attrs["predicted"]["seconds"] for t in trials]


# --- the front and its floor -----------------------------------------------------------------

def test_a_fast_trial_failing_a_constraint_is_off_the_front() -> None:
    """Bug: the constraint filter dropped. The infeasible trial is the fastest, so nothing
    dominates it: only the filter keeps it off."""
    study = _study()
    _add(study, 60, 10, constraints=(0.5,))  # e.g. over a memory limit: infeasible
    _add(study, 70, 20)
    _add(study, 90, 40)
    assert _seconds(pareto_front(study)) == [20, 40]


def test_a_fast_trial_below_the_floor_is_off_the_front() -> None:
    """Bug: the floor not applied to the front. The trial below the given floor is the fastest."""
    study = _study(floor=50)
    _add(study, 45, 5)
    _add(study, 70, 20)
    _add(study, 90, 40)
    assert _seconds(pareto_front(study)) == [20, 40]


def test_the_default_floor_rises_halfway_from_chance_to_the_best() -> None:
    """Bug: a near-chance recipe first on the front. 10 classes: chance 10, default floor 20; the
    best is 90, so the front asks for 50: the 21.7% recipe, faster than every other, is off it."""
    study = _study(floor=20, chance=10)
    _add(study, 21.7, 5)
    _add(study, 49, 8)
    _add(study, 50, 9)
    _add(study, 90, 40)
    assert front_floor(study) == pytest.approx(50.0)
    assert _seconds(pareto_front(study)) == [9, 40]


def test_a_floor_the_user_gave_is_not_raised() -> None:
    study = _study(floor=20)  # --min-accuracy 20: no chance level recorded
    _add(study, 21.7, 5)
    _add(study, 90, 40)
    assert front_floor(study) == 20 and _seconds(pareto_front(study)) == [5, 40]


def test_a_higher_given_floor_wins_over_halfway() -> None:
    study = _study(floor=80, chance=10)
    _add(study, 70, 5)
    _add(study, 90, 40)
    assert front_floor(study) == 80 and _seconds(pareto_front(study)) == [40]


def test_the_front_of_a_minimised_metric_keeps_the_low_ones() -> None:
    """Bug: the metric's direction ignored by the front (a loss)."""
    study = _study(direction="minimize")
    _add(study, 0.9, 10)
    _add(study, 0.5, 20)
    _add(study, 0.7, 30)  # slower and worse than the 0.5 trial
    assert _seconds(pareto_front(study)) == [10, 20]


trial_sets = st.lists(st.tuples(st.floats(0, 100), st.floats(1, 1000), st.booleans()), min_size=1, max_size=12)


@PROPERTY
@given(trials=trial_sets, floor=st.one_of(st.none(), st.floats(0, 99)), chance=st.one_of(st.none(), st.floats(1, 50)))
def test_front_properties(trials, floor, chance) -> None:
    """No member dominated by a feasible trial, none below the floor or infeasible, and every
    feasible non-member dominated by a member (so the front is all a user needs to look at)."""
    study = _study(floor=floor, chance=chance)
    for score, seconds, feasible in trials:
        _add(study, score, seconds, constraints=() if feasible else (1.0,))
    front = pareto_front(study)
    level = front_floor(study)
    done = study.get_trials(states=(TrialState.COMPLETE,))
    eligible = [t for t in done if all(c <= 0 for c in t.constraints.values())
                and (level is None or t.user_attrs["score"] >= level)]

    def key(t):
        return t.user_attrs["score"], t.user_attrs["predicted"]["seconds"]

    def dominates(a, b) -> bool:
        (sa, ta), (sb, tb) = key(a), key(b)
        return sa >= sb and ta <= tb and (sa > sb or ta < tb)

    numbers = {t.number for t in front}
    assert numbers <= {t.number for t in eligible}
    for t in front:
        assert not any(dominates(o, t) for o in eligible)
    for t in eligible:
        if t.number not in numbers:
            assert any(dominates(o, t) for o in front)
    assert _seconds(front) == sorted(_seconds(front))
    if chance is not None and done:
        best = max(t.user_attrs["score"] for t in done)
        assert level >= chance + (best - chance) / 2 - 1e-9
        if floor is not None:
            assert level >= floor


# --- the peer rule ---------------------------------------------------------------------------

def _judge(study: optuna.Study, pruner: PeerPruner, seconds: float, value: float) -> bool:
    trial = study.ask()
    trial.set_user_attr("predicted", {"seconds": seconds})
    record_rung(trial, "0.333", value)
    verdict = pruner.prune(study, frozen_trial(trial))
    study.tell(trial, state=TrialState.FAIL)
    return verdict


def test_peers_within_the_slack_count() -> None:
    """Bug: the slack dropped (only peers at most as slow as the trial). Every peer is 20% slower
    than the trial, inside the 1.25 slack: without it the trial has no peers and is never pruned."""
    study = _study()
    for value in (50, 60, 70, 80):
        _add(study, value, 12.0, rung=value)
    pruner = PeerPruner(maximize=True, slack=1.25, min_peers=4)
    assert _judge(study, pruner, 10.0, 64)
    assert not _judge(study, pruner, 10.0, 66)
    assert not _judge(study, pruner, 10.0, 65)  # level with the median: kept
    assert not _judge(study, pruner, 9.0, 1)  # 12 s is 1.33x 9 s: outside the slack


def test_a_minimised_metric_prunes_the_high_ones() -> None:
    """Bug: the minimise branch flipped (a low loss pruned for beating its peers)."""
    study = _study(direction="minimize")
    for value in (1.0, 2.0, 3.0, 4.0):  # losses: the median is 2.5
        _add(study, value, 10.0, rung=value)
    pruner = PeerPruner(maximize=False, slack=1.25, min_peers=4)
    assert _judge(study, pruner, 10.0, 2.6)
    assert not _judge(study, pruner, 10.0, 2.4)
    assert not _judge(study, pruner, 10.0, 2.5)  # level with the median: kept


def test_the_peer_rule_judges_a_trial_at_the_latest_rung_it_passed() -> None:
    """Bug: the rule reads the first rung's value after the second was recorded (a trial that fell
    behind between a third and two thirds of its run is kept for its early lead)."""
    study = _study()
    for value in (50, 60, 70, 80):
        _add(study, value, 10.0, rung=value)  # each peer's value at both rungs
    trial = study.ask()
    trial.set_user_attr("predicted", {"seconds": 10.0})
    pruner = PeerPruner(maximize=True)
    record_rung(trial, "0.333", 90.0)
    assert not pruner.prune(study, frozen_trial(trial))
    record_rung(trial, "0.667", 40.0)
    assert pruner.prune(study, frozen_trial(trial))
    assert isinstance(pruner, optuna.pruners.BasePruner)  # a study's pruner, as Optuna's are


def test_no_rung_at_a_runs_last_epoch() -> None:
    """Bug: a rung at the last epoch (a finished trial judged, and pruned, after its last epoch)."""
    assert rung_passed(1, 1) is None and rung_passed(2, 2) is None and rung_passed(3, 3) is None
    assert rung_passed(1, 2) == "0.333" and rung_passed(2, 3) == "0.667"


@PROPERTY
@given(peers=st.lists(st.tuples(st.floats(1, 100), st.integers(0, 10).map(float)), min_size=0, max_size=10),
       mine=st.floats(1, 100), value=st.integers(0, 10).map(float), maximize=st.booleans(),
       slack=st.floats(1.0, 2.0), min_peers=st.integers(1, 5))
def test_peer_rule_properties(peers, mine, value, maximize, slack, min_peers) -> None:
    """The rule prunes exactly when enough peers within the slack reached the rung and the trial is
    worse than their median in the metric's own direction; never a trial at least as good as that
    median, never with too few peers, and peers slower than the slack never count."""
    study = _study(direction="maximize" if maximize else "minimize")
    for seconds, v in peers:
        _add(study, v, seconds, rung=v)
    within = sorted(v for seconds, v in peers if seconds <= slack * mine)
    verdict = _judge(study, PeerPruner(maximize, slack=slack, min_peers=min_peers), mine, value)
    if len(within) < min_peers:
        assert not verdict
        return
    n = len(within)
    median = within[n // 2] if n % 2 else (within[n // 2 - 1] + within[n // 2]) / 2
    assert verdict == (value < median if maximize else value > median)


# --- time to target --------------------------------------------------------------------------

def test_time_to_target_picks_the_fastest_trial_that_reached_it() -> None:
    """The fastest trial missed the target, the most accurate is the slowest: the choice is the
    fastest of those that reached it."""
    study = _study(ObjectiveMode.TIME_TO_TARGET, target=80)
    _add(study, 70, 5, constraints=(10.0,))
    _add(study, 85, 20, constraints=(-5.0,))
    _add(study, 81, 30, constraints=(-1.0,))
    _add(study, 95, 60, constraints=(-15.0,))
    assert best_trial(study).user_attrs["score"] == 85


def test_time_to_target_falls_back_to_the_best_metric() -> None:
    study = _study(ObjectiveMode.TIME_TO_TARGET, target=99)
    _add(study, 70, 5, constraints=(29.0,))
    _add(study, 85, 20, constraints=(14.0,))
    _add(study, 60, 2, constraints=(39.0,))
    assert best_trial(study).user_attrs["score"] == 85


@PROPERTY
@given(trials=st.lists(st.tuples(st.floats(0, 100), st.floats(1, 1000)), min_size=1, max_size=12),
       target=st.floats(0, 100))
def test_time_to_target_choice_properties(trials, target) -> None:
    study = _study(ObjectiveMode.TIME_TO_TARGET, target=target)
    for score, seconds in trials:
        _add(study, score, seconds, constraints=(target - score,))
    chosen = best_trial(study)
    reached = [(s, t) for s, t in trials if s >= target]
    if reached:
        assert chosen.user_attrs["score"] >= target
        assert chosen.user_attrs["predicted"]["seconds"] == min(t for _, t in reached)
    else:
        assert chosen.user_attrs["score"] == max(s for s, _ in trials)


# --- the budget --------------------------------------------------------------------------------

ENDS = {
    "complete": (TrialState.COMPLETE, None, True),
    "pruned": (TrialState.PRUNED, None, True),
    "failed": (TrialState.FAIL, TrialStatus.FAILED, True),  # the recipe raised: spent
    "interrupted": (TrialState.FAIL, TrialStatus.INTERRUPTED, False),  # Ctrl-C, a dead worker: retried
    "cut": (TrialState.FAIL, None, False),  # killed before it could say why
    "running": (TrialState.RUNNING, None, True),
    "waiting": (TrialState.WAITING, None, False),
}


@PROPERTY
@given(ends=st.lists(st.sampled_from(sorted(ENDS)), max_size=15))
def test_the_budget_counts_what_was_spent_and_not_what_is_retried(ends) -> None:
    """Bug: interrupted trials counted (a Ctrl-C'd search ends short of its budget) or failed ones
    not (a recipe that always fails never ends the search)."""
    study = optuna.create_study()
    for end in ends:
        state, status, _ = ENDS[end]
        attrs = {"status": status} if status else {}
        values = [1.0] if state == TrialState.COMPLETE else None
        study.add_trial(create_trial(state=state, values=values, params={"x": 0.5},
                                     distributions={"x": FloatDistribution(0, 1)}, user_attrs=attrs))
    assert len(counted(study)) == sum(ENDS[e][2] for e in ends)


def _trials(*ends: tuple[TrialState, dict, dict]) -> list[optuna.trial.FrozenTrial]:
    study = optuna.create_study()
    for state, user_attrs, system_attrs in ends:
        study.add_trial(create_trial(state=state, values=[1.0] if state == TrialState.COMPLETE else None,
                                     params={"x": 0.5}, distributions={"x": FloatDistribution(0, 1)},
                                     user_attrs=user_attrs, system_attrs=system_attrs))
    return study.get_trials()


DONE = (TrialState.COMPLETE, {}, {})
DEAD = (TrialState.FAIL, {}, {})  # its worker was killed: failed by its missing heartbeat


def test_a_dead_workers_trial_holds_its_room_until_its_continuation_is_queued_then_that_may_start() -> None:
    """Bug: in the moment between a dead worker's trial failing and its continuation being queued,
    or while the continuation waits, another worker started a fresh trial: one trial too many, or
    (with the start counted under a lock) the continuation refused for ever."""
    budget = Budget(4)
    failed_only = _trials(DONE, DONE, DEAD, DONE)
    assert not budget.may_start(failed_only)  # the continuation is owed: no fresh trial
    queued = _trials(DONE, DONE, DEAD, DONE, (TrialState.WAITING, {}, {"failed_trial": 2, "retry_history": [2]}))
    assert not budget.may_start(queued)
    assert budget.may_start(queued, 4)  # the continuation itself fits
    assert not budget.exhausted_by(queued)  # so the worker stays to run it
    # a trial whose worker died more often than it is retried is spent: a fresh one takes its room
    given_up = _trials(DONE, DONE, (TrialState.FAIL, {}, {"failed_trial": 0, "retry_history": list(range(RETRIES))}), DONE)
    assert budget.may_start(given_up)


def test_queued_trials_start_up_to_the_budget_and_no_further() -> None:
    """Bug: a queued prior refused because the queue itself filled the budget (the worker stops
    with every prior waiting), or a fresh trial started beside a full queue."""
    queued = _trials(*[(TrialState.WAITING, {}, {})] * 3)
    assert all(Budget(3).may_start(queued, n) for n in range(3))
    assert not Budget(3).may_start(queued)
    # a resume with a smaller budget runs the first of the queue
    assert [Budget(2).may_start(queued, n) for n in range(3)] == [True, True, False]


# --- the transfer rules ----------------------------------------------------------------------

@PROPERTY
@given(stages=st.integers(1, 3), batch=st.sampled_from([64, 128]), full_batch=st.sampled_from([96, 256, 1000]),
       scale=st.booleans())
def test_transfer_gives_each_phase_its_own_batch_and_lr(stages, batch, full_batch, scale) -> None:
    """For 1-3 phases: --batch-size names the last phase's batch, every earlier phase keeps its
    share of it, and each phase's peak LR on both sides follows that phase's own batch."""
    import copy
    import tempfile
    from pathlib import Path

    from tests.search.conftest import TINY_SPACE, write_space
    from tianfeng.hpo.space.materialize import build_config
    from tianfeng.hpo.space.read import load_space
    from tianfeng.promotion.transfer import transfer

    raw = copy.deepcopy(TINY_SPACE)
    raw["phases"] = {"stages": stages, "start_resolution": 8, "end_resolution": 8 + 4 * (stages - 1),
                     "batch_size": "batch_size", "scale_batch_with_resolution": scale}
    raw["fidelities"]["proxy"]["epochs"] = 3  # an epoch for each of up to three phases
    values = {"optimizer": "sgd", "base_lr": 0.4, "warmup_epochs": 0.0, "batch_size": batch, "momentum": 0.9}
    with tempfile.TemporaryDirectory() as tmp:
        space = load_space(write_space(Path(tmp), raw))
        proxy = build_config(space, values, "proxy")
        full, changes = transfer(space, values, "proxy", batch_size=full_batch)
    assert len(full.phases) == len(proxy.phases) == stages
    assert full.phases[-1].batch_size == full_batch
    rows = {c.key: c for c in changes if "peak LR" in c.key}
    for i, (small, big) in enumerate(zip(proxy.phases, full.phases, strict=True)):
        assert big.batch_size == max(1, round(small.batch_size * full_batch / proxy.phases[-1].batch_size))
        row = rows[f"phase {i} peak LR (computed)"]
        assert row.proxy == pytest.approx(0.4 * small.batch_size / 256, abs=1e-6)
        assert row.full == pytest.approx(0.4 * big.batch_size / 256, abs=1e-6)


def test_a_trial_status_is_the_engine_status_of_the_same_word() -> None:
    """One vocabulary: every way the engine says a run ended is a trial status, spelt alike."""
    from tianfeng.core.states import RunStatus
    from tianfeng.hpo.trial_attrs import TrialStatus

    assert [TrialStatus.of_run(s) for s in RunStatus] == [TrialStatus(s.value) for s in RunStatus]
    assert {s.value for s in RunStatus} < {s.value for s in TrialStatus}
