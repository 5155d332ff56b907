"""The wall-time model against published large-batch ImageNet ResNet-50 records on GPUs: each
record's time predicted from its published description alone (GPU model, GPUs per node, the
node's network, data pipeline, batch, epochs and resolutions) with one device table
(tianfeng.cost.step_time) and the network table below for every record, and no per-record factor.
Prints predicted / published per record, the parts of each prediction, and, per set, the
median ratio with each record predicted from rates fitted without its own (leave-one-out). The
aim: every record within 1.25x, the median within 1.10x. A record's DALI pipeline is priced with
its config's DALI_HW_DECODER_LOAD.

Records of the recipes' table whose recipe or timing is not published in full are listed and
left out (their missing input is named), not guessed."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # common.py, one folder up

from common import (  # (common also puts the repository on the path)
    ROOT,
    add_results_argument,
    write_results,
)

from tianfeng.core.run_config import config_from_dict
from tianfeng.cost.cluster import ClusterSpec, checked
from tianfeng.cost.published_rates import POINTS, fitted
from tianfeng.cost.step_time import DEVICES
from tianfeng.cost.walltime import format_seconds, predict_wall_time

IMAGENET_TRAIN, IMAGENET_VAL = 1_281_167, 50_000


@dataclass(frozen=True)
class Network:
    """A node's links as published: NVLink inside, `adapters` of `gbit_s` between nodes."""
    intra_gbps: float
    inter_gbps: float
    adapters: int
    inter_latency_us: float
    source: str


NETWORKS = {
    "dgx1-ib": Network(1200.0, 100.0, 4, 10.0, "DGX-1: NVLink 2.0, four 100 Gbit/s EDR InfiniBand (DGX-1 datasheet)"),
    # AWS p3.16xlarge: 8 V100 16 GB on NVLink, 64 vCPUs (32 cores), 25 Gbit/s networking of which
    # one TCP flow gets 10 Gbit/s inside a cluster placement group (AWS EC2 P3 instance page; EC2
    # network bandwidth docs); that the 2018 run sent one flow per peer, and 30 us a hop, are assumptions
    "p3.16xlarge": Network(1200.0, 10.0, 1, 30.0, "AWS EC2: 25 Gbit/s, 10 Gbit/s per flow, NVLink"),
    # ABCI compute node: 4 V100 SXM2 16 GB on NVLink, two 20-core Xeon Gold 6148, two 100 Gbit/s
    # EDR InfiniBand adapters (ABCI system overview)
    "abci": Network(1200.0, 100.0, 2, 10.0, "ABCI system overview: 4 V100, 2 x EDR InfiniBand per node"),
    # Facebook Big Basin: 8 P100 SXM2 on NVLink, 50 Gbit/s Ethernet per server (Goyal et al.
    # 2017, section 5: "50Gbit Ethernet"); 30 us a hop, an assumption
    # DGX A100: 8 A100 SXM4 on NVLink 3 through NVSwitch (600 GB/s a GPU), eight 200 Gbit/s HDR
    # InfiniBand adapters for compute (NVIDIA DGX A100 datasheet; the MLPerf v1.0 system
    # description says the same); 10 us a hop, as for DGX-1, an assumption
    "dgxa100-ib": Network(4800.0, 200.0, 8, 10.0, "DGX A100: NVLink 3, eight 200 Gbit/s HDR InfiniBand (datasheet)"),
    "big-basin": Network(640.0, 50.0, 1, 30.0, "Goyal et al. 2017 section 5: Big Basin, 50 Gbit Ethernet"),
    # DGX H100 and CoreWeave's HGX H100: NVLink 4 (900 GB/s a GPU) through NVSwitch, eight 400
    # Gbit/s NDR InfiniBand adapters for compute (the MLPerf v3.1 and v4.0 system descriptions)
    "dgxh100-ib": Network(7200.0, 400.0, 8, 10.0, "DGX/HGX H100: NVLink 4, eight 400 Gbit/s NDR (MLPerf systems)"),
    # DGX-2H: 16 V100 SXM3 on NVSwitch (300 GB/s a GPU), eight 100 Gbit/s EDR adapters (MLPerf v0.7 system)
    "dgx2h-ib": Network(2400.0, 100.0, 8, 10.0, "DGX-2H: NVSwitch, eight 100 Gbit/s EDR (MLPerf v0.7 system)"),
}


