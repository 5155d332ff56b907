"""LAMB: Adam moments with a layer-wise trust ratio ||w|| / ||update|| (You et al., 2019)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from tianfeng.trainers.optim.norms import l2_norm, l2_norms
from tianfeng.trainers.optim.steps import closure_loss, groups_with_grads


def _trust(w_norm: Tensor, u_norm: Tensor) -> Tensor:
    return torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))


def chunks(tensors: list[Tensor], elements: int = 1 << 22) -> list[slice]:
    """Consecutive runs of tensors of about `elements` in all: the multi-tensor step's temporaries
    stay that size (a whole model's worth, allocated every step, costs more than it saves on CPU)."""
    out, start, size = [], 0, 0
    for i, t in enumerate(tensors):
        size += t.numel()
        if size >= elements:
            out.append(slice(start, i + 1))
            start, size = i + 1, 0
    if start < len(tensors):
        out.append(slice(start, len(tensors)))
    return out


class Lamb(torch.optim.Optimizer):
    """Groups with `layer_adaptation=False` (BN, bias) take the plain Adam step with no decay.
    `implementation`: per_tensor (a Python loop) or foreach (torch._foreach_* over runs of
    tensors); auto is foreach. Both give the same result."""

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-6, weight_decay: float = 0.0, implementation: str = "auto") -> None:
        if implementation not in ("auto", "per_tensor", "foreach"):
            raise ValueError(f"implementation must be one of auto, per_tensor, foreach; got {implementation!r}")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        layer_adaptation=True)
        super().__init__(params, defaults)
        self.foreach = implementation != "per_tensor"

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = closure_loss(closure)
        for group, params in groups_with_grads(self.param_groups):
            states = [self._state(p) for p in params]
            for s in states:
                s["step"] += 1
            if self.foreach:
                for part in chunks(params):
                    self._step_foreach(group, params[part], states[part])
            else:
                self._step_per_tensor(group, params, states)
        return loss

    def _state(self, p: Tensor) -> dict:
        state = self.state[p]
        if not state:
            state["step"] = 0
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state

    @staticmethod
    def _step_per_tensor(group: dict, params: list[Tensor], states: list[dict]) -> None:
        beta1, beta2 = group["betas"]
        for p, state in zip(params, states, strict=True):
            m, v = state["exp_avg"], state["exp_avg_sq"]
            m.mul_(beta1).add_(p.grad, alpha=1 - beta1)
            v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
            m_hat = m / (1 - beta1 ** state["step"])
            v_hat = v / (1 - beta2 ** state["step"])
            update = m_hat / (v_hat.sqrt() + group["eps"])
            if group["weight_decay"]:
                update.add_(p, alpha=group["weight_decay"])
            if group["layer_adaptation"]:
                update.mul_(_trust(l2_norm(p), l2_norm(update)))
            p.add_(update, alpha=-group["lr"])

    @staticmethod
    def _step_foreach(group: dict, params: list[Tensor], states: list[dict]) -> None:
        beta1, beta2 = group["betas"]
        grads = [p.grad for p in params]
        m = [s["exp_avg"] for s in states]
        v = [s["exp_avg_sq"] for s in states]
        torch._foreach_mul_(m, beta1)
        torch._foreach_add_(m, grads, alpha=1 - beta1)
        torch._foreach_mul_(v, beta2)
        torch._foreach_addcmul_(v, grads, grads, value=1 - beta2)
        denom = torch._foreach_div(v, [1 - beta2 ** s["step"] for s in states])
        torch._foreach_sqrt_(denom)
        torch._foreach_add_(denom, group["eps"])
        update = torch._foreach_div(m, [1 - beta1 ** s["step"] for s in states])
        torch._foreach_div_(update, denom)
        del denom
        if group["weight_decay"]:
            torch._foreach_add_(update, params, alpha=group["weight_decay"])
        if group["layer_adaptation"]:
            trust = _trust(l2_norms(params), l2_norms(update))
            torch._foreach_mul_(update, list(trust.unbind()))
        torch._foreach_add_(params, update, alpha=-group["lr"])
