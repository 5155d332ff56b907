"""The space is read once, where the verb receives it: the plan carries it to the workers, Ray
and a scale study, which never read the file again (a file changed or gone after the start does
not change what a running search searches), and a pickled plan (a job array's plan file, a
spawned worker's) carries the same space."""

from __future__ import annotations

import pickle
from pathlib import Path

from tests.search.conftest import write_space
from tianfeng.hpo.options import SearchOptions
from tianfeng.hpo.spec import resolve_search, space_of
from tianfeng.verbs.scale import plan_scale


def test_the_plan_hands_on_the_space_it_read(tmp_path: Path, tiny_space: dict) -> None:
    path = write_space(tmp_path, tiny_space)
    plan, loaded = resolve_search(path, SearchOptions(storage=f"sqlite:///{tmp_path}/s.db").checked())
    path.write_text("this is no longer a space: {")  # a re-read would fail here
    assert space_of(plan) == loaded
    assert pickle.loads(pickle.dumps(plan)).space == loaded  # what a spawned worker or a plan file gets


def test_each_batch_size_of_a_scale_study_searches_the_space_read_at_the_start(tmp_path: Path,
                                                                              tiny_space: dict) -> None:
    path = write_space(tmp_path, tiny_space)
    plan, _, loaded = plan_scale(path, (64, 128), storage=f"sqlite:///{tmp_path}/s.db", trials_per_batch=2)
    path.unlink()
    pinned = space_of(plan.search.changed(batch_size=128))
    assert pinned.name == loaded.name and pinned.base == loaded.base
