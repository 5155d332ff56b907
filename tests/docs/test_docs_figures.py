"""Figures the docs quote come from results files that benchmarks write (docs/results/*.json,
with commit, date and machine): the file must be what the benchmark computes now, and each page
must quote the file's figures, so a changed model fails here until the file is written again
and the sentences say what it says."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
import published_records  # noqa: E402


def _prose(path: Path) -> str:
    return re.sub(r"\s+", " ", path.read_text())


def _published_records() -> dict:
    return json.loads(published_records.RESULTS.read_text())


def test_the_published_records_file_is_what_the_benchmark_computes_now() -> None:
    rows = [{**published_records.predict(r), "loo_ratio": published_records.predict(r, leave_one_out=True)["ratio"]}
            for r in published_records.RECORDS]
    saved = _published_records()
    assert saved["sets"] == published_records.summary(rows) and saved["records"] == published_records.table(rows), (
        "the wall-time model changed: run `python benchmarks/cost/published_records.py --results` and "
        "update the sentences that quote it")
    assert saved["commit"] and saved["date"] and saved["machine"]


def test_the_readme_and_the_wall_time_page_quote_the_published_records_file() -> None:
    saved = _published_records()
    f, c, commit = saved["sets"]["fitted"], saved["sets"]["check"], saved["commit"].removesuffix("+changes")
    quotes = {
        "README.md": [
            f"on {f['records']} published ResNet-50 records",
            f"a median {f['median']:.2f}x of their times (worst {f['worst']:.2f}x)",
            f"a median {c['median']:.2f}x (worst {c['worst']:.2f}x) on {c['records']} records",
            f"{saved['date']}, commit {commit}",
        ],
        "docs/explanation/wall-time.md": [
            f"a median of {f['median']:.2f} over {f['records']} records (worst {f['worst']:.2f}x, "
            f"{f['within_1_25']} within 1.25x)",
            f"of {c['median']:.2f} over {c['records']} records of MLPerf rounds kept out of the fit "
            f"(worst {c['worst']:.2f}x, {c['within_1_25']} within 1.25x)",
            f"measured {saved['date']} at commit {commit}",
        ],
    }
    for page, fragments in quotes.items():
        text = _prose(REPO / page)
        missing = [q for q in fragments if q not in text]
        assert not missing, f"{page} does not quote {published_records.RESULTS.name}: {missing}"


def _defaults_table() -> dict[str, str]:
    rows = {}
    for line in (REPO / "docs" / "reference" / "defaults.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 3 and cells[0] not in ("name", "---"):
            rows[cells[0]] = cells[1].strip("`")
    return rows


def test_the_defaults_page_says_what_the_code_does() -> None:
    from tianfeng.defaults import LEADER_AFTER
    from tianfeng.hpo.judge.front import default_floor
    from tianfeng.hpo.judge.peers import RUNGS, PeerPruner
    from tianfeng.hpo.options import SearchOptions
    from tianfeng.hpo.sampling.metric_share import N_STARTUP_TRIALS

    o, peers = SearchOptions(), PeerPruner(maximize=True)
    table = _defaults_table()
    code = {"sampler": o.sampler, "tpe_startup_trials": str(N_STARTUP_TRIALS), "pruner": o.pruner,
            "peer_rule_rungs": ", ".join(f"{round(r * 3)}/3" for r in RUNGS), "peer_rule_slack": f"{peers.slack:g}",
            "peer_rule_min_peers": str(peers.min_peers), "trials": str(o.trials), "leader_after": str(LEADER_AFTER), "promote": o.promote,
            "failure_limit": str(o.failure_limit), "grace_s": str(o.grace_s)}
    assert {k: table.get(k) for k in code} == code
    assert o.fidelity is None and o.objective is None  # the space decides, as the page says
    floors = {classes: default_floor("val_top1", classes) for classes in (5, 10, 1000, 2)}
    assert floors == {5: 40.0, 10: 20.0, 1000: 10.1, 2: 75.0}
    assert "40 for 5 classes, 20 for 10, 10.1 for 1000, 75 for 2" in _prose(REPO / "docs" / "reference" / "defaults.md")


def _replayed() -> dict:
    return json.loads((REPO / "docs" / "results" / "replay_near-best.json").read_text())


@pytest.mark.parametrize("table", sorted(p.name for p in (REPO / "docs" / "results" / "replay").glob("*.jsonl.gz")))
def test_the_replays_figures_are_those_of_the_recorded_table_and_its_methods(table: str) -> None:
    # the table is appended to, never rewritten: the pool's figures are those of its first recipes,
    # and the aims are what the methods' figures give
    import replay

    saved = json.loads(replay.results_path(replay.TABLES / table).read_text())
    header, recipes = replay.read_pool(replay.TABLES / table)
    assert {k: header.get(k) for k in saved["table"]} == saved["table"]
    used = recipes[:saved["pool"]["recipes"]]
    assert saved["top_target"] == replay.top_target(used)
    targets = [float(t) for t in saved["pool"]["targets"]]
    figures = replay.pool_figures(used, targets)  # rank statistics: equal to rounding on any CPU
    assert figures["recipes"] == saved["pool"]["recipes"] and figures["targets"] == saved["pool"]["targets"]
    assert figures["rank"] == {rung: pytest.approx(r, rel=1e-9) for rung, r in saved["pool"]["rank"].items()}
    assert replay.aims(saved) == saved["aims"]


def test_the_readme_gives_the_default_searchs_replayed_time_against_its_best_peer() -> None:
    saved = _replayed()
    a, key = saved["aims"], f"to_{saved['top_target']:g}"
    default, peer = (saved["methods"][m][key]["median_s"] for m in (a["default"], a["best_peer"]))
    text = _prose(REPO / "README.md")
    first_command = text.index("tianfeng search --space large_batch.yaml")
    against = ("where no peer's median run reached it within the budget" if peer >= saved["budget_s"]
               else f"against {peer:.0f} s for the best peer")
    quote = (f"reached the pool's top-5% score in a median {default:.0f} s of a "
             f"{saved['budget_s'] / 60:g}-minute budget on {saved['cores']} cores, {against}")
    assert quote in text[first_command:first_command + 1500], f"the README's first command is not followed by {quote!r}"
    assert "the default search for one best recipe (`--objective accuracy`" in text[first_command:first_command + 1500]


def test_the_promote_help_quotes_the_replays_figures() -> None:
    """The figures `tianfeng search --help` gives for each promotion mode are the replay's: a
    replay that changes them fails here until the help says what the results file says."""
    import dataclasses

    from tianfeng.hpo.options import SearchOptions
    from tianfeng.options import flag_of

    saved = _replayed()
    help_text = flag_of(next(f for f in dataclasses.fields(SearchOptions) if f.name == "promote")).help
    key = f"to_{saved['top_target']:g}"
    times = {mode: saved["methods"][f"lowres-{mode}"][key]["median_s"] for mode in ("balanced", "leader", "best")}
    assert (f"{saved['pool']['recipes']} recorded cifar5-dev recipes ({saved['date']})" in help_text
            and f"{times['leader']:.0f} s with leader, {times['balanced']:.0f} s with balanced, "
                f"{times['best']:.0f} s with none" in help_text)


def test_the_fidelity_help_quotes_the_replays_figures() -> None:
    import dataclasses

    from tianfeng.hpo.options import SearchOptions
    from tianfeng.options import flag_of

    saved = _replayed()
    help_text = flag_of(next(f for f in dataclasses.fields(SearchOptions) if f.name == "fidelity")).help
    key = f"to_{saved['top_target']:g}"
    median = {m: saved["methods"][m][key]["median_s"] for m in ("lowres-leader", "proxy-leader", "tianfeng-target")}
    assert f"{median['lowres-leader']:.0f} s at lowres_half" in help_text
    assert f"{median['proxy-leader']:.0f} s at proxy" in help_text
    # target: reached past the budget in most seeds (the replay runs it on to its horizon)
    target = saved["methods"]["tianfeng-target"][key]
    assert (f"{median['tianfeng-target']:.0f} s over the whole run's epochs" in help_text
            and f"within the {saved['budget_s']:.0f} s budget in {target['reached_by_budget']} of "
                f"{saved['methods']['tianfeng-target']['seeds']} seeds" in help_text)
