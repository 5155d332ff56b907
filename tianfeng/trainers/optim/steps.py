"""What the step of every layer-wise optimizer here begins with: the closure's loss, then each
parameter group with the parameters that have a gradient."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from torch import Tensor


def closure_loss(closure: Callable[[], float] | None) -> float | None:
    """The loss of `closure`, evaluated with gradients on (an optimizer's step runs without)."""
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


def groups_with_grads(param_groups: list[dict]) -> Iterator[tuple[dict, list[Tensor]]]:
    """Each group and its parameters that have a gradient; a group with none is skipped."""
    for group in param_groups:
        params = [p for p in group["params"] if p.grad is not None]
        if params:
            yield group, params
