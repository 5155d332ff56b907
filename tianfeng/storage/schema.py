"""Tables that tianfeng adds to a study database, created once however many processes start at
the same moment. SQLAlchemy's `create_all` looks for each table, then creates the missing ones:
two workers that look at once both create, and on PostgreSQL the later one fails on the
catalogue's unique names ("duplicate key value violates unique constraint
pg_class_relname_nsp_index"), on SQLite with "table already exists". On PostgreSQL the creation
holds an advisory lock, so the later worker waits and then finds the tables; on SQLite the loser
creates again what is still missing."""

from __future__ import annotations

from sqlalchemy import MetaData, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

# the key of PostgreSQL's one-number advisory locks that tianfeng's table creation holds ("tfsc");
# the one-number key space is apart from the two-number one that starts trials
SCHEMA_LOCK = 0x74667363


def create_tables(engine: Engine, metadata: MetaData, attempts: int = 5) -> None:
    """Create `metadata`'s tables that `engine`'s database lacks. A creation that lost a race is
    made again (SQLite creates one table at a time, so the winner may not have made them all yet);
    the last attempt's error is the caller's."""
    for attempt in range(1, attempts + 1):
        try:
            with engine.begin() as connection:
                if engine.dialect.name == "postgresql":  # released when this transaction ends
                    connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK})
                metadata.create_all(connection)
            return
        except DBAPIError:
            if attempt == attempts:
                raise
