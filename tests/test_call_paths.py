"""The development page's paths, measured as `scripts/call_paths.py` measures them: the search
reaches its sampler and the promotion its optimizer in at most 15 stops with no climb back into a
file the path had left, the search reads its space file once, and the promotion builds its target
config once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_paths_are_short_and_go_one_way(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "call_paths.py"), "--json"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    paths = {p["path"]: p for p in json.loads(out.stdout)}
    assert set(paths) == {"search", "promote"}
    for p in paths.values():
        assert 3 <= p["stops"] <= 15 and p["climbs"] == 0, p["chain"]
        assert p["chain"][0] == "cli.py:main" and p["chain"][-1].endswith(p["to"].split(":")[1])
    assert paths["search"]["space_reads"] == 1
    assert paths["promote"]["space_reads"] == 0
    # the space's base, the target config, the proxy's (for the list of changes) and one change (its
    # name and folder); 6 when the proxy rebuilt the target and an empty change rebuilt it, 44 when
    # the stored space's corners were checked again
    assert paths["promote"]["configs_built"] <= 4


def test_a_climb_is_a_stop_in_a_file_the_path_had_left() -> None:
    sys.path.insert(0, str(REPO / "scripts"))
    from call_paths import CallPath

    path = CallPath("p", "a", "b", stops=["cli.py:main", "verbs/x.py:f", "verbs/x.py:g", "hpo/y.py:h", "verbs/x.py:k"])
    assert path.climbs == 1 and path.files == ["cli.py", "verbs/x.py", "hpo/y.py"]
    assert CallPath("p", "a", "b", stops=["cli.py:main", "verbs/x.py:f", "hpo/y.py:h"]).climbs == 0
