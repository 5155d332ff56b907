"""The scaling curve as a table on stdout, with the headline: the largest batch kept."""

from __future__ import annotations

from tianfeng.scaling.results import NAIVE_SCORED, ScalePoint
from tianfeng.scaling.study import largest_within
from tianfeng.terminal.tables import add_plain_row, plain_table, table_console


def fmt_value(value: float | None, spec: str = ".4g") -> str:
    return "-" if value is None else format(value, spec)


def describe(recipe: dict) -> str:
    """A recipe in one line: optimizer, peak LR, warm-up, trust coefficient, phases."""
    if not recipe:
        return "-"
    parts = [recipe["optimizer"], f"peak LR {recipe['peak_lr']:.3g}",
             f"warm-up {recipe['warmup_epochs']:.3g} ep {recipe['warmup_shape']}"]
    if "trust_coefficient" in recipe:
        parts.append(f"trust {recipe['trust_coefficient']:.3g}")
    parts.append("phases " + " ".join(f"{e}ep@{r}px" for e, r, _b in recipe["phases"]))
    return ", ".join(parts)


def headline(points: list[ScalePoint], tolerance: float, maximize: bool) -> list[str]:
    ref = points[0]
    searched = largest_within(points, tolerance, naive=False, maximize=maximize)
    naive = largest_within(points, tolerance, naive=True, maximize=maximize)
    trial_s = sum(p.trial_s for p in points)
    pruned_s = sum(p.pruned_s for p in points)
    noise = [p.noise_scale for p in points if p.noise_scale is not None]
    return [f"largest batch within {tolerance:g} of batch {ref.batch_size} ({fmt_value(ref.searched_value)}): "
            f"searched {searched if searched else '-'}, naive linear scaling {naive if naive else '-'}",
            "gradient noise scale B_simple (McCandlish et al. 2018; the batch around which larger ones stop "
            f"saving steps in proportion), at the winners: {', '.join(f'{v:.0f}' for v in noise) or '-'}"
            + (f" (median {sorted(noise)[len(noise) // 2]:.0f})" if noise else ""),
            f"wall time {sum(p.wall_s for p in points):.0f} s; {pruned_s / trial_s if trial_s else 0:.0%} "
            f"of trial time in pruned trials"]


def print_curve(points: list[ScalePoint], tolerance: float, metric: str, maximize: bool = True) -> None:
    table = plain_table(f"best {metric} against batch size",
                        ("batch", "steps/epoch", "searched", "naive", "noise scale", "trials (pruned)", "wall s",
                         "winning recipe"))
    for p in points:
        naive = fmt_value(p.naive_value) if p.naive_status in NAIVE_SCORED else p.naive_status
        add_plain_row(table, str(p.batch_size), str(p.steps_per_epoch), fmt_value(p.searched_value), naive,
                      fmt_value(p.noise_scale, ".0f"), f"{p.trials} ({p.pruned})", f"{p.wall_s:.0f}",
                      describe(p.searched_recipe))
    table_console().print(table)
    for line in headline(points, tolerance, maximize):
        print(line)
