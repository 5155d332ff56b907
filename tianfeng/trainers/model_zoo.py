"""Models by name from torchvision (`torchvision:<name>`) and timm (`timm:<name>`), built with
random weights: nothing is ever downloaded. `model.kwargs` go to the family's builder;
`model.weights` loads a local state dict instead of pretrained weights."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from tianfeng.core.errors import ConfigError
from tianfeng.core.run_config import ModelConfig

FAMILIES = ("torchvision", "timm")
# arguments that would fetch weights from a hub: refused, a local file goes in model.weights
_DOWNLOADING = {"torchvision": ("weights", "weights_backbone", "pretrained"),
                "timm": ("pretrained", "pretrained_cfg", "pretrained_cfg_overlay", "checkpoint_path")}


def family_of(name: str) -> str | None:
    family, sep, _ = name.partition(":")
    return family if sep and family in FAMILIES else None


def build_named(cfg: ModelConfig, in_channels: int, num_classes: int) -> nn.Module:
    family, _, name = cfg.name.partition(":")
    kwargs = dict(cfg.kwargs)
    refused = sorted(set(kwargs) & set(_DOWNLOADING[family]))
    if refused:
        raise ConfigError("", f"model.kwargs.{refused[0]}", "tianfeng never downloads weights; give a local "
                          "state dict file as model.weights instead")
    model = _torchvision(name, in_channels, num_classes, kwargs) if family == "torchvision" else \
        _timm(name, in_channels, num_classes, kwargs)
    if cfg.weights:
        load_weights(model, cfg.weights)
    return model


def _torchvision(name: str, in_channels: int, num_classes: int, kwargs: dict[str, Any]) -> nn.Module:
    import torchvision

    known = torchvision.models.list_models(module=torchvision.models)
    if name not in known:
        raise ConfigError("", "model.name", f"torchvision has no classification model {name!r}; "
                          f"some it has: {', '.join(sorted(known)[:12])}, ...")
    try:
        model = torchvision.models.get_model(name, weights=None, num_classes=num_classes, **kwargs)
    except TypeError as exc:
        raise ConfigError("", "model.kwargs", f"torchvision:{name}: {exc}") from None
    if in_channels != 3:
        first_conv_takes(model, in_channels)
    return model


def _timm(name: str, in_channels: int, num_classes: int, kwargs: dict[str, Any]) -> nn.Module:
    try:
        import timm
    except ImportError:
        raise ConfigError("", "model.name", f"timm:{name} needs timm: pip install 'tianfeng[timm]'") from None
    if not timm.is_model(name):
        raise ConfigError("", "model.name", f"timm has no model {name!r} (timm.list_models() lists them)")
    try:
        return timm.create_model(name, pretrained=False, num_classes=num_classes, in_chans=in_channels, **kwargs)
    except TypeError as exc:
        raise ConfigError("", "model.kwargs", f"timm:{name}: {exc}") from None


def first_conv_takes(model: nn.Module, in_channels: int) -> None:
    """torchvision's models read 3 channels: the first convolution is rebuilt for `in_channels`."""
    for parent in model.modules():
        for child_name, child in parent.named_children():
            if isinstance(child, nn.Conv2d):
                setattr(parent, child_name, nn.Conv2d(
                    in_channels, child.out_channels, child.kernel_size, child.stride, child.padding,
                    child.dilation, child.groups, child.bias is not None, child.padding_mode))
                return
    raise ConfigError("", "model.name", "found no convolution to give the data set's channels")


def load_weights(model: nn.Module, path: str) -> None:
    """A local state dict (the file `torch.save(model.state_dict(), path)` writes)."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise ConfigError("", "model.weights", f"no such file: {file}")
    state = torch.load(file, map_location="cpu", weights_only=True)
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # a tensor of another shape (another number of classes, say)
        detail = next((line.strip() for line in str(exc).splitlines()[1:] if line.strip()), str(exc))
        raise ConfigError("", "model.weights", f"{file} does not fit the model: {detail}") from None
    if missing or unexpected:
        names = (missing or unexpected)[:3]
        what = "missing" if missing else "unexpected"
        raise ConfigError("", "model.weights", f"{file} does not fit the model: {what} keys {', '.join(names)}")
