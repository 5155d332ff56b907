"""Promoted and calibration runs, kept in the study's own database beside Optuna's tables, so
one URL holds the whole story: trials, the full runs made from them, and their metrics."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    Float,
    Integer,
    String,
    Text,
    UniqueConstraint,
    create_engine,
    inspect,
    select,
    text,
)
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from tianfeng.core.states import State
from tianfeng.storage.schema import create_tables
from tianfeng.storage.url import engine_options


class _Base(DeclarativeBase):
    pass


class PromotedRun(_Base):
    __tablename__ = "tianfeng_promoted_runs"
    __table_args__ = (UniqueConstraint("study", "trial_number", "config_hash"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study: Mapped[str] = mapped_column(String(512), index=True)
    trial_number: Mapped[int] = mapped_column(Integer)
    config_hash: Mapped[str] = mapped_column(String(16))
    kind: Mapped[str] = mapped_column(String(16))  # promote | calibrate
    run_dir: Mapped[str] = mapped_column(Text)
    config_yaml: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))  # running | completed | diverged | failed
    epochs_json: Mapped[str] = mapped_column(Text, default="[]")
    proxy_score: Mapped[float | None] = mapped_column(Float, nullable=True)
    final_score: Mapped[float | None] = mapped_column(Float, nullable=True)
    checkpoint: Mapped[str | None] = mapped_column(Text, nullable=True)
    created: Mapped[str] = mapped_column(String(32))
    updated: Mapped[str] = mapped_column(String(32))

    def as_dict(self) -> dict[str, Any]:
        """The record; an epochs field that is not a JSON list (edited, cut short) is listed as
        no epochs with `record_error` saying what it holds, so the other runs still list."""
        out = {c.name: getattr(self, c.name) for c in self.__table__.columns}
        raw = out.pop("epochs_json")
        try:
            epochs = json.loads(raw)
            if not isinstance(epochs, list) or not all(isinstance(e, dict) for e in epochs):
                raise ValueError("not a list of epoch records")
        except ValueError as exc:
            epochs = []
            out["record_error"] = f"run {out['id']}: epochs: {type(exc).__name__}: {str(exc)[:80]}; it holds {str(raw)[:60]!r}"
        out["epochs"] = epochs
        return out


class ScheduledJob(_Base):
    """The scheduler's job that trains a promoted run (one row per run: a resubmission replaces it)."""
    __tablename__ = "tianfeng_scheduled_jobs"

    run_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    launcher: Mapped[str] = mapped_column(String(16))  # slurm | ray
    job_id: Mapped[str] = mapped_column(String(64))
    address: Mapped[str | None] = mapped_column(Text, nullable=True)  # where the scheduler answers (Ray's Jobs API)
    state: Mapped[str] = mapped_column(String(16))  # pending | running | completed | failed | cancelled | ...
    reason: Mapped[str] = mapped_column(Text, default="")
    restarts: Mapped[int] = mapped_column(Integer, default=0)
    submitted: Mapped[str] = mapped_column(String(32))
    updated: Mapped[str] = mapped_column(String(32))

    def as_dict(self) -> dict[str, Any]:
        return {c.name: getattr(self, c.name) for c in self.__table__.columns}


class RunRecordStatus(StrEnum):
    """A promoted run's status in the database: the engine's, or where it stands."""
    RUNNING = State.RUNNING.value
    COMPLETED = State.COMPLETED.value
    DIVERGED = State.DIVERGED.value
    PRUNED = State.PRUNED.value
    STOPPED = State.STOPPED.value
    FAILED = State.FAILED.value
    INTERRUPTED = State.INTERRUPTED.value  # promoting it again continues it (killed: see run_lock)
    PLANNED = State.PLANNED.value  # collected when promoted again
    SUBMITTED = State.SUBMITTED.value  # its state is the job's (tianfeng runs)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]  # milliseconds: runs a second apart stay ordered


