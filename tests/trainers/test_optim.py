"""One step of each optimizer against a hand computation."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from tianfeng.core.run_config import LambConfig, LarsConfig, OptimizerConfig
from tianfeng.trainers.optim import Lamb, Lars, build_optimizer, parameter_groups


def tiny_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))


def set_grads(model: nn.Module) -> None:
    torch.manual_seed(1)
    for p in model.parameters():
        p.grad = torch.randn_like(p)


def test_parameter_groups_keep_bn_and_bias_out_of_decay() -> None:
    model = tiny_model()
    decay, no_decay = parameter_groups(model, 0.1)
    assert [p.shape for p in decay["params"]] == [torch.Size([2, 3])]
    assert len(no_decay["params"]) == 3  # linear bias, BN weight, BN bias
    assert no_decay["weight_decay"] == 0.0 and no_decay["layer_adaptation"] is False


def test_sgd_step_matches_hand_computation() -> None:
    model = tiny_model()
    w0 = model[0].weight.detach().clone()
    b0 = model[0].bias.detach().clone()
    opt = build_optimizer(model, OptimizerConfig(name="sgd", lr=0.5, momentum=0.9, weight_decay=0.01))
    set_grads(model)
    gw, gb = model[0].weight.grad.clone(), model[0].bias.grad.clone()
    opt.step()
    torch.testing.assert_close(model[0].weight, w0 - 0.5 * (gw + 0.01 * w0))
    torch.testing.assert_close(model[0].bias, b0 - 0.5 * gb)  # no decay on bias


@pytest.mark.parametrize("implementation", ["per_tensor", "foreach", "fused"])
@pytest.mark.parametrize("nesterov", [False, True])
def test_sgd_style_lars_two_steps_match_hand_computation(nesterov: bool, implementation: str) -> None:
    lr, m, wd, eta, eps = 0.3, 0.9, 0.01, 0.02, 1e-9
    w = torch.tensor([[3.0, -4.0]])
    b = torch.tensor([0.5])
    pw, pb = nn.Parameter(w.clone()), nn.Parameter(b.clone())
    opt = Lars([{"params": [pw], "weight_decay": wd, "layer_adaptation": True},
                {"params": [pb], "weight_decay": 0.0, "layer_adaptation": False}],
               lr=lr, momentum=m, nesterov=nesterov, trust_coefficient=eta, eps=eps,
               update="sgd_style", implementation=implementation)
    grads = [(torch.tensor([[1.0, 2.0]]), torch.tensor([0.2])), (torch.tensor([[-1.0, 0.5]]), torch.tensor([-0.1]))]
    buf_w = buf_b = None
    for gw, gb in grads:
        pw.grad, pb.grad = gw.clone(), gb.clone()
        opt.step()
        # hand computation: trust = eta*|w| / (|g| + wd*|w| + eps); d = trust*(g + wd*w)
        w_norm, g_norm = math.hypot(*w.flatten().tolist()), math.hypot(*gw.flatten().tolist())
        trust = eta * w_norm / (g_norm + wd * w_norm + eps)
        dw = trust * (gw + wd * w)
        buf_w = dw if buf_w is None else m * buf_w + dw
        buf_b = gb if buf_b is None else m * buf_b + gb  # bias: plain momentum, no decay, no trust
        step_w = dw + m * buf_w if nesterov else buf_w
        step_b = gb + m * buf_b if nesterov else buf_b
        w, b = w - lr * step_w, b - lr * step_b
        torch.testing.assert_close(pw.detach(), w)
        torch.testing.assert_close(pb.detach(), b)


@pytest.mark.parametrize("implementation", ["per_tensor", "foreach", "fused"])
@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_lars_uses_ratio_one_for_zero_weights(implementation: str, momentum: float) -> None:
    p = nn.Parameter(torch.zeros(2, 2))
    opt = Lars([{"params": [p], "weight_decay": 0.0, "layer_adaptation": True}], lr=1.0, momentum=momentum,
               implementation=implementation)
    p.grad = torch.ones(2, 2)
    opt.step()
    torch.testing.assert_close(p.detach(), -torch.ones(2, 2))


@pytest.mark.parametrize("foreach", [False, True])
def test_lamb_two_steps_match_hand_computation(foreach: bool) -> None:
    lr, b1, b2, eps, wd = 0.1, 0.9, 0.99, 1e-6, 0.05
    w = torch.tensor([[1.0, -2.0, 2.0]])
    pw = nn.Parameter(w.clone())
    pb = nn.Parameter(torch.tensor([1.0]))
    opt = Lamb([{"params": [pw], "weight_decay": wd, "layer_adaptation": True},
                {"params": [pb], "weight_decay": 0.0, "layer_adaptation": False}],
               lr=lr, betas=(b1, b2), eps=eps, implementation="foreach" if foreach else "per_tensor")
    m = v = torch.zeros(1, 3)
    mb = vb = torch.zeros(1)
    b = torch.tensor([1.0])
    for t, (g, gb) in enumerate([(torch.tensor([[0.5, 1.0, -1.0]]), torch.tensor([2.0])),
                                 (torch.tensor([[0.1, -0.3, 0.2]]), torch.tensor([-1.0]))], start=1):
        pw.grad, pb.grad = g.clone(), gb.clone()
        opt.step()
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        r = (m / (1 - b1**t)) / ((v / (1 - b2**t)).sqrt() + eps) + wd * w
        w = w - lr * (w.norm() / r.norm()) * r
        mb, vb = b1 * mb + (1 - b1) * gb, b2 * vb + (1 - b2) * gb * gb
        b = b - lr * (mb / (1 - b1**t)) / ((vb / (1 - b2**t)).sqrt() + eps)
        torch.testing.assert_close(pw.detach(), w)
        torch.testing.assert_close(pb.detach(), b)


def test_build_optimizer_wires_config() -> None:
    model = tiny_model()
    lars = build_optimizer(model, OptimizerConfig(name="lars", lars=LarsConfig(trust_coefficient=0.005)))
    assert isinstance(lars, Lars) and lars.param_groups[0]["trust_coefficient"] == 0.005
    assert lars.update == "reference" and lars.param_groups[0]["eps"] == 1e-7
    torch_style = build_optimizer(model, OptimizerConfig(name="lars", lars=LarsConfig(update="sgd_style")))
    assert torch_style.update == "sgd_style"
    lamb = build_optimizer(model, OptimizerConfig(name="lamb", lamb=LambConfig(beta2=0.98)))
    assert isinstance(lamb, Lamb) and lamb.param_groups[0]["betas"] == (0.9, 0.98)
    assert [g["layer_adaptation"] for g in lamb.param_groups] == [True, False]
