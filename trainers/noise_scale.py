"""The gradient noise scale B_simple = tr(Sigma) / |G|^2 (McCandlish et al. 2018, "An Empirical
Model of Large-Batch Training", appendix A): the batch size around which larger batches stop
buying proportionally fewer steps. Estimated from the squared norms of gradients averaged over
two batch sizes, which every DDP step already has (one rank's share and the global batch), or
one process gets from micro-batches.

With |g_B|^2 the squared norm of a gradient averaged over B examples, E|g_B|^2 = |G|^2 + tr(Sigma)/B,
so two batch sizes give unbiased estimates of both terms; their ratio is biased for few samples,
so the two terms are averaged (exponentially, over steps) before dividing, as the paper does."""

from __future__ import annotations

from dataclasses import dataclass


def unbiased_terms(small_sq: float, big_sq: float, b_small: int, b_big: int) -> tuple[float, float]:
    """(|G|^2, tr(Sigma)) from one pair of squared gradient norms at batch sizes b_small < b_big."""
    if not 0 < b_small < b_big:
        raise ValueError(f"need 0 < b_small < b_big, got {b_small}, {b_big}")
    g2 = (b_big * big_sq - b_small * small_sq) / (b_big - b_small)
    trace = (small_sq - big_sq) / (1 / b_small - 1 / b_big)
    return g2, trace


@dataclass
class NoiseScale:
    """Running estimate: each step adds one pair of squared norms; `value` is B_simple from the
    exponentially averaged terms (None until |G|^2 is positive)."""
    decay: float = 0.95  # the paper's smoothing of both terms over steps
    g2: float | None = None
    trace: float | None = None

    def update(self, small_sq: float, big_sq: float, b_small: int, b_big: int) -> None:
        g2, trace = unbiased_terms(small_sq, big_sq, b_small, b_big)
        if self.g2 is None:
            self.g2, self.trace = g2, trace
        else:
            self.g2 = self.decay * self.g2 + (1 - self.decay) * g2
            self.trace = self.decay * self.trace + (1 - self.decay) * trace

    @property
    def value(self) -> float | None:
        if self.g2 is None or self.g2 <= 0:
            return None
        return self.trace / self.g2