def _add_missing_columns(engine) -> None:
    """Columns added since a database was made (create_all makes missing tables, not columns);
    each is nullable, so old rows read as before."""
    table = ScheduledJob.__tablename__
    known = {c["name"] for c in inspect(engine).get_columns(table)}
    for column in ScheduledJob.__table__.columns:
        if column.name in known:
            continue
        try:
            with engine.begin() as connection:
                connection.execute(text(f"ALTER TABLE {table} ADD COLUMN {column.name} "
                                        f"{column.type.compile(engine.dialect)}"))
        except DBAPIError:  # another process added it first
            if column.name not in {c["name"] for c in inspect(engine).get_columns(table)}:
                raise


class RunStore:
    def __init__(self, url: str) -> None:
        self.engine = create_engine(url, **engine_options(url))
        create_tables(self.engine, _Base.metadata)
        _add_missing_columns(self.engine)

    def open_run(self, *, study: str, trial_number: int, config_hash: str, kind: str, run_dir: str,
                 config_yaml: str, proxy_score: float | None) -> tuple[int, bool]:
        """The run's id, and whether it already existed (a promotion being resumed)."""
        with Session(self.engine) as session:
            row = session.scalars(select(PromotedRun).filter_by(
                study=study, trial_number=trial_number, config_hash=config_hash)).first()
            if row is not None:
                row.status, row.updated = RunRecordStatus.RUNNING, _now()
                session.commit()
                return row.id, True
            row = PromotedRun(study=study, trial_number=trial_number, config_hash=config_hash,
                              kind=kind, run_dir=run_dir, config_yaml=config_yaml, status=RunRecordStatus.RUNNING,
                              epochs_json="[]", proxy_score=proxy_score, created=_now(), updated=_now())
            session.add(row)
            session.commit()
            return row.id, False

    def find(self, *, study: str, trial_number: int, config_hash: str) -> dict[str, Any] | None:
        """The run of this trial with this config, whichever command made it."""
        with Session(self.engine) as session:
            row = session.scalars(select(PromotedRun).filter_by(
                study=study, trial_number=trial_number, config_hash=config_hash)).first()
            return row.as_dict() if row is not None else None

    def update(self, run_id: int, **fields: Any) -> None:
        with Session(self.engine) as session:
            row = session.get(PromotedRun, run_id)
            if "epochs" in fields:
                fields["epochs_json"] = json.dumps(fields.pop("epochs"))
            for key, value in fields.items():
                setattr(row, key, value)
            row.updated = _now()
            session.commit()

    def runs(self, study: str | None = None) -> list[dict[str, Any]]:
        with Session(self.engine) as session:
            query = select(PromotedRun).order_by(PromotedRun.id)
            if study is not None:
                query = query.filter_by(study=study)
            return [row.as_dict() for row in session.scalars(query)]

    def record_job(self, run_id: int, *, launcher: str, job_id: str, state: str, address: str | None = None) -> None:
        with Session(self.engine) as session:
            row = session.get(ScheduledJob, run_id)
            if row is None:
                row = ScheduledJob(run_id=run_id, launcher=launcher, job_id=job_id, address=address, state=state,
                                   reason="", restarts=0, submitted=_now(), updated=_now())
                session.add(row)
            else:
                row.launcher, row.job_id, row.address = launcher, job_id, address
                row.state, row.reason, row.restarts = state, "", 0
                row.submitted = row.updated = _now()
            session.commit()

    def update_job(self, run_id: int, **fields: Any) -> None:
        with Session(self.engine) as session:
            row = session.get(ScheduledJob, run_id)
            for key, value in fields.items():
                setattr(row, key, value)
            row.updated = _now()
            session.commit()

    def jobs(self) -> dict[int, dict[str, Any]]:
        """Every run's scheduler job, by run id."""
        with Session(self.engine) as session:
            return {row.run_id: row.as_dict() for row in session.scalars(select(ScheduledJob))}
