"""The parts of the docs made from the code and from the results files, written into the Markdown
so that a page reads the same on disk, on a forge and on the site. A part sits between two
comment lines, which this script keeps and fills:

    <!-- generated: NAME -->
    ...
    <!-- end generated: NAME -->

    cli                every command's usage, description and options (argparse)
    run-config         every run-config key: type or allowed values, default, bounds, comment
    space              the keys and names a search-space file may use
    published-records  the wall-time model against published records (its results file)
    whole-run-share    how many random recipes trained whole reach each target (its results file)
    test-suite         the suite's counts and minutes (its results file)
    first-hour         a fresh clone's set-up, README and tutorial, timed (its results file; -table too)
    lcbench            the search methods on the LCBench surrogate (its results file)
    time-to-target-costly  time to near-best targets where whole runs are dear (its kept results)
    replay             searches replayed on the recorded pool, and the default's aims (its results file)
    default-edge       the README's sentence on the default's replayed edge (the replay's results file)
    replay-modes       each search mode's replayed figures, for the how-to (the replay's results file)
    readme-claims      the README's selected results (the results files above)

    python scripts/generate_docs.py           # write every part again
    python scripts/generate_docs.py --check   # exit 1 naming the pages whose parts are stale

A test runs the check, so a changed option, key or results file fails the suite until the pages
are written again.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import json
import re
import sys
import typing
from functools import partial
from pathlib import Path
from typing import Any, Literal

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
PART = re.compile(r"^<!-- generated: ([a-z0-9-]+) -->\n(.*?)^<!-- end generated: \1 -->$", re.M | re.S)
PAGES = ("README.md", "docs")


def _cell(text: str) -> str:
    """Text for a table cell: `<name>` and pipes shown as written, on one line."""
    return text.replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|").replace("\n", " ")


# --- the command line ------------------------------------------------------------------------

def _option_row(action: argparse.Action) -> str:
    names = ", ".join(f"`{s}`" for s in action.option_strings) or f"`{action.metavar or action.dest}`"
    if action.nargs == 0:
        takes = ""
    else:
        takes = f"`{action.metavar or action.dest.upper()}`"
        if action.choices:
            takes = " \\| ".join(f"`{c}`" for c in action.choices)
    default = action.default
    shown = "" if default in (None, False, argparse.SUPPRESS) or action.nargs == 0 else f"`{default}`"
    return f"| {names} | {takes} | {shown} | {_cell(action.help or '')} |"


def cli_reference() -> str:
    from tianfeng.cli import build_parser

    parser = build_parser()
    out = [f"`tianfeng [--debug] COMMAND ...`: {parser.description}", ""]
    for name, sub in parser.commands.items():
        out += [f"## `tianfeng {name}`", "", "```", sub.format_usage().removeprefix("usage: ").strip(), "```", ""]
        if sub.description:
            out += [sub.description, ""]
        actions = [a for a in sub._actions if not isinstance(a, argparse._HelpAction)]
        if actions:
            out += ["| option | takes | default | what |", "| --- | --- | --- | --- |"]
            out += [_option_row(a) for a in actions]
            out.append("")
    return "\n".join(out)


# --- the run config --------------------------------------------------------------------------

def _comments(cls: type) -> dict[str, str]:
    """The comment lines above a field and the one beside it, joined, by field name."""
    lines, _ = inspect.getsourcelines(cls)
    found: dict[str, str] = {}
    above: list[str] = []
    for line in lines[1:]:
        stripped = line.strip()
        if stripped.startswith("#"):
            above.append(stripped.lstrip("# "))
            continue
        field = re.match(r"(\w+)\s*:", stripped)
        if field and not stripped.startswith(("def ", "class ", "@")):
            beside = line.split("  # ", 1)[1].strip() if "  # " in line else ""
            found[field.group(1)] = " ".join([*above, beside]).strip()
        above = []
    return found


def _type_text(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin is Literal:
        return " \\| ".join(f"`{v}`" for v in typing.get_args(hint))
    if origin in (typing.Union, __import__("types").UnionType):
        return " or ".join(_type_text(a) for a in typing.get_args(hint))
    if origin is tuple:
        return f"list of {_type_text(typing.get_args(hint)[0])}"
    if hint is type(None):
        return "`null`"
    return getattr(hint, "__name__", str(hint)).replace("Kwargs", "mapping")


def _default_text(field: dataclasses.Field) -> str:
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return "required"
    if dataclasses.is_dataclass(value):
        return ""
    if isinstance(value, tuple) and value and dataclasses.is_dataclass(value[0]):
        return "; ".join(", ".join(f"{k}: {v}" for k, v in dataclasses.asdict(p).items()) for p in value)
    if value is None:
        return "`null`"
    return '`""`' if value == "" else f"`{value}`"


def _bounds_text(field: dataclasses.Field) -> str:
    words = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}
    return ", ".join(f"{words[k]} {v}" for k, v in field.metadata.items() if v is not None)


def _config_rows(cls: type, prefix: str) -> list[str]:
    hints = typing.get_type_hints(cls)
    comments = _comments(cls)
    rows: list[str] = []
    nested: list[tuple[type, str]] = []
    for field in dataclasses.fields(cls):
        hint = hints[field.name]
        key = f"{prefix}{field.name}"
        inner = typing.get_args(hint)[0] if typing.get_origin(hint) is tuple else hint
        if dataclasses.is_dataclass(inner):
            nested.append((inner, f"{key}.N." if inner is not hint else f"{key}."))
            if inner is hint:
                continue
        rows.append(f"| `{key}` | {_type_text(hint)} | {_cell(_default_text(field))} | {_bounds_text(field)} | "
                    f"{_cell(comments.get(field.name, ''))} |")
    for inner, inner_prefix in nested:
        rows += _config_rows(inner, inner_prefix)
    return rows


def run_config_reference() -> str:
    from tianfeng.core.run_config import RunConfig

    return "\n".join(["| key | type or values | default | bounds | what |", "| --- | --- | --- | --- | --- |",
                      *_config_rows(RunConfig, "")])


# --- the search-space file -------------------------------------------------------------------

def _parameter_keys() -> dict[str, tuple[str, ...]]:
    """The keys each parameter type allows, read from the parser's own table."""
    from tianfeng.hpo.space import read as space

    source = inspect.getsource(space)
    table = re.search(r"allowed = (\{\"float\".*?\})\[kind\]", source, re.S).group(1)
    return ast.literal_eval(table)


