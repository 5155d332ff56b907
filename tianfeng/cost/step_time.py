"""How long one training step takes on one GPU: the compute half of a predicted wall time.

A GPU's step time is modelled as a fixed part plus a part per image,
    step_s(b) = fixed_s + b * image_s,
so throughput b / step_s(b) saturates: a GPU given few images per step is far from its peak
(kernel launches, not arithmetic, bound it). Both parts come from ResNet-50 v1.5 at 224 px,
whose figures NVIDIA publishes, and transfer to another model and resolution by what each part
scales with: `image_s` by the training FLOPs per image, `fixed_s` by the number of layers (one
kernel launch per layer and pass, whatever its size). `tianfeng calibrate --throughput` fits
the same two parts on this machine instead.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass

from tianfeng.core.run_config import ModelConfig
from tianfeng.cost.published_rates import fitted

REFERENCE_RESOLUTION = 224
DLE = ("NVIDIA DeepLearningExamples, PyTorch/Classification/ConvNets/resnet50v1.5/README.md "
       "(pytorch-21.03 NGC container), https://github.com/NVIDIA/DeepLearningExamples")


@dataclass(frozen=True)
class DeviceThroughput:
    """ResNet-50 v1.5 training at 224 px on one GPU of the device."""
    mixed_images_per_s: float  # mixed precision (fp16/bf16 autocast), at `batch` images per GPU
    fp32_images_per_s: float  # fp32 (TF32 on A100 and later)
    batch: int  # per-GPU batch of those figures
    half_batch: float  # per-GPU batch at which a GPU reaches half its peak throughput
    source: str
    memory_gib: float  # device memory
    memory_gb_s: float  # device memory bandwidth, GB/s: what an optimizer step's passes cost
    cpu_cores_per_gpu: float  # the node's CPU cores over its GPUs: the data loaders' share
    node_source: str = ""
    jpeg_decoder: bool = False  # a hardware JPEG decoder (NVJPG) that DALI's mixed decoder can use


# half_batch: A100's and H100's are fitted to MLPerf's logged per-GPU rates at per-GPU batches
# from 15 to 408 (tianfeng.cost.published_rates): about 16 and 26 images. V100 and P100 have no
# small-batch training rates in those sources: theirs is 45, from V100's mixed-precision
# inference (batch 1 in 12.8 ms, 3,382 img/s at saturation, DLE), an assumption.
_A100, _H100 = fitted("a100"), fitted("h100")

DEVICES: dict[str, DeviceThroughput] = {
    "v100": DeviceThroughput(1200.0, 367.0, 256, 45.0,
                             f"DGX-1 (8x V100 16GB), 1 GPU: 1,200 img/s mixed, 367 img/s FP32; {DLE}",
                             16.0, 900.0, 5.0,
                             "V100 SXM2 16 GB, 900 GB/s HBM2 (NVIDIA Tesla V100 datasheet); DGX-1: two 20-core "
                             "Xeon E5-2698 v4 for 8 GPUs (NVIDIA DGX-1 datasheet)"),
    "a100": DeviceThroughput(2470.0, 938.0, 256, _A100.half_batch,
                             f"DGX A100 (8x A100 80GB), 1 GPU: 2,470 img/s mixed, 938 img/s TF32; {DLE}",
                             80.0, 2039.0, 16.0,
                             "A100 SXM4 80 GB, 2,039 GB/s HBM2e (NVIDIA A100 datasheet); DGX A100: two 64-core "
                             "AMD EPYC 7742 for 8 GPUs (NVIDIA DGX A100 datasheet); a 5-core hardware JPEG "
                             "decoder (NVIDIA A100 Tensor Core GPU architecture white paper)", True),
    # no NVIDIA table covers the P100 in this form: its FP32 figure is the V100's scaled by the
    # two datasheets' FP32 peaks (10.6 / 15.7 TFLOPS, SXM2); the P100 has no tensor cores, so
    # mixed precision is taken to buy memory, not speed (an assumption)
    "p100": DeviceThroughput(247.8, 247.8, 256, 45.0,
                             "V100's 367 img/s FP32 x 10.6 / 15.7 TFLOPS (NVIDIA Tesla P100 and V100 datasheets); "
                             f"{DLE}",
                             16.0, 732.0, 5.0,
                             "P100 SXM2 16 GB, 732 GB/s HBM2 (NVIDIA Tesla P100 datasheet); DGX-1 with P100: two "
                             "20-core Xeon E5-2698 v4 for 8 GPUs (NVIDIA DGX-1 datasheet)"),
    # no per-GPU ResNet-50 table is published for H100 in the same form: Lambda's analysis puts
    # vision models at ~2x an A100, and MLPerf's logs agree: one DGX H100 trained at 2.14x one
    # DGX A100's per-GPU rate on the same stack (v3.1 7,055 against v1.1 3,293 images/s a GPU
    # at 400-408 a GPU; published_rates); give cluster.images_per_s for a measured figure
    "h100": DeviceThroughput(4940.0, 1876.0, 256, _H100.half_batch,
                             "2x the A100 figures above, per Lambda's H100 analysis (vision models "
                             "~2x A100), https://lambdalabs.com/blog/nvidia-h100-gpu-deep-learning-"
                             "performance-analysis, and MLPerf's logs (2.14x on one stack)",
                             80.0, 3350.0, 14.0,
                             "H100 SXM5 80 GB, 3.35 TB/s HBM3 (NVIDIA H100 datasheet); DGX H100: two 56-core "
                             "Xeon Platinum 8480C for 8 GPUs (NVIDIA DGX H100 datasheet); 7 NVJPG hardware JPEG "
                             "decoders (NVIDIA H100 Tensor Core GPU datasheet)", True),
}


@dataclass(frozen=True)
class Stack:
    """The software a run trains with, as a factor on the devices' figures (which describe
    PyTorch, as tianfeng's engine runs): one factor per stack, the same for every device."""
    factor: float
    source: str


