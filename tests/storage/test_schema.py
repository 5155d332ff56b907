"""The tables tianfeng adds to a study database are created once when several processes open it
at the same moment: the workers of a job array print their summaries together, each opening the
runs table, and one of them failed with PostgreSQL's "duplicate key value violates unique
constraint pg_class_relname_nsp_index" (its task ended FAILED)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from sqlalchemy import MetaData, create_engine, inspect

from tests.postgres import postgres_server
from tianfeng.scaling.results import ScaleStore
from tianfeng.storage.runs import RunStore

OPENERS = 8  # at once, on one database
ROUNDS = 4  # each on a database without the tables


def _open_at_once(url: str, store: type) -> list[BaseException]:
    start, errors = threading.Barrier(OPENERS), []

    def open_store() -> None:
        start.wait()
        try:
            store(url).engine.dispose()
        except BaseException as error:  # noqa: BLE001 - the test reports every opener's failure
            errors.append(error)

    threads = [threading.Thread(target=open_store) for _ in range(OPENERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def _drop_tables(url: str) -> None:
    engine = create_engine(url)
    ours = MetaData()
    ours.reflect(engine, only=lambda name, _: name.startswith("tianfeng_"))
    ours.drop_all(engine)
    assert not [t for t in inspect(engine).get_table_names() if t.startswith("tianfeng_")]
    engine.dispose()


@pytest.mark.parametrize("store", [RunStore, ScaleStore])
def test_openers_at_once_on_postgresql_create_the_tables_once_and_none_fails(store) -> None:
    """Bug caught: the check-then-create race (no lock around create_all) fails a worker."""
    with postgres_server() as url:
        for _ in range(ROUNDS):
            _drop_tables(url)
            errors = _open_at_once(url, store)
            assert not errors, [str(e).splitlines()[0] for e in errors]


@pytest.mark.parametrize("store", [RunStore, ScaleStore])
def test_openers_at_once_on_sqlite_create_the_tables_once_and_none_fails(store, tmp_path: Path) -> None:
    """Bug caught: a creator that lost the race ("table already exists") fails instead of going
    on with the tables the winner made."""
    for round_ in range(ROUNDS):
        url = f"sqlite:///{tmp_path / f'study-{round_}.db'}"
        errors = _open_at_once(url, store)
        assert not errors, [str(e).splitlines()[0] for e in errors]
        assert inspect(create_engine(url)).get_table_names()
