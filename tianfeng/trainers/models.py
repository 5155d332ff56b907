"""Models: small ResNets for cheap proxy runs, ResNet-50 (torchvision's, with the recipes'
initialisation), torchvision and timm models by name, and the user's own builders."""

from __future__ import annotations

import torch
from torch import nn

from tianfeng.core.run_config import ModelConfig


def _conv_bn(cin: int, cout: int, kernel: int, stride: int = 1) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, bias=False), nn.BatchNorm2d(cout)]


class _Residual(nn.Module):
    """relu(body(x) + shortcut(x)); the shortcut projects when the shape changes."""

    def __init__(self, body: nn.Sequential, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.body = body
        self.shortcut = (nn.Identity() if stride == 1 and cin == cout
                         else nn.Sequential(*_conv_bn(cin, cout, 1, stride)))

    @property
    def last_bn(self) -> nn.BatchNorm2d:
        return self.body[-1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.shortcut(x))


class BasicBlock(_Residual):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__(nn.Sequential(*_conv_bn(cin, cout, 3, stride), nn.ReLU(inplace=True),
                                       *_conv_bn(cout, cout, 3)), cin, cout, stride)


class ResNet(nn.Module):
    def __init__(self, stem: nn.Module, blocks: nn.Module, features: int, num_classes: int,
                 bn_after_pool: bool) -> None:
        super().__init__()
        self.stem = stem
        self.blocks = blocks
        self.pool_bn = nn.BatchNorm1d(features) if bn_after_pool else nn.Identity()
        self.fc = nn.Linear(features, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        x = torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1)
        return self.fc(self.pool_bn(x))


def _init_weights(model: ResNet, zero_init_residual: bool) -> None:
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d | nn.BatchNorm1d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
    if zero_init_residual:
        # each block starts as the identity, which keeps early large-LR steps stable
        for m in model.modules():
            if isinstance(m, _Residual):
                nn.init.zeros_(m.last_bn.weight)


def resnet_small(cfg: ModelConfig, in_channels: int, num_classes: int) -> ResNet:
    """A CIFAR-style ResNet: 3x3 stem, `stages` stages of `depth` basic blocks, widths doubling."""
    stem = nn.Sequential(*_conv_bn(in_channels, cfg.width, 3), nn.ReLU(inplace=True))
    layers: list[nn.Module] = []
    cin = cfg.width
    for stage in range(cfg.stages):
        cout = cfg.width * 2**stage
        for block in range(cfg.depth):
            stride = 2 if stage > 0 and block == 0 else 1
            layers.append(BasicBlock(cin, cout, stride))
            cin = cout
    model = ResNet(stem, nn.Sequential(*layers), cin, num_classes, cfg.bn_after_pool)
    _init_weights(model, cfg.zero_init_residual)
    return model


def resnet50(cfg: ModelConfig, in_channels: int, num_classes: int) -> nn.Module:
    """torchvision's ResNet-50 (v1.5: the stride on the 3x3 convolution, as in the large-batch
    ImageNet records) with the recipes' initialisation: each block's last BatchNorm gamma at zero
    when `zero_init_residual`, and an optional BatchNorm after the pooling."""
    from torchvision.models import resnet50 as torchvision_resnet50

    from tianfeng.trainers.model_zoo import first_conv_takes

    model = torchvision_resnet50(weights=None, num_classes=num_classes, zero_init_residual=cfg.zero_init_residual)
    if in_channels != 3:
        first_conv_takes(model, in_channels)
    if cfg.bn_after_pool:
        model.fc = nn.Sequential(nn.BatchNorm1d(model.fc.in_features), model.fc)
    return model


def build_model(cfg: ModelConfig, in_channels: int, num_classes: int) -> nn.Module:
    """A built-in ResNet, a torchvision or timm model by name, or the user's builder named
    `package.module:function`; then the local weights of `model.weights`, if any."""
    from tianfeng.trainers.model_zoo import build_named, family_of, load_weights

    if family_of(cfg.name):
        return build_named(cfg, in_channels, num_classes)
    builders = {"resnet_small": resnet_small, "resnet50": resnet50}
    if cfg.name in builders:
        model = builders[cfg.name](cfg, in_channels, num_classes)
    else:
        model = _user_model(cfg, in_channels, num_classes)
    if cfg.weights:
        load_weights(model, cfg.weights)
    return model


def _user_model(cfg: ModelConfig, in_channels: int, num_classes: int) -> nn.Module:
    from tianfeng.core.errors import ConfigError
    from tianfeng.trainers.user_code import load_callable

    arguments = {"num_classes": num_classes, "in_channels": in_channels, **cfg.kwargs}
    builder = load_callable(cfg.name, "model.name", **arguments)
    model = builder(**arguments)
    if not isinstance(model, nn.Module):
        raise ConfigError("", "model.name", f"{cfg.name} returned {type(model).__name__}, not a torch.nn.Module")
    return model