@dataclass(frozen=True)
class Record:
    name: str
    published_s: float
    device: str  # a row of tianfeng.cost.step_time.DEVICES
    gpus: int
    gpus_per_node: int
    network: str
    precision: str
    phases: tuple[tuple[int, int, int], ...]  # (epochs, resolution, global batch)
    loader: str
    cores_per_gpu: float
    optimizer: str
    timed_from_first_step: bool  # MLPerf's clock starts after initialisation
    source: str
    stack: str = "pytorch"  # a key of tianfeng.cost.step_time.STACKS
    mlperf: tuple[str, str] | None = None  # (round, system) of its logs, as published_rates names them
    check: bool = False  # a round kept out of the fitted rates: an independent check
    in_network_reduction: bool = False  # the run's network summed gradients in its switches (SHARP)
    hw_decoder_load: float = 0.0  # DALI's share of JPEG decoding on the GPU's hardware decoder


def _mlperf(rnd: str, system: str, device: str, gpus: int, per_node: int, network: str, cores: float,
            per_gpu: int, epochs: int, seconds: float, check: bool = False, sharp: str = "",
            hw: float = 0.0) -> Record:
    """A record from NVIDIA's MLPerf logs: MXNet with DALI, fp16, LARS; epochs to the target and
    the time from run_start to run_stop as the five runs' median. `sharp`: the run's config file
    (NVIDIA/benchmarks/resnet/implementations/...) whose `SBATCH_NETWORK=sharp` asks the cluster
    for in-network reduction. `hw`: its config's DALI_HW_DECODER_LOAD (run_and_time.sh's 0.0
    where the config sets none)."""
    return Record(f"NVIDIA MLPerf {rnd} {gpus} GPUs", seconds, device, gpus, per_node, network, "fp16",
                  ((epochs, 224, per_gpu * gpus),), "dali", cores, "lars", True,
                  f"training_results_{rnd} NVIDIA/results/{system}: {gpus} GPUs, {per_gpu} a GPU, {epochs} epochs, "
                  f"{seconds:.1f} s (median of the successful runs, MLPerf's clock)"
                  + (f"; SHARP: {sharp} sets SBATCH_NETWORK=sharp" if sharp else ""),
                  "mxnet-mlperf", (rnd, system), check, bool(sharp), hw)


MLPERF_RECORDS = (
    _mlperf("v1.0", "dgxa100_ngc21.05_mxnet", "a100", 8, 8, "dgxa100-ib", 16.0, 408, 35, 1724.5),
    _mlperf("v1.1", "dgxa100_n8_ngc21.09_mxnet", "a100", 64, 8, "dgxa100-ib", 16.0, 51, 35, 271.9, hw=0.7),
    _mlperf("v1.1", "dgxa100_n128_ngc21.09_mxnet", "a100", 1024, 8, "dgxa100-ib", 16.0, 35, 60, 34.5,
            sharp="mxnet/config_DGXA100_multi_128x8x35.sh", hw=0.7),
    _mlperf("v1.1", "dgxa100_n540_ngc21.09_mxnet", "a100", 4320, 8, "dgxa100-ib", 16.0, 15, 85, 20.9,
            sharp="mxnet/config_DGXA100_multi_540x8x15xgbn2_larsv2.sh", hw=0.7),
    _mlperf("v2.1", "dgxa100_ngc22.04_mxnet", "a100", 8, 8, "dgxa100-ib", 16.0, 408, 35, 1719.2),
    _mlperf("v3.1", "eos_ngc23.09_mxnet", "h100", 8, 8, "dgxh100-ib", 14.0, 400, 35, 811.3, hw=0.99),
    _mlperf("v3.1", "eos_n8_ngc23.09_mxnet", "h100", 64, 8, "dgxh100-ib", 14.0, 50, 35, 149.7,
            sharp="mxnet/config_DGXH100_multi_8x8x50.sh", hw=0.99),
    _mlperf("v3.1", "coreweave_hgxh100_n448_ngc23.04_mxnet", "h100", 3584, 8, "dgxh100-ib", 14.0, 16, 77, 11.0,
            sharp="mxnet/config_DGXH100_multi_448x8x16.sh", hw=0.99),
    _mlperf("v4.0", "eos_n316_ngc24.04_mxnet", "h100", 2528, 8, "dgxh100-ib", 14.0, 16, 70, 13.9,
            sharp="eos_n316_ngc24.04_mxnet/config_DGXH100_multi_316x8x16.sh", hw=0.99),
    # kept out of the fitted rates (v0.7, v3.0): the independent check
    _mlperf("v0.7", "dgx1_ngc20.06_mxnet", "v100", 8, 8, "dgx1-ib", 5.0, 208, 37, 4271.9, check=True),
    _mlperf("v0.7", "dgx2h_n32_ngc20.06_mxnet", "v100", 512, 16, "dgx2h-ib", 3.0, 65, 56, 120.2, check=True),
    _mlperf("v0.7", "dgxa100_ngc20.06_mxnet", "a100", 8, 8, "dgxa100-ib", 16.0, 408, 41, 2366.7, check=True),
    _mlperf("v0.7", "dgxa100_n96_ngc20.06_mxnet", "a100", 768, 8, "dgxa100-ib", 16.0, 45, 59, 63.4, check=True),
    _mlperf("v3.0", "dgxh100_ngc23.04_mxnet", "h100", 8, 8, "dgxh100-ib", 14.0, 400, 35, 815.5, check=True, hw=0.99),
    _mlperf("v3.0", "dgxh100_n64_ngc23.04_mxnet", "h100", 512, 8, "dgxh100-ib", 14.0, 40, 50, 29.9, check=True,
            sharp="mxnet/config_DGXH100_multi_64x8x40.sh", hw=0.99),
    _mlperf("v3.0", "dgxh100_n96_ngc23.04_mxnet", "h100", 768, 8, "dgxh100-ib", 14.0, 42, 56, 22.2, check=True,
            sharp="mxnet/config_DGXH100_multi_96x8x42.sh", hw=0.99),
)