def space_reference() -> str:
    from tianfeng.cost.cluster import KEYS as CLUSTER_KEYS
    from tianfeng.hpo.space.expressions import ALLOWED
    from tianfeng.hpo.space.read import CONSTANTS, PARAMETER_TYPES

    out = ["| parameter type | keys |", "| --- | --- |"]
    out += [f"| `{kind}` | {', '.join(f'`{k}`' for k in keys)} |" for kind, keys in _parameter_keys().items()
            if kind in PARAMETER_TYPES]
    out += ["", f"`cluster:` keys: {', '.join(f'`{k}`' for k in CLUSTER_KEYS)}.", "",
            f"Names every expression and range bound may read: {', '.join(f'`{c}`' for c in CONSTANTS)}.", "",
            f"Expressions allow {ALLOWED}."]
    return "\n".join(out)


# --- the results files -----------------------------------------------------------------------

def _results(name: str) -> dict:
    return json.loads((RESULTS / f"{name}.json").read_text())


def _measured(saved: dict) -> str:
    return f"measured {saved['date']} at commit {saved['commit']} on {saved['machine']}"


def published_records_table() -> str:
    from tianfeng.cost.walltime import format_seconds as _time

    saved = _results("published_records")
    out = ["| record | GPUs | per-GPU batch | published | predicted | LOO ratio |",
           "| --- | --- | --- | --- | --- | --- |"]
    out += [f"| {'check: ' if r['check'] else ''}{r['record']} | {r['gpus']} | {r['per_gpu_batch']} | "
            f"{_time(r['published_s'])} | "
            f"{_time(r['predicted_s'])} | {r['loo_ratio']:.2f} |" for r in saved["records"]]
    f, c = saved["sets"]["fitted"], saved["sets"]["check"]
    out += ["", f"Fitted rounds and papers: median {f['median']:.2f}, worst {f['worst']:.2f}x, "
                f"{f['within_1_25']} of {f['records']} within 1.25x. Check: median {c['median']:.2f}, worst "
                f"{c['worst']:.2f}x, {c['within_1_25']} of {c['records']} within 1.25x ({_measured(saved)})."]
    return "\n".join(out)


def whole_run_share_table() -> str:
    saved = _results("whole_run_share")
    out = ["| target (val top-1) | recipes that reached it | share | 95% interval |", "| --- | --- | --- | --- |"]
    out += [f"| {target} | {row['reached']} of {saved['recipes']} | {row['share']:.0%} | "
            f"{row['interval'][0]:.0%}-{row['interval'][1]:.0%} |" for target, row in saved["targets"].items()]
    out += ["", f"{saved['recipes']} random recipes trained whole on {saved['data']}, {saved['stopped']} of them "
                f"stopped by the engine for diverging or collapsing (counted as reaching nothing); median score "
                f"{saved['median']:.2f}, best {saved['best']:.2f}; a whole run's median cost "
                f"{saved['core_s_median'] / 60:.1f} core-minutes ({_measured(saved)})."]
    return "\n".join(out)


# the live runs of the removed screening mode, in the results log's kept tables
SCREEN_NAMES = {"tianfeng-screen": "screened search (`--fidelity screen --promote leader`)",
                "tianfeng-screen-balanced": "screened search, full runs at most half the time (`--promote balanced`)"}
