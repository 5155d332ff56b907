"""One vocabulary of states: the engine's run statuses, the promoted runs', the trials', their
outcomes and the scheduler jobs' are each a subset of `State`, and the code that reads a job's
state compares it with those members, never with a word typed again."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tianfeng.core.states import JobStatus, RunStatus, State
from tianfeng.hpo.judge.outcomes import Outcome
from tianfeng.hpo.trial_attrs import TrialStatus
from tianfeng.launch.slurm import _task_state, array_state
from tianfeng.storage.runs import RunRecordStatus

PACKAGE = Path(__file__).resolve().parents[2] / "tianfeng"


@pytest.mark.parametrize("enum", [RunStatus, JobStatus, RunRecordStatus, TrialStatus, Outcome])
def test_every_status_word_is_a_state(enum) -> None:
    words = {s.value for s in State}
    assert {m.value for m in enum} <= words, {m.value for m in enum} - words
    assert all(enum[m.name] == State[m.name] for m in enum)  # the same word under the same name


def test_no_job_state_is_typed_as_a_bare_word() -> None:
    """A comparison or a JobState built with a string such as "pending" fails here: it would
    drift from the vocabulary the first time a word changes."""
    words = {s.value for s in State}
    typed = []
    for path in (*PACKAGE.joinpath("launch").rglob("*.py"), *PACKAGE.joinpath("promotion").rglob("*.py"),
                 PACKAGE / "hpo" / "results" / "follow.py", PACKAGE / "verbs" / "runs.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            operands = []
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
            elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "JobState":
                operands = node.args[:1]
            typed += [f"{path.name}:{node.lineno}" for o in operands
                      if isinstance(o, ast.Constant) and o.value in words]
    assert not typed


@pytest.mark.parametrize(("line", "state"), [
    ("JobId=7 JobState=PENDING Reason=Priority", JobStatus.PENDING),
    ("JobId=7 JobState=COMPLETING Reason=None", JobStatus.RUNNING),
    ("JobId=7 JobState=TIMEOUT Reason=TimeLimit ExitCode=0:15", JobStatus.FAILED),
    ("JobId=7 JobState=NODE_FAIL Reason=NodeDown", JobStatus.FAILED),
    ("JobId=7 JobState=PREEMPTED Reason=None", JobStatus.PREEMPTED),
    ("JobId=7 JobState=CANCELLED Reason=None", JobStatus.CANCELLED),
    ("JobId=7 JobState=COMPLETED Reason=None ExitCode=0:0", JobStatus.COMPLETED),
])
def test_slurm_states_read_as_the_vocabulary(line: str, state: JobStatus) -> None:
    assert _task_state(line).state is state


def test_an_ended_array_reads_as_its_worst_task() -> None:
    tasks = [_task_state("JobState=COMPLETED Reason=None"), _task_state("JobState=PREEMPTED Reason=None"),
             _task_state("JobState=CANCELLED Reason=None")]
    assert array_state(tasks).state is JobStatus.PREEMPTED
    assert array_state([*tasks, _task_state("JobState=RUNNING Reason=None")]).state is JobStatus.RUNNING
    assert array_state([*tasks, _task_state("JobState=TIMEOUT Reason=TimeLimit")]).state is JobStatus.FAILED
