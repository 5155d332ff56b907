"""Lars against an independent transcription of the MLPerf reference update, and the
multi-tensor LARS and LAMB steps against the per-tensor ones, over 200 steps of a real model
with a warm-up-then-poly LR, weight decay, BN/bias groups and zero-norm tensors."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from tianfeng.trainers.optim import Lamb, Lars, parameter_groups

STEPS, WARMUP = 200, 30
LR, MOMENTUM, WD, ETA, EPS = 2.0, 0.9, 1e-3, 0.02, 1e-7


def lr_at(step: int) -> float:
    """Linear warm-up from 0 (the reference's), then poly power 2 to 0."""
    if step < WARMUP:
        return LR * step / WARMUP
    return LR * (1 - (step - WARMUP) / (STEPS - WARMUP)) ** 2


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 4)
        self.zero = nn.Linear(8, 4, bias=False)  # zero weights: trust falls back to 1
        nn.init.zeros_(self.zero.weight)
        self.unused = nn.Parameter(torch.randn(5, 5))  # gets a zero gradient every step

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.bn(self.conv(x))).mean((2, 3))
        return self.fc(h) + self.zero(h) + 0.0 * self.unused.sum()


def batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(3)
    return [(torch.randn(16, 3, 6, 6, generator=g, dtype=torch.float64),
             torch.randint(0, 4, (16,), generator=g)) for _ in range(STEPS)]


def backward(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> None:
    model.zero_grad(set_to_none=False)
    nn.functional.cross_entropy(model(x), y).backward()


class ReferenceLars:
    """The reference written the way its TensorFlow code runs (Keras momentum: the accumulator
    holds minus the velocity, the variable adds it), one tensor at a time, kept apart from Lars."""

    def __init__(self, model: nn.Module) -> None:
        self.params = [(p, p.ndim > 1) for p in model.parameters()]  # (tensor, decayed and adapted)
        self.accum = [torch.zeros_like(p) for p, _ in self.params]

    @torch.no_grad()
    def step(self, lr: float) -> None:
        for (var, adapted), accum in zip(self.params, self.accum, strict=True):
            grad = var.grad
            scaled_lr = lr
            if adapted:
                w_norm, g_norm = var.norm(), grad.norm()
                ratio = ETA * w_norm / (g_norm + WD * w_norm + EPS) if w_norm > 0 and g_norm > 0 else 1.0
                scaled_lr = lr * ratio
                grad = grad + WD * var
            accum.copy_(MOMENTUM * accum - scaled_lr * grad)
            var.add_(accum)


@pytest.mark.parametrize("implementation", ["per_tensor", "foreach", "fused"])
def test_lars_equals_the_reference_update_over_200_steps(implementation: str) -> None:
    torch.manual_seed(0)
    ours = Net().double()
    ref_model = copy.deepcopy(ours)
    opt = Lars(parameter_groups(ours, WD), lr=LR, momentum=MOMENTUM, trust_coefficient=ETA, eps=EPS,
               implementation=implementation)
    ref = ReferenceLars(ref_model)
    for step, (x, y) in enumerate(batches()):
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        backward(ours, x, y)
        backward(ref_model, x, y)
        opt.step()
        ref.step(lr_at(step))
    moved = max((a - b).abs().max().item() for a, b in zip(ours.parameters(), Net().double().parameters(), strict=True))
    assert moved > 0.1  # the run really trained
    for a, b in zip(ours.parameters(), ref_model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    assert ours.zero.weight.abs().sum() > 0  # the zero tensor moved with trust 1


def test_sgd_style_differs_from_the_reference_while_the_lr_changes() -> None:
    torch.manual_seed(0)
    ref_model = Net().double()
    sgd_model = copy.deepcopy(ref_model)
    ref = Lars(parameter_groups(ref_model, WD), lr=LR, momentum=MOMENTUM, trust_coefficient=ETA)
    sgd = Lars(parameter_groups(sgd_model, WD), lr=LR, momentum=MOMENTUM, trust_coefficient=ETA,
               update="sgd_style")
    for step, (x, y) in enumerate(batches()[:WARMUP]):
        for opt in (ref, sgd):
            for group in opt.param_groups:
                group["lr"] = lr_at(step)
        backward(ref_model, x, y)
        backward(sgd_model, x, y)
        ref.step()
        sgd.step()
    gap = max((a - b).abs().max().item() for a, b in zip(ref_model.parameters(), sgd_model.parameters(), strict=True))
    assert gap > 1e-3


def run(make, steps: int = STEPS, dtype: torch.dtype = torch.float64) -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = Net().to(dtype)
    opt = make(parameter_groups(model, WD))
    for step, (x, y) in enumerate(batches()[:steps]):
        for group in opt.param_groups:
            group["lr"] = lr_at(step) * opt.defaults["lr"] / LR
        backward(model, x.to(dtype), y)
        opt.step()
    return [p.detach() for p in model.parameters()]


@pytest.mark.parametrize("implementation", ["foreach", "fused"])
@pytest.mark.parametrize("update", ["reference", "sgd_style"])
@pytest.mark.parametrize("nesterov", [False, True])
def test_multi_tensor_lars_equals_per_tensor(update: str, nesterov: bool, implementation: str) -> None:
    def make(how: str):
        return lambda groups: Lars(groups, lr=LR, momentum=MOMENTUM, nesterov=nesterov, trust_coefficient=ETA,
                                   update=update, implementation=how)

    for a, b in zip(run(make(implementation)), run(make("per_tensor")), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_fused_lars_in_float32_equals_per_tensor() -> None:
    """float32 takes the fused kernel's own gradient scaling (float64 scales the gradient first)."""
    def make(how: str):
        return lambda groups: Lars(groups, lr=LR, momentum=MOMENTUM, trust_coefficient=ETA, implementation=how)

    # 50 steps: float32 rounding differs between kernels by CPU, and training amplifies it over many
    float32 = dict(steps=50, dtype=torch.float32)
    for a, b in zip(run(make("fused"), **float32), run(make("per_tensor"), **float32), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_multi_tensor_lamb_equals_per_tensor() -> None:
    def make(how: str):
        return lambda groups: Lamb(groups, lr=0.01, implementation=how)

    for a, b in zip(run(make("foreach")), run(make("per_tensor")), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
