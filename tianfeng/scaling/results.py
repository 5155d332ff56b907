"""The batch-scaling curve, kept in the studies' database: one row per (scale study, batch size)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Float, Integer, String, Text, UniqueConstraint, create_engine, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from tianfeng.storage.schema import create_tables
from tianfeng.storage.url import engine_options

# the naive statuses that have a value to show; "complete" is how rows stored before the trial
# words were one vocabulary say "completed"
NAIVE_SCORED = ("completed", "reference", "complete")


@dataclass(frozen=True)
class ScalePoint:
    """What one batch size gave: the searched best and the naive baseline, with their recipes."""
    batch_size: int
    study: str
    searched_value: float | None
    searched_trial: int | None
    searched_recipe: dict[str, Any]
    naive_study: str | None
    naive_value: float | None
    naive_status: str  # completed | diverged | failed | reference (the smallest batch: naive = searched)
    naive_recipe: dict[str, Any]
    trials: int
    complete: int
    pruned: int
    warm_started: int  # trials enqueued from the neighbouring batch size's best
    wall_s: float  # the batch size's search and naive run, end to end
    trial_s: float  # summed trial durations
    pruned_s: float  # of which in pruned trials
    steps_per_epoch: int
    epochs_per_trial: int
    extra: dict[str, Any] = field(default_factory=dict)
    noise_scale: float | None = None  # B_simple at the searched winner's last epoch


class _Base(DeclarativeBase):
    pass


class ScaleRow(_Base):
    __tablename__ = "tianfeng_scale_points"
    __table_args__ = (UniqueConstraint("scale", "batch_size"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    scale: Mapped[str] = mapped_column(String(512), index=True)
    batch_size: Mapped[int] = mapped_column(Integer)
    searched_value: Mapped[float | None] = mapped_column(Float, nullable=True)
    naive_value: Mapped[float | None] = mapped_column(Float, nullable=True)
    point_json: Mapped[str] = mapped_column(Text)
    settings_json: Mapped[str] = mapped_column(Text)
    updated: Mapped[str] = mapped_column(String(32))


class ScaleStore:
    def __init__(self, url: str) -> None:
        self.engine = create_engine(url, **engine_options(url))
        create_tables(self.engine, _Base.metadata)

    def save(self, scale: str, point: ScalePoint, settings: dict[str, Any]) -> None:
        with Session(self.engine) as session:
            row = session.scalars(select(ScaleRow).filter_by(scale=scale, batch_size=point.batch_size)).first()
            if row is None:
                row = ScaleRow(scale=scale, batch_size=point.batch_size)
                session.add(row)
            row.searched_value, row.naive_value = point.searched_value, point.naive_value
            row.point_json = json.dumps(asdict(point))
            row.settings_json = json.dumps(settings)
            row.updated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S")
            session.commit()

    def points(self, scale: str) -> tuple[list[ScalePoint], dict[str, Any]]:
        """The curve in increasing batch size, and the settings of its latest run."""
        with Session(self.engine) as session:
            rows = session.scalars(select(ScaleRow).filter_by(scale=scale).order_by(ScaleRow.batch_size)).all()
            points = [ScalePoint(**json.loads(r.point_json)) for r in rows]
            settings = json.loads(rows[-1].settings_json) if rows else {}
        return points, settings

    def scales(self) -> list[str]:
        with Session(self.engine) as session:
            return sorted(set(session.scalars(select(ScaleRow.scale))))
