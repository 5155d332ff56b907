"""Benchmarks that take --data run on that data alone: only `cifar5` needs the dev archive."""

from __future__ import annotations

from pathlib import Path

import common  # noqa: E402
import pytest


def test_only_cifar5_needs_the_archive(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(common, "SHARED_ARCHIVE", tmp_path / "missing.tar.gz")
    monkeypatch.setenv("TIANFENG_CACHE", str(tmp_path / "cache"))
    assert common.data_source("imagefolder:/data/mine") == "imagefolder:/data/mine"
    assert common.data_source("digits") is None
    with pytest.raises(SystemExit, match="missing.tar.gz"):
        common.data_source("cifar5")
