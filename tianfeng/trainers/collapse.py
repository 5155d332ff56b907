"""A run that has collapsed: it learned, then fell back to a uniform guess and stayed there.

Large-batch recipes with a high peak learning rate can lose everything they learned at the end
of their warm-up: the training loss climbs back to ln(classes), the loss of a uniform guess, and
the validation accuracy to chance. A network there predicts alike for every input, and in the
runs recorded here the rest of the schedule trained it at chance to the end.
`engine.collapse_patience` epochs in that state end the run as diverged, so its GPUs (or a
search's budget) go to something else.

A run counts only after it once reached `LEARNED_POINTS` above chance (a run slow to leave
chance at its start is not collapsed), and only while both signs hold: a training loss no better
than a uniform guess and a validation accuracy at chance. A run whose loss falls below a uniform
guess again, or whose accuracy rises, is not stopped. On a validation set with unequal classes
a constant guess scores the largest class's share, above chance, and nothing is stopped."""

from __future__ import annotations

import math
from collections.abc import Sequence

from tianfeng.core.epoch_metrics import EpochMetrics

LEARNED_POINTS = 10.0  # top-1 points above chance that show the run had learned
AT_CHANCE_POINTS = 1.0  # top-1 within this of chance counts as chance
UNIFORM_LOSS_SHARE = 0.99  # a training loss at least this share of ln(classes) is no better than a uniform guess


def collapse_message(history: Sequence[EpochMetrics], classes: int, patience: int) -> str | None:
    """Why the run has collapsed (its last `patience` epochs at a uniform guess after it had
    learned), or None. `classes` fixes chance (100 / classes top-1) and a uniform guess's loss
    (ln classes, with or without label smoothing)."""
    if patience <= 0 or classes < 2 or len(history) <= patience:
        return None
    chance, uniform_loss = 100.0 / classes, math.log(classes)
    before, window = history[:-patience], history[-patience:]
    peak = max(before, key=lambda m: m.val_top1)
    if peak.val_top1 < chance + LEARNED_POINTS:
        return None
    if not all(m.val_top1 <= chance + AT_CHANCE_POINTS and m.train_loss >= UNIFORM_LOSS_SHARE * uniform_loss
               for m in window):
        return None
    return (f"collapsed to a uniform guess: val top-1 at chance ({chance:.4g}%) and a training loss no lower "
            f"than a uniform guess's (ln {classes} = {uniform_loss:.3f}) in epochs {window[0].epoch}-{window[-1].epoch}, after "
            f"{peak.val_top1:.2f}% at epoch {peak.epoch}; stopped instead of training on at chance "
            f"(engine.collapse_patience: {patience})")