LCBENCH_NAMES = {"tianfeng": "tianfeng's search (TPE, its ASHA rungs and the peer rule)",
                 "optuna-tpe+hyperband": "Optuna TPE + HyperbandPruner", "dehb": "DEHB",
                 "optuna-tpe": "Optuna TPE at full fidelity", "random": "random search at full fidelity",
                 "smac-hyperband": "SMAC3's multi-fidelity facade (Hyperband, random forest)",
                 "mobster": "Syne Tune MOBSTER (asynchronous successive halving, a Gaussian process proposing)",
                 "dyhpo": "Syne Tune DyHPO (a Gaussian process deciding each step: start a trial or resume one)",
                 "one-epoch-then-best": "one epoch of random recipes, then the best trained whole"}


def _final_regrets(saved: dict) -> dict[str, float]:
    """Each method's median regret at the whole budget, from an LCBench results file."""
    return {m: by[max(by, key=float)][1] for m, by in saved["methods"].items()}


def lcbench_table(name: str = "lcbench") -> str:
    saved = _results(name)
    fractions = list(next(iter(saved["methods"].values())))
    out = ["| method | " + " | ".join(f"at {float(f):g} of the budget" for f in fractions) + " |",
           "| --- | " + " | ".join("---" for _ in fractions) + " |"]
    out += [f"| {LCBENCH_NAMES.get(method, method)} | "
            + " | ".join(f"{q[1]:.3f} [{q[0]:.3f}, {q[2]:.3f}]" for q in by.values()) + " |"
            for method, by in saved["methods"].items()]
    out += ["", f"Normalised regret, median [quartiles] over {saved['tasks']} tasks x {saved['seeds']} seeds, a budget "
                f"of {saved['budget']:g} median full runs ({_measured(saved)})."]
    return "\n".join(out)


TTT_NAMES = {"tianfeng": "tianfeng's default proxy search by accuracy (`--objective accuracy`; then its best promoted)",
             "tianfeng-target": "tianfeng's search over the whole run's own epochs (`--fidelity target`, TPE and ASHA)",
             **SCREEN_NAMES,
             "optuna-tpe": "plain Optuna TPE at full fidelity",
             "tpe-hyperband": "Optuna TPE + HyperbandPruner at full fidelity",
             "ray-asha": "Ray Tune ASHA", "one-epoch": "one epoch of random recipes, then the best"}


def _at_once(results: list[dict]) -> str:
    counts = sorted({r.get("parallel", 1) for r in results})
    return "one method-seed at a time" if counts == [1] else f"{' or '.join(map(str, counts))} method-seeds at once"


def time_to_target_costly_table() -> str:
    """The costly setting's kept method-seeds, pooled: the benchmark's own summary and its
    per-seed ratios over plain TPE, with where and when each seed ran."""

    _import_benchmarks()
    import time_to_target as ttt
    from ttt_settings import TARGETS

    results = ttt.kept_results(RESULTS / "time_to_target_costly")
    targets = list(TARGETS["costly"])
    budget = results[0]["budget_s"]
    out = ["| method | seeds | " + " | ".join(f"time to {t:g}" for t in targets) + " | "
           + " | ".join(f"best at {f * budget / 60:g} min" for f in ttt.FRACTIONS) + " | core-hours |",
           "| --- " * (3 + len(targets) + len(ttt.FRACTIONS)) + "|"]
    out += ["| " + " | ".join([TTT_NAMES.get(row[0], row[0]), *row[1:]]) + " |" for row in ttt.summarise(results, targets)]
    out.append("")
    present = {r["method"] for r in results}
    for against in (a for a in ("optuna-tpe", "one-epoch") if a in present):  # plain TPE, then the best peer
        against_name = "plain TPE" if against == "optuna-tpe" else f"the best peer ({TTT_NAMES[against]})"
        out += [f"- {TTT_NAMES.get(method, method)} over {against_name}, to {target}: median {median} ({seeds})"
                for method, target, median, seeds in ttt.ratio_rows(results, targets, against)
                if against == "optuna-tpe" or method.startswith("tianfeng")]
    seeds = sorted({r["seed"] for r in results})
    out += ["", f"Median [min, max] over seeds {', '.join(map(str, seeds))}, a {budget / 60:g}-min budget per method "
                f"and seed, {_at_once(results)}; a seed that missed a target counts as later than the budget. "
                f"Measured {_where_and_when(results)}."]
    return "\n".join(out)