RECORDS = (
    Record("Goyal et al. 2017", 65 * 60, "p100", 256, 8, "big-basin", "fp32", ((90, 224, 8192),), "torch", 5.0,
           "sgd", False, "arXiv:1706.02677: 256 P100, batch 8192, 90 epochs, ~1 hour (recipes: 65 min); data "
           "loading on the CPU (Caffe2); cores per GPU not published: 5 (a DGX-1's share), an assumption"),
    Record("fast.ai/DIU imagenet18", 16 * 60, "v100", 128, 8, "p3.16xlarge", "fp16",
           ((6, 128, 8192), (10, 128, 16384), (3, 224, 8192), (16, 224, 24576)), "torch", 4.0, "sgd", False,
           "diux-dev/imagenet18 (sixteen_machines): 16 p3.16xlarge, phases as its schedule to the ~35th epoch "
           "where it reached 93% top-5 in 16 min; PyTorch DataLoader decoding JPEGs on 32 cores"),
    Record("Fujitsu MLPerf v0.6", 70.4, "v100", 2048, 4, "abci", "fp16", ((90, 224, 86016),), "dali", 10.0,
           "lars", True, "training_results_v0.6 Fujitsu: 2048 V100 on ABCI, batch 86016, 90 epochs, MXNet + "
           "DALI, 70.4 s (MLPerf clock)"),
)

LEFT_OUT = (
    ("Jia et al. 2018 (Tencent), 2048 P40, 6.6 min", "epochs and LR schedule unconfirmed in the recipes' sources"),
    ("Tencent 2m31s, 128 V100", "batch and resolution schedule not published in the recipes' sources"),
)


RECORDS = RECORDS + (
    _mlperf("v1.0", "dgxa100_n8_ngc21.05_mxnet", "a100", 64, 8, "dgxa100-ib", 16.0, 204, 45, 294.6),
) + MLPERF_RECORDS


def _left_out(r: Record) -> dict:
    """The cluster keys that predict `r` from rates fitted without its own: its device's curve
    (half batch) and, for A100, the stack's factor, both refitted without the record's point."""
    own = tuple(p for p in POINTS if r.mlperf and (p.round, p.system) == r.mlperf)
    if not own:
        return {"stack": r.stack}
    curve = fitted(r.device, own)
    a100 = fitted("a100", own if r.device == "a100" else ())
    factor = a100.images_per_s(256) / DEVICES["a100"].mixed_images_per_s
    return {"half_batch": curve.half_batch, "images_per_s": DEVICES[r.device].mixed_images_per_s * factor}


