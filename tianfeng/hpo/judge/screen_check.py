"""Screening checked against the full runs it leads to.

A screening rung scores each recipe after its first N epochs (`stop_after_epochs`), and with
`--promote leader` each new leader by that score is trained whole. Whether N epochs rank recipes
as their full runs do depends on the problem: one epoch ranks cifar5-dev recipes well and
LCBench's 52-epoch curves poorly. The full runs of the promoted leaders carry the answer: their
own curves. Once two or more are whole, the screen's forecast of their ends (screen_forecast:
the score after N epochs plus what a run of that length gains) must rank their best as their
ends rank it. When it does not, and a longer screen (3N, 9N, ... epochs) would, the screen
lengthens to 3N, and leaders are chosen among the trials screened that long from then on
(shorter screens score lower and are not compared with longer ones). One step per full run that
disagrees, not at once to the length that agrees: a handful of full runs is thin evidence (one
short recipe that plateaus can misrank), and every step triples the cost of each later screen; a
disagreement that holds lengthens it again after the next full run. The length is a study
attribute, so every worker and a resumed search screen alike."""

from __future__ import annotations

import logging

import optuna
from optuna.trial import FrozenTrial

from tianfeng.hpo.judge.scores import maximizing
from tianfeng.hpo.judge.screen_forecast import forecast_end, gain_slope
from tianfeng.hpo.trial_attrs import TrialKey
from tianfeng.storage.study_attrs import StudyKey

log = logging.getLogger("tianfeng.promote")
SCREENED_ATTR = TrialKey.SCREENED_EPOCHS
GROWTH = 3  # each lengthening: ASHA's reduction factor, as the default pruner's rungs grow


def screen_length(study: optuna.Study, rung_epochs: int) -> int:
    """The epochs a new trial of a screening study trains: the rung's, or longer once the full
    runs have disagreed with it."""
    return int(study.user_attrs.get(StudyKey.SCREEN_EPOCHS, rung_epochs))


def screened_alike(trials: list[FrozenTrial], length: int) -> list[FrozenTrial]:
    """The trials screened for `length` epochs (a trial of a screen that never lengthened has
    no attribute: the rung's length)."""
    return [t for t in trials if int(t.user_attrs.get(SCREENED_ATTR, length)) == length]


def agreeing_length(curves: list[list[float]], start: int, maximize: bool) -> int:
    """The first of `start`, 3 x start, 9 x start, ... (shorter than the longest curve) after
    which the curves' best forecast end is the curve that ends best; the longest of them when
    none is. A curve no longer than a length counts with its last value."""
    sign = 1.0 if maximize else -1.0
    ends_best = max(range(len(curves)), key=lambda i: sign * curves[i][-1])
    longest = max(len(c) for c in curves)
    length, tried = start, start
    while length < longest:
        tried = length
        slope = gain_slope(curves, length)
        at = [forecast_end(c[min(length, len(c)) - 1], len(c), length, slope) for c in curves]
        if max(range(len(curves)), key=lambda i: sign * at[i]) == ends_best:
            return length
        length *= GROWTH
    return tried


def next_length(curves: list[list[float]], length: int, maximize: bool) -> int:
    """The screen's length after a full run: one step (x3) longer when the full runs' `curves`
    rank their best unlike their ends at `length` and a longer screen would, else `length`."""
    if len(curves) < 2 or agreeing_length(curves, length, maximize) == length:
        return length
    return length * GROWTH


def check_screen(study: optuna.Study, curves: list[list[float]], rung_epochs: int) -> int:
    """After a promoted run: lengthen the study's screen (next_length) when the full runs'
    `curves` (the metric after each epoch, one list per completed full run) rank their best
    unlike their ends at the current length. Returns the length from now on."""
    length = screen_length(study, rung_epochs)
    longer = next_length(curves, length, maximizing(study))
    if longer == length:
        return length
    study.set_user_attr(StudyKey.SCREEN_EPOCHS, longer)
    log.info("the full runs rank their best unlike their first %d epoch(s) do: screening %d epochs from now on "
             "(a screen that misranks early is where --fidelity target, searching the whole run, tends to pay)",
             length, longer)
    return longer