def _where_and_when(results: list[dict]) -> str:
    """When, at which commits and on which machine time_to_target's `results` ran: one clause per
    machine, its dates as a range and its commits listed once."""
    import datetime

    by_machine: dict[str, list[tuple[str, str]]] = {}
    for r in results:
        where = f"{r.get('hardware') or str(r['cores']) + ' cores'} (host {r['machine']})"
        day = datetime.datetime.fromtimestamp(r["started"], datetime.UTC).date().isoformat()
        by_machine.setdefault(where, []).append((day, r.get("commit", "unrecorded")))
    clauses = []
    for where, runs in sorted(by_machine.items()):
        days = sorted({d for d, _ in runs})
        commits = list(dict.fromkeys(c for _, c in sorted(runs)))
        span = days[0] if len(days) == 1 else f"{days[0]} to {days[-1]}"
        clauses.append(f"{span} at commit{'s' if len(commits) > 1 else ''} {', '.join(commits)} on {where}")
    return "; ".join(clauses)


def _import_benchmarks() -> None:
    for folder in (ROOT / "benchmarks", ROOT / "benchmarks" / "search"):
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))


REPLAY_ANCHOR = "replayed-searches-on-a-recorded-pool"


def readme_claims() -> str:
    records, replayed = _results("published_records"), _results("replay_near-best")
    f, c = records["sets"]["fitted"], records["sets"]["check"]
    gpus = [int(r["gpus"].split()[0]) for r in records["records"]]
    pool = replayed["pool"]
    reached = sorted((float(t), round(share * pool["recipes"])) for t, share in pool["targets"].items())
    ladder = ", ".join(f"{n} {'reaches' if n == 1 else 'reach'} {t:g}" for t, n in reached)
    rung = _search_rung()
    proxy = pool["rank"][rung]
    lcbench = _results("lcbench")
    median = _final_regrets(lcbench)
    model_based = _results("lcbench_model_based")
    with_gps = _final_regrets(model_based)
    best_peer = min((m for m in median if m != "tianfeng"), key=median.get)
    gp_peers = " and ".join(f"{with_gps[m]:.3f}" for m in ("mobster", "dyhpo"))
    return "\n".join([
        f"- On the LCBench surrogate ({lcbench['tasks']} tasks x {lcbench['seeds']} seeds) tianfeng's search "
        f"ends at a median normalised regret of {median['tianfeng']:.3f}; the best of {len(median) - 1} peers, "
        f"{LCBENCH_NAMES.get(best_peer, best_peer).split(' (')[0]}, at {median[best_peer]:.3f} "
        f"({_linked(lcbench, 'search-methods-on-the-lcbench-surrogate')}); on {model_based['tasks']} x "
        f"{model_based['seeds']} seeds, {with_gps['tianfeng']:.3f} against {gp_peers} for Syne Tune's MOBSTER and "
        f"DyHPO ({_linked(model_based, 'search-methods-on-the-lcbench-surrogate')}).",
        f"- The wall-time model on {f['records']} published ResNet-50 records ({min(gpus):,} to {max(gpus):,} GPUs): "
        f"a median {f['median']:.2f}x of their times (worst {f['worst']:.2f}x), and a median {c['median']:.2f}x "
        f"(worst {c['worst']:.2f}x) on {c['records']} records of MLPerf rounds kept out of the fit "
        f"({_linked(records, 'published-records', commit_word=True)}).",
        f"- Near-best recipes are rare, and proxies rank them: of {pool['recipes']} recorded `large_batch.yaml` recipes "
        f"trained whole on cifar5-dev, {ladder} val top-1; their runs at the search's rung (`{rung}`) rank them as "
        f"the whole runs do with Spearman {proxy['spearman']:.2f}, at {proxy['cost_share'] * 100:.0f}% of a whole "
        "run's cost "
        f"({_linked(replayed, REPLAY_ANCHOR)}).",
    ])


def _search_rung() -> str:
    """The shipped large_batch.yaml's search rung, the one the README's claims are about."""
    from tianfeng.hpo.space.read import load_space

    return load_space(ROOT / "search_spaces" / "large_batch.yaml").search_fidelity


def _linked(saved: dict, anchor: str, *, commit_word: bool = False) -> str:
    """A claim's provenance as a link to the results page: its date and commit (the machine is there)."""
    commit = saved["commit"].removesuffix("+changes")
    return f"[{saved['date']}, {'commit ' if commit_word else ''}{commit}](docs/results.md#{anchor})"


def _seed_counts(first: int, second: int) -> str:
    return f"{first} seeds each" if first == second else f"{first} and {second} seeds"


def _replay_methods() -> tuple[dict, dict]:
    """The replay's results file and its methods' descriptions."""
    _import_benchmarks()
    from replay import DESCRIBED

    return _results("replay_near-best"), DESCRIBED