# NVIDIA's MLPerf MXNet (DALI, fused NHWC kernels): its A100 curve (published_rates) at the DLE
# figure's 256 a GPU, over that figure (2,470 images/s, PyTorch)
STACKS = {
    "pytorch": Stack(1.0, "the device table's own figures (DLE PyTorch)"),
    "mxnet-mlperf": Stack(_A100.images_per_s(256) / 2470.0,
                          "NVIDIA's MLPerf MXNet A100 rate at 256 a GPU (fitted to MLPerf v1.0-v2.1 logs) "
                          "over DLE PyTorch's 2,470 images/s"),
}


@dataclass(frozen=True)
class StepCost:
    """One model at one resolution: training FLOPs per image (forward and backward) and layers."""
    flops: float
    layers: int
    params: int
    norm_channels: tuple[int, ...] = ()  # each BatchNorm layer's channels: what SyncBN exchanges


@functools.lru_cache(maxsize=256)
def step_cost(model: ModelConfig, resolution: int, in_channels: int = 3, classes: int = 1000) -> StepCost:
    """Counted on torch's meta device once per machine (cost.model_facts keeps it)."""
    from tianfeng.cost.model_facts import known

    facts = known("step_cost", model, resolution, in_channels, classes,
                  lambda: asdict(_counted_step_cost(model, resolution, in_channels, classes)))
    return StepCost(facts["flops"], facts["layers"], facts["params"], tuple(facts["norm_channels"]))


def _counted_step_cost(model: ModelConfig, resolution: int, in_channels: int, classes: int) -> StepCost:
    """Shapes only, on torch's meta device: no memory, no arithmetic."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from tianfeng.trainers.models import build_model

    batch = 2  # BatchNorm in training mode needs more than one value per channel (1x1 maps)
    with torch.device("meta"):
        net = build_model(model, in_channels, classes)
        x = torch.empty(batch, in_channels, resolution, resolution)
        with FlopCounterMode(display=False) as counter:
            net(x).sum().backward()
    layers = sum(1 for m in net.modules()
                 if not any(True for _ in m.children()) and any(True for _ in m.parameters(recurse=False)))
    norm_kinds = (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.SyncBatchNorm)
    norms = tuple(m.num_features for m in net.modules() if isinstance(m, norm_kinds))
    return StepCost(float(counter.get_total_flops()) / batch, layers, sum(p.numel() for p in net.parameters()), norms)


def reference_cost() -> StepCost:
    return step_cost(ModelConfig(name="resnet50"), REFERENCE_RESOLUTION)


@dataclass(frozen=True)
class StepModel:
    """step_s(b) = fixed_s + b * image_s for one model at one resolution on one GPU."""
    fixed_s: float
    image_s: float

    def step_s(self, per_gpu_batch: int) -> float:
        return self.fixed_s + per_gpu_batch * self.image_s

    def images_per_s(self, per_gpu_batch: int) -> float:
        return per_gpu_batch / self.step_s(per_gpu_batch)


def reference_step_model(images_per_s: float, batch: int, half_batch: float) -> StepModel:
    """The two parts from a throughput at a batch and the batch of half the peak:
    at half_batch, fixed_s = half_batch * image_s."""
    step = batch / images_per_s  # = (half_batch + batch) * image_s
    image_s = step / (half_batch + batch)
    return StepModel(half_batch * image_s, image_s)


def scaled_step_model(reference: StepModel, cost: StepCost, ref: StepCost | None = None) -> StepModel:
    """The reference model's parts moved to another model and resolution."""
    ref = ref or reference_cost()
    return StepModel(reference.fixed_s * cost.layers / ref.layers, reference.image_s * cost.flops / ref.flops)
