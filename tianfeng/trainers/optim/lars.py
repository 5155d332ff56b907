"""LARS: momentum SGD whose step for each weight tensor is scaled by a trust ratio
eta * ||w|| / (||g|| + wd * ||w|| + eps) (You, Gitman and Ginsburg, 2017).

The reference update (MLPerf's `lars_optimizer.py`, the paper) puts the LR inside the momentum:

    v = m * v + lr * trust * (g + wd * w);  w = w - v

`update="sgd_style"` puts it outside, as torch.optim.SGD does (v = m v + trust (g + wd w);
w -= lr v); the two agree only while the LR is constant. Groups with `layer_adaptation=False`
(BN, bias) take plain momentum steps (trust 1) and no weight decay.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from tianfeng.trainers.optim.norms import l2_norm, l2_norms
from tianfeng.trainers.optim.steps import closure_loss, groups_with_grads

UPDATES = ("reference", "sgd_style")


def trust_ratios(w_norm: Tensor, g_norm: Tensor, coefficient: float, weight_decay: float,
                 eps: float) -> Tensor:
    """eta ||w|| / (||g|| + wd ||w|| + eps), and 1 where either norm is 0 (no signal)."""
    ratio = coefficient * w_norm / (g_norm + weight_decay * w_norm + eps)
    return torch.where((w_norm > 0) & (g_norm > 0), ratio, torch.ones_like(ratio))


IMPLEMENTATIONS = ("auto", "per_tensor", "foreach", "fused")


class Lars(torch.optim.Optimizer):
    """`implementation`: per_tensor (a Python loop over tensors), foreach (torch._foreach_* over
    each group, no host sync: the accelerator path) or fused (the trust ratios read once per
    step, then torch's fused SGD kernel per tensor: one pass over weight, gradient and buffer;
    the CPU path). auto: fused on CPU, foreach elsewhere. All give the same result; fused leaves
    each gradient multiplied by its step's scale."""

    def __init__(self, params, lr: float = 0.1, momentum: float = 0.9, nesterov: bool = False,
                 weight_decay: float = 0.0, trust_coefficient: float = 0.001, eps: float = 1e-7,
                 update: str = "reference", implementation: str = "auto") -> None:
        if update not in UPDATES:
            raise ValueError(f"update must be one of {', '.join(UPDATES)}; got {update!r}")
        if implementation not in IMPLEMENTATIONS:
            raise ValueError(f"implementation must be one of {', '.join(IMPLEMENTATIONS)}; got {implementation!r}")
        defaults = dict(lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay,
                        trust_coefficient=trust_coefficient, eps=eps, layer_adaptation=True)
        super().__init__(params, defaults)
        self.update = update
        self.implementation = implementation

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = closure_loss(closure)
        for group, params in groups_with_grads(self.param_groups):
            grads = [p.grad for p in params]
            bufs = [self._buffer(p) for p in params] if group["momentum"] else None
            how = self.implementation
            if how == "auto":
                how = "fused" if params[0].device.type == "cpu" else "foreach"
            if how == "fused" and bufs is None:
                how = "foreach"  # the fused kernel keeps a momentum buffer
            step = {"per_tensor": self._step_per_tensor, "foreach": self._step_foreach,
                    "fused": self._step_fused}[how]
            step(group, params, grads, bufs)
        return loss

    def _buffer(self, p: Tensor) -> Tensor:
        state = self.state[p]
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state["momentum_buffer"]

    def _lr_split(self, group: dict) -> tuple[float, float]:
        """(inside, outside): the LR inside the momentum (reference) or applied after it (sgd_style)."""
        return (group["lr"], 1.0) if self.update == "reference" else (1.0, group["lr"])

    def _scales(self, group: dict, params: list[Tensor], grads: list[Tensor]) -> Tensor:
        """Per tensor, what multiplies g + wd w before it enters the buffer."""
        lr = self._lr_split(group)[0]
        if not group["layer_adaptation"]:
            return torch.full((len(params),), lr, dtype=params[0].dtype, device=params[0].device)
        trust = trust_ratios(l2_norms(params), l2_norms(grads), group["trust_coefficient"], group["weight_decay"], group["eps"])
        return trust * lr

    def _step_per_tensor(self, group: dict, params: list[Tensor], grads: list[Tensor],
                         bufs: list[Tensor] | None) -> None:
        lr, wd, momentum = group["lr"], group["weight_decay"], group["momentum"]
        reference = self.update == "reference"
        for i, (p, g) in enumerate(zip(params, grads, strict=True)):
            if group["layer_adaptation"]:
                trust = trust_ratios(l2_norm(p), l2_norm(g),
                                     group["trust_coefficient"], wd, group["eps"])
                d = g.add(p, alpha=wd).mul_(trust * lr if reference else trust)
            else:
                d = g.add(p, alpha=wd) if wd else g.clone()
                if reference:
                    d.mul_(lr)
            if bufs is not None:
                buf = bufs[i].mul_(momentum).add_(d)
                d = d.add_(buf, alpha=momentum) if group["nesterov"] else buf
            p.sub_(d) if reference else p.add_(d, alpha=-lr)

    def _step_foreach(self, group: dict, params: list[Tensor], grads: list[Tensor],
                      bufs: list[Tensor] | None) -> None:
        wd, momentum = group["weight_decay"], group["momentum"]
        scales = self._scales(group, params, grads)
        step_lr = self._lr_split(group)[1]
        if bufs is not None and not group["nesterov"]:
            # v = m v + s g + s wd w, in place: no temporaries the size of the model
            torch._foreach_mul_(bufs, momentum)
            torch._foreach_addcmul_(bufs, grads, list(scales.unbind()))
            if wd:
                torch._foreach_addcmul_(bufs, params, list((scales * wd).unbind()))
            torch._foreach_add_(params, bufs, alpha=-step_lr)
            return
        d = torch._foreach_add(grads, params, alpha=wd) if wd else [g.clone() for g in grads]
        torch._foreach_mul_(d, list(scales.unbind()))
        if bufs is not None:
            torch._foreach_mul_(bufs, momentum)
            torch._foreach_add_(bufs, d)
            torch._foreach_add_(d, bufs, alpha=momentum)
        torch._foreach_add_(params, d, alpha=-step_lr)

    def _step_fused(self, group: dict, params: list[Tensor], grads: list[Tensor], bufs: list[Tensor]) -> None:
        # torch's fused SGD: buf = m buf + (g / grad_scale + wd' w); w -= lr' (buf or, nesterov,
        # that sum + m buf). With grad_scale = 1/s and wd' = s wd it is LARS's step for scale s.
        # grad_scale must be float32; other dtypes scale the gradient first (one more pass).
        wd = group["weight_decay"]
        step_lr = self._lr_split(group)[1]
        options = dict(momentum=group["momentum"], lr=step_lr, dampening=0.0, nesterov=group["nesterov"],
                       maximize=False, is_first_step=False)
        float32 = all(g.dtype == torch.float32 for g in grads)
        if not group["layer_adaptation"] and float32:  # one scale for the whole group: one call
            s = self._lr_split(group)[0]
            inverse = torch.tensor(1.0 / s if s else float("inf"), dtype=torch.float32, device=params[0].device)
            torch._fused_sgd_(params, grads, bufs, weight_decay=s * wd, grad_scale=inverse, **options)
            return
        scales = self._scales(group, params, grads)
        inverses = scales.float().reciprocal().unbind()  # s = 0 (an LR of 0): g / inf = 0 = s g
        for p, g, buf, s, inverse in zip(params, grads, bufs, scales.tolist(), inverses, strict=True):
            if not float32:
                g.mul_(s)
            torch._fused_sgd_([p], [g], [buf], weight_decay=s * wd, grad_scale=inverse if float32 else None,
                              **options)
