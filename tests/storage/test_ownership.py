"""A study's report is written whole: the workers of a job array write the same report at the
same moment, and a reader (a browser, the next worker's ownership check) must never meet half a
page."""

from __future__ import annotations

import threading
from pathlib import Path

from tianfeng.storage.ownership import Owner, report_owner, write_report

PAGE = '<html><head><meta charset="utf-8"></head><body>' + "x" * 4_000_000 + "</body></html>"


def test_a_report_read_while_another_worker_writes_it_is_always_whole(tmp_path: Path) -> None:
    """Bug caught: the page written in place, where a reader finds it empty or cut short."""
    owner, path = Owner("u1", "pg", "postgresql://db"), tmp_path / "reports" / "pg.html"
    write_report(path, PAGE, owner)
    cut: list[int] = []
    done = threading.Event()

    def write() -> None:
        for _ in range(30):
            write_report(path, PAGE, owner)
        done.set()

    writer = threading.Thread(target=write)
    writer.start()
    while not done.is_set():
        page = path.read_text()
        if not page.endswith("</body></html>"):
            cut.append(len(page))
    writer.join()
    assert not cut, f"{len(cut)} reads met a partial page, e.g. {cut[0]} characters"
    assert report_owner(path) == owner
    assert [p.name for p in path.parent.iterdir()] == ["pg.html"]  # no partial file left behind