def predict(r: Record, leave_one_out: bool = False) -> dict:
    net = NETWORKS[r.network]
    cfg = config_from_dict({"model": {"name": "resnet50"}, "precision": {"mode": r.precision},
                            "optimizer": {"name": r.optimizer},
                            "phases": [{"epochs": e, "resolution": res, "batch_size": b} for e, res, b in r.phases],
                            "data": {"val_batch_size": 250},
                            # what tianfeng's engine adds and the records did not run: the noise-scale
                            # measurement and a checkpoint every epoch
                            "noise_scale_every": 0, "checkpoint": {"every_epochs": 0}}, r.name)
    spec = checked(ClusterSpec(gpus=r.gpus, gpus_per_node=r.gpus_per_node, device=r.device, exchange="flat",
                               intra_gbps=net.intra_gbps, inter_gbps=net.inter_gbps, adapters_per_node=net.adapters,
                               inter_latency_us=net.inter_latency_us, loader=r.loader,
                               cpu_cores_per_gpu=r.cores_per_gpu, in_network_reduction=r.in_network_reduction,
                               hw_decoder_load=r.hw_decoder_load if r.loader == "dali" else None,
                               **(_left_out(r) if leave_one_out else {"stack": r.stack})), r.name)
    w = predict_wall_time(cfg, spec, train_images=IMAGENET_TRAIN, val_images=IMAGENET_VAL, classes=1000,
                          startup=not r.timed_from_first_step)
    return {"record": r.name, "published_s": r.published_s, "predicted_s": w.seconds,
            "ratio": w.seconds / r.published_s, "parts": w.parts, "notes": list(w.notes), "source": r.source,
            "check": r.check}


def _off(ratio: float) -> float:
    return max(ratio, 1 / ratio)


SETS = (("fitted", "fitted rounds and papers", False), ("check", "independent check (v0.7, v3.0)", True))
RESULTS = ROOT / "docs" / "results" / "published_records.json"


def summary(rows: list[dict]) -> dict[str, dict]:
    """Per set (fitted, check): records, the leave-one-out median ratio, the worst factor off,
    and how many are within 1.25x: the figures the docs quote, rounded as they quote them."""
    out = {}
    for key, _label, check in SETS:
        loo = [r["loo_ratio"] for r in rows if r["check"] == check]
        out[key] = {"records": len(loo), "median": round(statistics.median(loo), 2),
                    "worst": round(max(map(_off, loo)), 2), "within_1_25": sum(_off(x) <= 1.25 for x in loo)}
    return out


def table(rows: list[dict]) -> list[dict]:
    """Each record as the results page shows it (`rows` in the order of RECORDS): fitted records
    first, then the check."""
    shown = [{"record": row["record"], "gpus": f"{r.gpus} {r.device.upper()}" + (", SHARP" if r.in_network_reduction else ""),
              "per_gpu_batch": r.phases[-1][2] // r.gpus, "published_s": round(row["published_s"], 1),
              "predicted_s": round(row["predicted_s"], 1), "loo_ratio": round(row["loo_ratio"], 2), "check": row["check"]}
             for r, row in zip(RECORDS, rows, strict=True)]
    return sorted(shown, key=lambda row: row["check"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="every record's prediction and parts as JSON")
    add_results_argument(parser, RESULTS, "the summary the docs quote")
    args = parser.parse_args()
    rows = [{**predict(r), "loo_ratio": predict(r, leave_one_out=True)["ratio"]} for r in RECORDS]
    if args.results:
        write_results(args.results, {"sets": summary(rows), "records": table(rows)})
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'record':<30} {'published':>10} {'predicted':>10} {'ratio':>6} {'LOO':>6}  largest parts")
    for row in rows:
        parts = sorted(((v, k) for k, v in row["parts"].items() if v > 0), reverse=True)[:3]
        shown = ", ".join(f"{k} {format_seconds(v)}" for v, k in parts)
        mark = " (check)" if row["check"] else ""
        print(f"{row['record'] + mark:<30} {format_seconds(row['published_s']):>10} "
              f"{format_seconds(row['predicted_s']):>10} {row['ratio']:>6.2f} {row['loo_ratio']:>6.2f}  {shown}")
    figures = summary(rows)
    for key, label, _check in SETS:
        f = figures[key]
        print(f"{label}: {f['records']} records; leave-one-out median {f['median']:.2f}, worst "
              f"{f['worst']:.2f}x off, {f['within_1_25']} within 1.25x "
              "(aim: every record within 1.25x, median within 1.10x)")
    for name, why in LEFT_OUT:
        print(f"left out: {name}: {why}")


if __name__ == "__main__":
    main()
