"""Read the runs W&B wrote in offline mode back from their transaction logs (`run-ID.wandb`: a
LevelDB-style log of protobuf records after a 7-byte `:W&B` header), with W&B's own protobuf
classes: what `wandb sync` would send, read without sending anything."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

from wandb.proto import wandb_internal_pb2 as pb

_BLOCK = 32768
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def _payloads(data: bytes) -> list[bytes]:
    assert data[:4] == b":W&B", "not a W&B transaction log"
    out, pending, pos = [], b"", 7
    while pos + 7 <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < 7:  # a block's tail too short for a record header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        body = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind == 0 and length == 0:
            continue
        if kind == _FULL:
            out.append(body)
        elif kind == _FIRST:
            pending = body
        elif kind == _MIDDLE:
            pending += body
        elif kind == _LAST:
            out.append(pending + body)
    return out


@dataclass
class OfflineRun:
    name: str = ""
    group: str = ""
    job_type: str = ""
    tags: list[str] = field(default_factory=list)
    config: dict = field(default_factory=dict)
    history: list[dict] = field(default_factory=list)
    summary: dict = field(default_factory=dict)
    exit_code: int | None = None


def _items(items) -> dict:
    """W&B writes a key as `key` or as its path in `nested_key`."""
    return {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in items}


def read_run(log: Path) -> OfflineRun:
    run = OfflineRun()
    for payload in _payloads(log.read_bytes()):
        record = pb.Record()
        record.ParseFromString(payload)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            r = record.run
            run.name, run.group, run.job_type, run.tags = r.display_name, r.run_group, r.job_type, list(r.tags)
            run.config.update(_items(r.config.update))
        elif kind == "config":
            run.config.update(_items(record.config.update))
        elif kind == "history":
            run.history.append(_items(record.history.item))
        elif kind == "summary":
            run.summary.update(_items(record.summary.update))
        elif kind == "exit":
            run.exit_code = record.exit.exit_code
    return run


def offline_runs(root: Path) -> list[OfflineRun]:
    return [read_run(log) for log in sorted(root.glob("wandb/offline-run-*/run-*.wandb"))]
