"""LARS: SGD with momentum whose step for each weight tensor is scaled by a trust ratio
eta * ||w|| / (||g|| + wd * ||w||) (You, Gitman and Ginsburg, 2017)."""

from __future__ import annotations

from collections.abc import Callable

import torch


class Lars(torch.optim.Optimizer):
    """Groups with `layer_adaptation=False` (BN, bias) get plain momentum SGD with no decay."""

    def __init__(self, params, lr: float = 0.1, momentum: float = 0.9, nesterov: bool = False,
                 weight_decay: float = 0.0, trust_coefficient: float = 0.001,
                 eps: float = 1e-9) -> None:
        defaults = dict(lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay,
                        trust_coefficient=trust_coefficient, eps=eps, layer_adaptation=True)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            wd, momentum = group["weight_decay"], group["momentum"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad
                if group["layer_adaptation"]:
                    w_norm = torch.linalg.vector_norm(p)
                    g_norm = torch.linalg.vector_norm(grad)
                    trust = group["trust_coefficient"] * w_norm / (g_norm + wd * w_norm + group["eps"])
                    # a zero norm (fresh zero-init tensor, dead layer) gives no signal: use ratio 1
                    trust = torch.where((w_norm > 0) & (g_norm > 0), trust, torch.ones_like(trust))
                    grad = grad.add(p, alpha=wd).mul_(trust)
                elif wd:
                    grad = grad.add(p, alpha=wd)
                if momentum:
                    state = self.state[p]
                    buf = state.get("momentum_buffer")
                    if buf is None:
                        buf = state["momentum_buffer"] = grad.clone()
                    else:
                        buf.mul_(momentum).add_(grad)
                    grad = grad.add(buf, alpha=momentum) if group["nesterov"] else buf
                p.add_(grad, alpha=-group["lr"])
        return loss
