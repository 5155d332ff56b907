"""`--promote auto`, the default: which promotion it stands for, and that the search says so in its
first log line. The default is the mode the replay chose (docs/results.md): a change to the
shipped space's rung or to the rule without the replay's default following it is caught here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tianfeng.hpo.options import SearchOptions
from tianfeng.hpo.spec import resolve_search

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "search_spaces" / "large_batch.yaml"


def _resolved(space: Path, **changes) -> tuple[str, str, str]:
    spec, _ = resolve_search(space, SearchOptions(dry_run=True, **changes).checked())
    return spec.rung, spec.options.promote, spec.promotion_rule


@pytest.mark.parametrize(("changes", "promote", "why"), [
    ({}, "none", "a Pareto front has no one best trial"),  # the shipped space's own objective
    ({"objective": "accuracy"}, "leader", "accuracy picks one best trial"),
    ({"objective": "time-to-target", "target": 80.0}, "leader", "time-to-target picks one best trial"),
    ({"objective": "accuracy", "backend": "ray"}, "none", "with --backend ray"),
    ({"objective": "accuracy", "launcher": "slurm", "workers": 2}, "none", "with --launcher slurm"),
    ({"objective": "accuracy", "fidelity": "target"}, "none", "whole runs already"),
    ({"objective": "accuracy", "promote": "leader"}, "leader", "as asked"),
    ({"objective": "accuracy", "promote": "none"}, "none", "as asked"),
])
def test_auto_promotes_leaders_only_where_one_best_trial_can_train_whole_here(changes, promote, why) -> None:
    """Bug: auto promoting a Pareto search (no one best), a Ray or Slurm search (no worker here to
    pause), or a search whose trials are whole runs; or overriding a mode the user named."""
    _, resolved, rule = _resolved(SHIPPED, **changes)
    assert resolved == promote and rule.startswith(f"promote {promote} (") and why in rule


def test_the_shipped_default_is_the_replays_default() -> None:
    """Bug: the shipped space's rung or the auto rule changed, and the replay's figures for `the
    default` then describe a search the product no longer runs."""
    sys.path.insert(0, str(REPO / "benchmarks" / "search"))
    import replay

    rung, promote, _ = _resolved(SHIPPED, objective="accuracy")
    assert (rung, promote) == ("lowres_half", "leader")
    assert f"lowres-{promote}" == replay.DEFAULT and "the default" in replay.DESCRIBED[replay.DEFAULT]


def test_the_first_line_a_search_logs_states_its_promotion_rule(tiny_space_file: Path, tmp_path: Path) -> None:
    """Bug: the rule resolved silently, or said after trials had started."""
    out = subprocess.run([sys.executable, "-m", "tianfeng.cli", "search", "--space", str(tiny_space_file),
                          "--trials", "1", "--workers", "1"], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr
    first = next(line for line in out.stderr.splitlines() if line.strip())
    assert first.split(" ", 1)[1].startswith("objective accuracy:"), first
    assert "promote leader (auto: accuracy picks one best trial" in first
