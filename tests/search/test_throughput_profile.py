"""A measured cluster profile (`tianfeng calibrate --throughput`): the step curve and the links
inside and between nodes, measured by real gloo processes (emulated nodes under torchrun), and
what the cost model takes from it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.search.conftest import write_space
from tianfeng.cli import main
from tianfeng.cost.exchange import DEFAULT_PRESET, PRESETS
from tianfeng.cost.measure import fit_ring, fitted_links, tier_ranks
from tianfeng.hpo.space.read import load_space


def _profile(tmp_path: Path, links, backend: str, name: str = "p.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"kind": "tianfeng-throughput", "fits": {"8": {"fixed_s": 0.001, "image_s": 1e-4}},
                                "model": {"name": "resnet_tiny", "width": 8}, "in_channels": 3, "classes": 10,
                                "backend": backend, "links": links}))
    return path


def _cluster(tmp_path: Path, tiny_space: dict, profile: Path, gpus: int = 4, per_node: int = 2):
    measured = {**tiny_space, "cluster": {"gpus": gpus, "gpus_per_node": per_node, "device": "measured",
                                          "throughput": str(profile)}}
    return load_space(write_space(tmp_path, measured, f"{profile.stem}.yaml")).cluster


def test_tiers_are_each_nodes_ranks_and_each_local_ranks_ring_between_nodes() -> None:
    assert tier_ranks(4, 2) == ([[0, 1], [2, 3]], [[0, 2], [1, 3]])
    assert tier_ranks(6, 3) == ([[0, 1, 2], [3, 4, 5]], [[0, 3], [1, 4], [2, 5]])
    assert tier_ranks(2, 1) == ([[0], [1]], [[0, 1]])
    with pytest.raises(ValueError):
        tier_ranks(6, 4)


def test_ring_fits_recover_the_link_and_between_nodes_it_is_the_nodes_network() -> None:
    # times of an exact ring allreduce 2 (P-1) (alpha + n / (P beta)) at 10 Gbit/s and 30 us
    alpha, beta = 30e-6, 10e9 / 8

    def ring(p: int, bytes_per_s: float) -> dict[int, float]:
        return {n: 2 * (p - 1) * (alpha + n / p / bytes_per_s) for n in (1 << 16, 1 << 20, 25 << 20)}

    assert fit_ring(4, ring(4, beta)) == pytest.approx({"gbit_s": 10.0, "latency_us": 30.0}, rel=1e-6)
    # 2 nodes of 4 processes: four rings between nodes at once, each at 2.5 Gbit/s of the node's 10
    links = fitted_links(4, 2, ring(4, beta), ring(2, beta / 4))
    assert links["intra"] == pytest.approx({"gbit_s": 10.0, "latency_us": 30.0}, rel=1e-6)
    assert links["inter"] == pytest.approx({"gbit_s": 10.0, "latency_us": 30.0}, rel=1e-6)
    assert set(links["allreduce_s"]) == {"intra", "inter"}
    assert fitted_links(1, 2, None, ring(2, beta))["intra"] is None


def test_a_gpu_profile_of_one_node_leaves_the_links_between_nodes_to_the_tables(tmp_path: Path,
                                                                                tiny_space: dict) -> None:
    one_node = {"intra": {"gbit_s": 900.0, "latency_us": 5.0}, "inter": None}
    gpu = _cluster(tmp_path, tiny_space, _profile(tmp_path, one_node, "nccl", "gpu.json"))
    links = gpu.links()
    assert links.intra.gbit_s == 900.0 and links.intra.latency_us == 5.0
    table = PRESETS[DEFAULT_PRESET]
    assert links.inter == table.inter and links.adapters_per_node == table.adapters_per_node
    assert gpu.figure_sources() == {"step curve": "measured", "links in a node": "measured",
                                    "links between nodes": f"{DEFAULT_PRESET} table"}
    assert f"links between nodes {DEFAULT_PRESET} table" in gpu.describe()
    # gloo processes on one machine: emulated nodes share its loopback, so one tier stands for both
    cpu = _cluster(tmp_path, tiny_space, _profile(tmp_path, one_node, "gloo", "cpu.json")).links()
    assert cpu.inter.gbit_s == 900.0 and cpu.adapters_per_node == 1
    # a cluster key wins over the measured figure, and says so
    keyed = {**tiny_space, "cluster": {"gpus": 4, "gpus_per_node": 2, "device": "measured", "inter_gbps": 50.0,
                                       "throughput": str(tmp_path / "gpu.json")}}
    spec = load_space(write_space(tmp_path, keyed, "keyed.yaml")).cluster
    assert spec.links().inter.gbit_s == 50.0
    assert spec.figure_sources()["links between nodes"] == "cluster.inter_gbps/latency_us"


def test_a_first_format_profile_is_one_loopback_for_every_link(tmp_path: Path, tiny_space: dict) -> None:
    old = _cluster(tmp_path, tiny_space, _profile(tmp_path, {"gbit_s": 3.0, "latency_us": 40.0}, None))
    links = old.links()
    assert links.intra.gbit_s == links.inter.gbit_s == 3.0 and links.adapters_per_node == 1


@pytest.mark.slow
def test_two_emulated_nodes_measure_both_tiers_that_the_cost_model_uses(tmp_path: Path, tiny_space: dict) -> None:
    out = tmp_path / "two-nodes.json"
    assert main(["calibrate", "--throughput", "--space", str(write_space(tmp_path, tiny_space)), "--resolutions", "8",
                 "--batches", "4,16", "--processes", "2", "--nodes", "2", "--device", "cpu",
                 "--output", str(out)]) == 0
    data = json.loads(out.read_text())
    assert (data["nodes"], data["processes"], data["backend"], data["threads"]) == (2, 2, "gloo", 1)
    links = data["links"]
    for tier in ("intra", "inter"):
        assert links[tier]["gbit_s"] > 0 and links[tier]["latency_us"] >= 0
        assert sorted(map(int, links["allreduce_s"][tier])) == [1 << 16, 1 << 20, 25 << 20]
    # the stored fit is the ring fit of the stored times
    assert fitted_links(2, 2, {int(k): v for k, v in links["allreduce_s"]["intra"].items()},
                        {int(k): v for k, v in links["allreduce_s"]["inter"].items()})["inter"] == \
        pytest.approx(links["inter"])
    cluster = _cluster(tmp_path, tiny_space, out).links()
    assert cluster.intra.gbit_s == pytest.approx(links["intra"]["gbit_s"])
    assert cluster.inter.gbit_s == pytest.approx(links["inter"]["gbit_s"]) and cluster.adapters_per_node == 1


def test_emulated_gpu_nodes_are_refused_in_one_line(tmp_path: Path, tiny_space: dict, capsys) -> None:
    out = tmp_path / "never.json"
    code = main(["calibrate", "--throughput", "--space", str(write_space(tmp_path, tiny_space)), "--processes", "1",
                 "--nodes", "2", "--device", "cuda", "--output", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and not out.exists()
    assert len(err) == 1 and "--nodes: emulated nodes on this machine are CPU processes" in err[0]


def test_scheduler_options_without_slurm_are_refused(tmp_path: Path, tiny_space: dict, capsys) -> None:
    code = main(["calibrate", "--throughput", "--space", str(write_space(tmp_path, tiny_space)),
                 "--partition", "gpu"])
    assert code == 2 and "--partition: goes with --launcher slurm" in capsys.readouterr().err


@pytest.mark.parametrize(("content", "said"), [
    ([1, 2], "is not a throughput file of tianfeng calibrate --throughput (it holds list)"),
    ({"kind": "tianfeng-throughput", "fits": {"8": {"fixed_s": 0.001, "image_s": 1e308}}}, "fits.8.image_s: must be"),
    ({"kind": "tianfeng-throughput", "fits": {"8": {"fixed_s": -1, "image_s": 1e-4}}}, "fits.8.fixed_s: must be"),
    ({"kind": "tianfeng-throughput", "fits": {"8": {"fixed_s": 0.001, "image_s": "fast"}}}, "fits.8.image_s: must be"),
    ({"kind": "tianfeng-throughput", "fits": []}, "fits: must map resolutions"),
])
def test_a_malformed_or_impossible_profile_is_one_line_naming_the_field(tmp_path: Path, tiny_space: dict, capsys,
                                                                        content, said) -> None:
    """`plan --profile` of a file holding `[1, 2]`, or rates beyond what a step can take (which
    printed `nan h` and `inf h` and exited 0)."""
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(content))
    from tianfeng.recipes import DEFAULT_RECIPE

    code = main(["plan", "--config", str(DEFAULT_RECIPE), "--gpus", "8", "--profile", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and said in err and err.count("\n") == 1, err
