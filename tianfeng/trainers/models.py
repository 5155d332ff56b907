"""Models: ResNet-50 (the ImageNet architecture) and small ResNets for cheap proxy runs."""

from __future__ import annotations

import torch
from torch import nn

from tianfeng.trainers.config import ModelConfig


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


class Bottleneck(_Residual):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int) -> None:
        cout = width * self.expansion
        # stride on the 3x3 conv ("ResNet v1.5"), as in the large-batch ImageNet records
        super().__init__(nn.Sequential(*_conv_bn(cin, width, 1), nn.ReLU(inplace=True),
                                       *_conv_bn(width, width, 3, stride), nn.ReLU(inplace=True),
                                       *_conv_bn(width, cout, 1)), cin, cout, stride)


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


def resnet50(cfg: ModelConfig, in_channels: int, num_classes: int) -> ResNet:
    """ResNet-50 for ImageNet-size inputs: 7x7/2 stem, max-pool, bottleneck stages [3, 4, 6, 3]."""
    stem = nn.Sequential(*_conv_bn(in_channels, 64, 7, 2), nn.ReLU(inplace=True),
                         nn.MaxPool2d(3, 2, 1))
    layers: list[nn.Module] = []
    cin = 64
    for stage, count in enumerate((3, 4, 6, 3)):
        width = 64 * 2**stage
        for block in range(count):
            stride = 2 if stage > 0 and block == 0 else 1
            layers.append(Bottleneck(cin, width, stride))
            cin = width * Bottleneck.expansion
    model = ResNet(stem, nn.Sequential(*layers), cin, num_classes, cfg.bn_after_pool)
    _init_weights(model, cfg.zero_init_residual)
    return model


def build_model(cfg: ModelConfig, in_channels: int, num_classes: int) -> nn.Module:
    """A built-in ResNet, or the user's builder named `package.module:function`."""
    builders = {"resnet_small": resnet_small, "resnet50": resnet50}
    if cfg.name in builders:
        return builders[cfg.name](cfg, in_channels, num_classes)
    from tianfeng.trainers.config import ConfigError
    from tianfeng.trainers.user_code import load_callable

    builder = load_callable(cfg.name, "model.name", num_classes=num_classes, in_channels=in_channels)
    model = builder(num_classes=num_classes, in_channels=in_channels)
    if not isinstance(model, nn.Module):
        raise ConfigError("", "model.name", f"{cfg.name} returned {type(model).__name__}, not a torch.nn.Module")
    return model