def replay_table() -> str:
    """The replay's figures: the pool's own (how each rung ranks recipes, what it costs), then
    every method's time to the pool's top-5% target and best score through the budget, and the
    default's aims."""
    saved, described = _replay_methods()
    pool, top, table = saved["pool"], saved["top_target"], saved["table"]
    out = [f"{pool['recipes']} recipes of `large_batch.yaml` on cifar5-dev (recorded from {table['date']}, commit "
           f"{table['commit']}, on {table['machine']}); {pool['targets'][f'{top:g}'] * 100:.0f}% of them reach the "
           f"top-5% target, {top:.2f}.", "",
           "| rung | Spearman | Kendall | cost, share of the whole run |", "| --- | ---: | ---: | ---: |"]
    out += [f"| `{rung}` | {r['spearman']:.2f} | {r['kendall']:.2f} | {r['cost_share']:.3f} |"
            for rung, r in pool["rank"].items()]
    seeds = next(iter(saved["methods"].values()))["seeds"]
    out += ["", f"| method | time to {top:.2f} (s) [95%] | the default's over it, seed by seed [95%] | reached by the "
                "budget | best at 1/4 | 1/2 | 3/4 | the budget | trials | moved |",
            "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for method, m in saved["methods"].items():
        t = m[f"to_{top:g}"]
        out.append(f"| {described.get(method, method)} | {t['median_s']:.0f} [{t['interval'][0]:.0f}, "
                   f"{t['interval'][1]:.0f}] | {_paired(saved, method)} | {t['reached_by_budget']}/{m['seeds']} | "
                   + " | ".join(f"{m[f'best_at_{f}']['median']:.2f}" for f in ("0.25", "0.5", "0.75", "1"))
                   + f" | {m['trials_median']:g} | {m['moved_median']:.2f} |")
    a = saved.get("aims")
    out.append("")
    if a:
        peer = described.get(a["best_peer"], a["best_peer"])
        bound = " (at most: that peer's median is its horizon)" if a["best_peer_censored"] else ""
        out.append(f"The default's median time to {top:.2f} is {a['over_best_peer']:.2f} of the best peer's, {peer}"
                   f"{bound}: the aim of at most 1/2 is {'met' if a['over_best_peer_met'] else 'not met'}. It is "
                   f"{'at most ' if a['tpe_censored'] else ''}{a['over_tpe']:.2f} of plain TPE's: the aim of at most 1/3 is "
                   f"{'met' if a['over_tpe_met'] else 'not met'}. Its median best is the highest of all methods at "
                   + _fractions([f for f, v in a["highest_at"].items() if v]) + ".")
    out += ["", _paired_sentence(saved, described)]
    spent = [described.get(m, m) for m, f in saved["methods"].items() if f["pool_spent"] > seeds / 10]
    if spent:
        out += ["", f"The pool ran out of recipes in more than a tenth of the seeds of: {'; '.join(spent)}."]
    gap = saved.get("spacing")
    sparse = (f" In these {gap['coordinates']} coordinates the pool's recipes lie a median "
              f"{gap['recipe_to_nearest']:.2f} from their nearest neighbour, and a random proposal "
              f"{gap['random_proposal_to_nearest']:.2f} from its nearest recipe: a proposal lands on a recipe about "
              "as far away as the recipes are from each other, which a larger pool narrows.") if gap else ""
    horizon = max(m["horizon_s"] for m in saved["methods"].values())
    if horizon > saved["budget_s"]:
        out += ["", f"Time to {top:.2f}: a method whose rules do not depend on the budget (all but those that search "
                    f"half of it, then train the best whole) was replayed on to {horizon:g} s, the same run through "
                    "the budget, so that a time past the budget is when it reached the target, not the budget; a run "
                    "that never reached it counts as its horizon. The best scores are the budget's."]
    out += ["", "Moved: the median distance from a proposal to the recipe it became, in the space's normalised "
                f"coordinates (each parameter in [0, 1], a categorical choice 0.71 from another).{sparse}",
            "", f"Medians of {seeds} seeds per method, a budget of {saved['budget_s']:g} s on {saved['cores']} cores, "
                f"bootstrap 95% intervals; {_measured(saved)}: `python benchmarks/search/replay.py --seeds {seeds} "
                "--results`."]
    return "\n".join(out)


SECOND_TABLE = "replay_near-best-xeon-bf16"  # the same draw recorded on a second kind of machine


def replay_second_table() -> str:
    """The replay on the second kind of machine's table: how its recipes agree with the first
    table's, what its rungs cost there, every method's time to its top-5% target and best scores,
    the default's aims, and the live runs held against the replay's bands."""
    saved, described = _results(SECOND_TABLE), _replay_methods()[1]
    pool, top, table, b = saved["pool"], saved["top_target"], saved["table"], saved["beside"]
    costs = ", ".join(f"`{rung}` {ratio:.2f}" for rung, ratio in b["cost_ratio"].items())
    out = [f"{pool['recipes']} recipes recorded from {table['date']} (commit {table['commit']}) on {table['machine']}, "
           f"training in {table['cpu_precision']}. The {b['recipes']} recipes both tables hold score alike: their "
           f"whole runs rank with Spearman {b['whole_spearman']:.2f}, a median {b['whole_abs_difference']:.2f} points "
           f"apart. A recipe's CPU seconds here over there, median per rung: {costs}. The top-5% target here is "
           f"{top:.2f}.", "",
           "| method | time to target (s) [95%] | the default's over it, seed by seed [95%] | reached by the budget "
           "| best at 1/4 | 1/2 | 3/4 | the budget |",
           "| --- | --- | --- | --- | ---: | ---: | ---: | ---: |"]
    for method, m in saved["methods"].items():
        t = m[f"to_{top:g}"]
        out.append(f"| {described.get(method, method).split(':')[0]} | {t['median_s']:.0f} [{t['interval'][0]:.0f}, "
                   f"{t['interval'][1]:.0f}] | {_paired(saved, method)} | {t['reached_by_budget']}/{m['seeds']} | "
                   + " | ".join(_best(m[f"best_at_{f}"]["median"]) for f in ("0.25", "0.5", "0.75", "1")) + " |")
    a = saved.get("aims")
    if a:
        bound = "at most " if a["best_peer_censored"] else ""
        out += ["", f"Here the default's median time is {bound}{a['over_best_peer']:.2f} of the best peer's "
                    f"({_sentence_case(described[a['best_peer']].split(':')[0])}; aim at most 1/2: "
                    f"{'met' if a['over_best_peer_met'] else 'not met'}) and {'at most ' if a['tpe_censored'] else ''}"
                    f"{a['over_tpe']:.2f} of plain TPE's (aim at most 1/3: {'met' if a['over_tpe_met'] else 'not met'}); "
                    "its median best is the highest at " + _fractions([f for f, v in a["highest_at"].items() if v]) + ".",
                "", _paired_sentence(saved, described)]
    live = saved.get("live")
    if live:
        at = next(iter(saved["methods"].values()))["best_at_live"]["at_s"]
        times, bests = (sum(r[k] for r in live) for k in ("time_inside", "best_inside"))
        above = sum(r["best"] > saved["pool_best"] for r in live)
        minutes = sorted({f"{r['budget_s'] / 60:g}" for r in live})
        out += ["", f"Live runs of {' and '.join(minutes)} minutes on this kind of machine, each held against the "
                    f"replay's 10-90% band of the same method at {at:g} s: {times} of {len(live)} times to the "
                    f"target inside, {bests} of {len(live)} best scores"
                    + (f"; {above} live best {'score is' if above == 1 else 'scores are'} above the best recipe "
                       f"the pool holds yet ({saved['pool_best']:.2f}), which no replay can reach" if above else "")
                    + ".", "",
                f"| live run | time to target (s) | replay's band | best by {at:g} s | replay's band |",
                "| --- | ---: | --- | ---: | --- |"]
        for r in live:
            t = r["time_to_target"]
            reached = "not reached" if t is None else f"{t:.0f}" if t <= at else f"{t:.0f} (after {at:g})"
            mark = {True: "", False: " (outside)"}
            out.append(f"| {r['run']} | {reached}{mark[r['time_inside']]} | {r['time_band'][0]:.0f} to "
                       f"{r['time_band'][1]:.0f} | {r['best']:.2f}{mark[r['best_inside']]} | {r['best_band'][0]:.2f} to "
                       f"{r['best_band'][1]:.2f} |")
    seeds = next(iter(saved["methods"].values()))["seeds"]
    out += ["", f"Medians of {seeds} seeds per method, a budget of {saved['budget_s']:g} s on {saved['cores']} cores, "
                f"bootstrap 95% intervals; {_measured(saved)}: `python benchmarks/search/replay.py --pool "
                f"docs/results/replay/{SECOND_TABLE.removeprefix('replay_')}.jsonl.gz --beside "
                f"docs/results/replay/near-best.jsonl.gz --budget {saved['budget_s']:g} --seeds {seeds}"
                + (f" --live docs/results/time_to_target_xeon --live-at {at:g}" if live else "") + " --results`."]
    return "\n".join(out)


def _paired(saved: dict, method: str) -> str:
    """The default's time over `method`'s, seed by seed: the median ratio, its interval, and in
    how many seeds the default was faster and slower."""
    if method == saved["aims"]["default"]:
        return "(the default)"
    p = saved["paired"][method]
    bound = f"; a bound in {p['censored']}" if p["censored"] else ""
    return f"{_ratio(p)}; faster in {p['faster']}, slower in {p['slower']}{bound}"


def _ratio(paired: dict) -> str:
    """A seed-by-seed comparison's median ratio and its interval: "0.61 [0.55, 0.65]"."""
    return f"{paired['median_ratio']:.2f} [{paired['interval'][0]:.2f}, {paired['interval'][1]:.2f}]"


def _paired_sentence(saved: dict, described: dict) -> str:
    """Which methods the default is faster than seed by seed (the interval of the median ratio
    below 1), which faster than it (above 1), and which it is not told apart from."""
    groups: dict[str, list[str]] = {"faster": [], "slower": [], "level": []}
    for method, p in saved["paired"].items():
        low, high = p["interval"]
        groups["faster" if high < 1 else "slower" if low > 1 else "level"].append(
            described.get(method, method).split(":")[0])
    parts = [f"faster than {len(groups['faster'])} of the {len(saved['paired'])} other methods"]
    if groups["slower"]:
        parts.append(f"slower than {'; '.join(groups['slower'])}")
    if groups["level"]:
        parts.append(f"not told apart from {'; '.join(groups['level'])}")
    return ("Seed by seed (each seed gives every method the same sampler seeds), the default's time to the target "
            "is, by the 95% interval of the median ratio, " + ", ".join(parts) + ". A seed where either run missed "
            "the target by its horizon gives a bound, not a ratio.")


def _modes() -> tuple[str, ...]:
    from replay import MODES

    return MODES


def _fractions(found: list[str]) -> str:
    names = {"0.25": "1/4", "0.5": "1/2", "0.75": "3/4", "1": "the whole budget"}
    return ", ".join(names[f] for f in found) if found else "no fraction of the budget"


def replay_modes() -> str:
    """The how-to's list of the search's modes with their replayed figures: time to the pool's
    top-5% score and the best score at a quarter and at the end of the budget."""
    saved, described = _replay_methods()
    top = saved["top_target"]
    out = [f"Replayed on {saved['pool']['recipes']} recorded cifar5-dev recipes (medians of "
           f"{saved['methods'][saved['aims']['default']]['seeds']} seeds, a {saved['budget_s'] / 60:g}-minute budget "
           f"on {saved['cores']} cores, {_linked(saved, REPLAY_ANCHOR).replace('docs/', '../')}), to the pool's "
           f"top-5% score ({top:.2f}), and the best whole-run score at a quarter of the budget and at its end:", ""]
    for method, m in saved["methods"].items():
        if method != saved["aims"]["default"] and method not in _modes():
            continue
        t = m[f"to_{top:g}"]
        spent = " (the pool ran out in some seeds: a larger pool may change it)" if m["pool_spent"] > m["seeds"] / 10 else ""
        out.append(f"- {described[method]}: {t['median_s']:.0f} s [{t['interval'][0]:.0f}, {t['interval'][1]:.0f}], "
                   f"reached in {t['reached_by_budget']} of {m['seeds']} seeds; best {_best(m['best_at_0.25']['median'])} and "
                   f"{_best(m['best_at_1']['median'])}{spent}")
    peer = saved["aims"]["best_peer"]
    t = saved["methods"][peer][f"to_{top:g}"]
    out.append(f"- the best peer, {_sentence_case(described[peer])}: {t['median_s']:.0f} s, reached in "
               f"{t['reached_by_budget']} of {saved['methods'][peer]['seeds']} seeds")
    return "\n".join(out)


def _sentence_case(text: str) -> str:
    """`text` to follow a comma: its first letter lowered, unless it starts an acronym (ASHA, TPE)."""
    return text if text[1:2].isupper() else text[:1].lower() + text[1:]


def _best(score: float) -> str:
    return f"{score:.2f}" if score else "none yet"


def default_edge() -> str:
    """The README's sentence under its first command: the default search's replayed time to the
    pool's top-5% target against the best peer's, and the fastest of the search's other modes."""
    saved, described = _replay_methods()
    a, top = saved["aims"], saved["top_target"]
    key = f"to_{top:g}"
    time_of = {m: f[key]["median_s"] for m, f in saved["methods"].items()}
    modes = [m for m in time_of if m in _modes()]
    fastest = min(modes, key=time_of.get)
    seeds = saved["methods"][a["default"]]["seeds"]
    peer = described[a["best_peer"]]
    peer = _sentence_case(peer)
    reached = saved["methods"][a["best_peer"]][key]["reached"]
    against = (f"where no peer's median run reached it within the budget (the best, {peer}, in {reached} of {seeds})"
               if a["best_peer_censored"] else f"against {time_of[a['best_peer']]:.0f} s for the best peer ({peer})")
    p = saved["paired"][a["best_peer"]]
    against += f"; seed by seed, a median {_ratio(p)} of that peer's time, faster in {p['faster']} of {seeds} seeds"
    mode = (f"; the fastest mode, {described[fastest].split(':')[0]}, took {time_of[fastest]:.0f} s"
            if time_of[fastest] < time_of[a["default"]] else "")
    return (f"Replayed {seeds} times on {saved['pool']['recipes']} recorded cifar5-dev recipes, the default search "
            "for one best recipe (`--objective accuracy`: `lowres_half` proxies, each new leader trained whole as "
            f"`--promote auto` has it) reached the pool's top-5% score in a median {time_of[a['default']]:.0f} s of a "
            f"{saved['budget_s'] / 60:g}-minute budget on {saved['cores']} cores, {against}{mode} "
            f"({_linked(saved, REPLAY_ANCHOR)}).")


def test_suite_sentence() -> str:
    saved = _results("test_suite")
    parts = saved["parts"]
    shown = {"quick": "the tests not marked slow", "all": "every test"}[saved["selection"]]
    return (f"`scripts/test.sh` ({shown}) ran {saved['tests']} tests in {saved['minutes']:.1f} min: "
            f"{parts['parallel']['tests']} in parallel in {parts['parallel']['seconds'] / 60:.1f} min, then "
            f"{parts['alone']['tests']} alone in {parts['alone']['seconds'] / 60:.1f} min, {saved['failed']} "
            f"failed ({_measured(saved)}).")


def _first_hour_parts(saved: dict) -> dict[str, float]:
    """Seconds of the first hour by kind of step: the set-up, the searches, the promotions."""
    parts = {"setup": 0.0, "search": 0.0, "promote": 0.0, "other": 0.0}
    for step in saved["steps"]:
        words = step["step"].split()
        kind = "setup" if words[0] == "bash" else words[1] if words[1] in parts else "other"
        parts[kind] += step["seconds"]
    return parts


def first_hour_sentence() -> str:
    saved = _results("first_hour")
    parts = _first_hour_parts(saved)
    return (f"On {saved['machine']}, a fresh clone's `setup.sh`, then the commands of this page and the tutorial's, "
            f"took {saved['total_s'] / 60:.1f} min: {parts['setup'] / 60:.1f} to install, "
            f"{parts['search'] / 60:.1f} searching, {parts['promote'] / 60:.1f} promoting "
            f"({_linked(saved, 'the-first-hour')}).")


def first_hour_table() -> str:
    saved = _results("first_hour")
    rows = ["| step | wall | share |", "| --- | ---: | ---: |"]
    rows += [f"| `{_cell(s['step'])}` | {s['seconds']:.1f} s | {s['seconds'] / saved['total_s']:.2f} |"
             for s in saved["steps"]]
    return "\n".join([*rows, "", f"Total {saved['total_s'] / 60:.1f} min, {_measured(saved)}: "
                       "`python benchmarks/platform/first_hour.py --results`, alone on the machine, with empty tianfeng "
                       "and kernel caches and pip's cache warm."])


def call_paths_table() -> str:
    saved = _results("call_paths")
    rows = ["| path | stops (files) on the stack | climbs | functions (files) entered on the way | space file "
            "reads | run configs built from dicts |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    rows += [f"| `{p['from']}` to `{p['to']}` | {p['stops']} ({p['files']}) | {p['climbs']} | {p['called']} "
             f"({p['called_files']}) | {p['space_reads']} | {p['configs_built']} |" for p in saved["paths"]]
    measured = _measured(saved)
    return "\n".join([*rows, "", f"{measured[0].upper()}{measured[1:]}: `python scripts/call_paths.py --results` "
                       "(it prints each stop)."])


GENERATORS = {"cli": cli_reference, "call-paths": call_paths_table, "run-config": run_config_reference, "space": space_reference,
              "first-hour": first_hour_sentence, "first-hour-table": first_hour_table,
              "published-records": published_records_table, "whole-run-share": whole_run_share_table,
              "test-suite": test_suite_sentence, "readme-claims": readme_claims, "default-edge": default_edge,
              "replay": replay_table, "replay-modes": replay_modes, "replay-second": replay_second_table,
              # each LCBench part is the table of the results file of its name
              **{part: partial(lcbench_table, part.replace("-", "_"))
                 for part in ("lcbench", "lcbench-model-based")},
              "time-to-target-costly": time_to_target_costly_table}


def refresh(markdown: str) -> str:
    """The page with every generated part made again from the code and the results files."""
    def fill(m: re.Match) -> str:
        name = m.group(1)
        if name not in GENERATORS:
            raise SystemExit(f"generate_docs: unknown part {name!r}; known: {', '.join(GENERATORS)}")
        return f"<!-- generated: {name} -->\n{GENERATORS[name]().rstrip()}\n<!-- end generated: {name} -->"
    return PART.sub(fill, markdown)


def pages() -> list[Path]:
    out: list[Path] = []
    for name in PAGES:
        path = ROOT / name
        out += sorted(path.rglob("*.md")) if path.is_dir() else [path]
    return out


def stale() -> list[Path]:
    """The pages whose generated parts differ from what the code and results files give now."""
    return [p for p in pages() if refresh(p.read_text()) != p.read_text()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 naming the stale pages")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.check:
        if found := stale():
            names = ", ".join(str(p.relative_to(ROOT)) for p in found)
            raise SystemExit(f"generate_docs: stale generated parts in {names}: run python scripts/generate_docs.py")
        return
    for page in pages():
        text = page.read_text()
        if (new := refresh(text)) != text:
            page.write_text(new)
            print(f"wrote {page.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
