"""The gradient noise scale estimator against a problem whose noise scale is known exactly:
least squares with Gaussian inputs and noise, at a point away from the optimum."""

from __future__ import annotations

import pytest
import torch

from trainers.noise_scale import NoiseScale, unbiased_terms


def test_b_simple_of_linear_regression_within_10_percent() -> None:
    # loss 0.5 (w.x - y)^2, x ~ N(0, I_d), y = w*.x + e, e ~ N(0, s^2): at w = w* + delta the
    # per-example gradient (delta.x - e) x has mean G = delta and
    # tr(Sigma) = E|g|^2 - |G|^2 = (d + 2)|delta|^2 + s^2 d - |delta|^2, so
    # B_simple = ((d + 1)|delta|^2 + s^2 d) / |delta|^2
    d, sigma = 20, 2.0
    gen = torch.Generator().manual_seed(0)
    w_star = torch.randn(d, generator=gen, dtype=torch.float64)
    delta = torch.randn(d, generator=gen, dtype=torch.float64) * 0.5
    w = w_star + delta
    expected = ((d + 1) * delta.dot(delta) + sigma**2 * d) / delta.dot(delta)

    def mean_gradient(batch: int) -> torch.Tensor:
        x = torch.randn(batch, d, generator=gen, dtype=torch.float64)
        y = x @ w_star + sigma * torch.randn(batch, generator=gen, dtype=torch.float64)
        return ((x @ w - y)[:, None] * x).mean(0)

    estimate = NoiseScale(decay=0.999)  # a long average: the test is about bias, not noise
    b_small, b_big = 32, 512  # e.g. one rank's share and the global batch of 16 ranks
    for _ in range(3000):
        big_examples = [mean_gradient(b_small) for _ in range(b_big // b_small)]
        small = big_examples[0]  # the small batch is a share of the big one, as on a DDP rank
        big = torch.stack(big_examples).mean(0)
        estimate.update(small.dot(small).item(), big.dot(big).item(), b_small, b_big)
    assert estimate.value == pytest.approx(expected.item(), rel=0.10)


def test_the_two_terms_are_unbiased_by_construction() -> None:
    # E|g_B|^2 = |G|^2 + tr/B exactly: feed the expectations, get the terms back
    g2, trace = 4.0, 300.0
    assert unbiased_terms(g2 + trace / 8, g2 + trace / 64, 8, 64) == pytest.approx((g2, trace))
    with pytest.raises(ValueError):
        unbiased_terms(1.0, 1.0, 64, 64)
    assert NoiseScale().value is None
