"""The gradient noise scale estimator against a problem whose noise scale is known exactly:
least squares with Gaussian inputs and noise, at a point away from the optimum."""

from __future__ import annotations

import pytest
import torch

from tianfeng.trainers.noise_scale import NoiseScale, unbiased_terms


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


class _Linear(torch.nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(d, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w


def test_measured_backward_leaves_the_full_batch_gradient_and_estimates_the_analytic_scale() -> None:
    """The engine's two-half step: the accumulated gradient is the one-pass full-batch gradient,
    and averaged over steps it recovers the least-squares noise scale (within 10%)."""
    from tianfeng.core.run_config import PrecisionConfig
    from tianfeng.trainers.noise_scale import EpochNoise, measured_backward
    from tianfeng.trainers.precision import build_precision

    d, sigma = 20, 2.0
    gen = torch.Generator().manual_seed(1)
    w_star = torch.randn(d, generator=gen, dtype=torch.float64)
    delta = torch.randn(d, generator=gen, dtype=torch.float64) * 0.5
    model = _Linear(d)
    with torch.no_grad():
        model.w.copy_(w_star + delta)
    expected = ((d + 1) * delta.dot(delta) + sigma**2 * d) / delta.dot(delta)
    precision = build_precision(PrecisionConfig(mode="fp32"), torch.device("cpu"))

    def loss_fn(pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return 0.5 * ((pred - y) ** 2).mean()

    noise = EpochNoise(torch.device("cpu"))
    for step in range(3000):
        x = torch.randn(64, d, generator=gen, dtype=torch.float64)
        y = x @ w_star + sigma * torch.randn(64, generator=gen, dtype=torch.float64)
        model.w.grad = None
        loss = measured_backward(model, loss_fn, x, y, precision, [model.w], noise, world=1)
        if step == 0:
            halves = model.w.grad.clone()
            model.w.grad = None
            full = loss_fn(model(x), y)
            full.backward()
            assert torch.allclose(halves, model.w.grad, rtol=1e-12, atol=1e-12)
            assert loss.item() == pytest.approx(full.item(), rel=1e-12)
    value = noise.value(noise.sums.tolist())
    assert value == pytest.approx(expected.item(), rel=0.10), (value, expected.item())


def test_every_epoch_logs_a_noise_scale(tmp_path) -> None:
    from tests.conftest import make_config
    from tianfeng.trainers.engine import train

    measured = train(make_config(tmp_path / "on"))
    assert all(m.noise_scale is not None and m.noise_scale > 0 for m in measured.epochs)
    off = train(make_config(tmp_path / "off", noise_scale_every=0))
    assert all(m.noise_scale is None for m in off.epochs)
