"""Models: ResNet-50's architecture and initialisation, and the small proxy ResNets' knobs."""

from __future__ import annotations

import torch
from torchvision.models.resnet import Bottleneck

from tianfeng.core.run_config import ModelConfig
from tianfeng.trainers.models import BasicBlock, build_model


def test_resnet50_has_the_imagenet_architecture() -> None:
    model = build_model(ModelConfig(name="resnet50"), in_channels=3, num_classes=1000)
    params = sum(p.numel() for p in model.parameters())
    assert params == 25_557_032  # the published ResNet-50 parameter count
    assert sum(isinstance(m, Bottleneck) for m in model.modules()) == 16
    assert model(torch.randn(2, 3, 64, 64)).shape == (2, 1000)
    blocks = [b for b in model.modules() if isinstance(b, Bottleneck)]
    # v1.5: the three downsampling blocks stride on the 3x3 convolution, never on the 1x1
    assert [b.conv2.stride for b in blocks].count((2, 2)) == 3 and all(b.conv1.stride == (1, 1) for b in blocks)


def test_resnet50_keeps_the_recipes_initialisation() -> None:
    """Zero-init residual (each block's last BN gamma at 0, Goyal et al.) and what no-bias-decay
    excludes from weight decay: every BatchNorm parameter and bias (the 1-D tensors)."""
    from tianfeng.trainers.optim import parameter_groups

    model = build_model(ModelConfig(name="resnet50"), 3, 1000)
    blocks = [m for m in model.modules() if isinstance(m, Bottleneck)]
    assert all(torch.count_nonzero(b.bn3.weight) == 0 for b in blocks)
    assert all(torch.all(b.bn1.weight == 1) for b in blocks)
    plain = build_model(ModelConfig(name="resnet50", zero_init_residual=False), 3, 1000)
    assert all(torch.all(b.bn3.weight == 1) for b in plain.modules() if isinstance(b, Bottleneck))
    groups = parameter_groups(model, weight_decay=5e-5)
    undecayed = {id(p) for g in groups if g["weight_decay"] == 0 for p in g["params"]}
    expected = {id(p) for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d) for p in m.parameters()}
    assert undecayed == expected | {id(model.fc.bias)}
    with_bn = build_model(ModelConfig(name="resnet50", bn_after_pool=True), 1, 10)
    assert isinstance(with_bn.fc[0], torch.nn.BatchNorm1d) and with_bn(torch.randn(2, 1, 32, 32)).shape == (2, 10)


def test_last_bn_gamma_of_every_block_starts_at_zero() -> None:
    model = build_model(ModelConfig(name="resnet_small", width=8, depth=2), 3, 10)
    blocks = [m for m in model.modules() if isinstance(m, BasicBlock)]
    assert len(blocks) == 6
    assert all(torch.count_nonzero(b.last_bn.weight) == 0 for b in blocks)
    plain = build_model(ModelConfig(name="resnet_small", width=8, zero_init_residual=False), 3, 10)
    assert all(torch.all(m.last_bn.weight == 1) for m in plain.modules() if isinstance(m, BasicBlock))


def test_small_resnet_knobs_and_bn_after_pool() -> None:
    narrow = build_model(ModelConfig(width=8, depth=1, stages=2), 1, 10)
    wide = build_model(ModelConfig(width=32, depth=1, stages=2, bn_after_pool=True), 1, 10)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(wide) > 10 * count(narrow)
    assert isinstance(wide.pool_bn, torch.nn.BatchNorm1d) and wide.pool_bn.num_features == 64
    assert wide(torch.randn(4, 1, 16, 16)).shape == (4, 10)
