"""efacheck.stack_probe: versions from real NCCL logs, the probe on this machine, cross-rank and manifest checks."""

from __future__ import annotations

from pathlib import Path

import pytest
import ray
import torch

from ray_efa_eks.efacheck import stack_probe as sp

FIX = Path(__file__).parents[1] / "fixtures" / "nccl-logs"
V11 = sp.MANIFESTS["train-ml-cuda-v1.1"]


def test_manifest_of_the_default_image() -> None:
    assert V11 == {"ray": "2.58.0", "torch": "2.13.0", "cuda": "13.0.2", "nccl": "2.29.7"}
    assert sp.manifest_for("public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1") == V11
    assert sp.manifest_for("123.dkr.ecr.us-east-1.amazonaws.com/my/ray:other") is None
    assert sp.manifest_for(None) is None


@pytest.mark.parametrize(
    "name, want",
    [
        (
            "real_efa_g7e_slurm_nccl2292_ofi1180_2node.log",
            {"nccl": "2.29.2", "aws_ofi_nccl": "1.18.0", "libfabric": "2.3", "driver_api": "12.8"},
        ),
        (
            "real_undet_p4d_single_node_ofi_init_failed_socket_nccl2277.log",
            {"nccl": "2.27.7", "aws_ofi_nccl": "1.17.1", "libfabric": "2.3", "driver_api": "13.0"},
        ),
        ("socket_plugin_missing_nccl218.log", {"nccl": "2.18.1"}),
    ],
)
def test_parse_real_nccl_logs(name: str, want: dict) -> None:
    got = sp.parse_nccl_log((FIX / name).read_text(errors="replace"))
    assert {k: got.get(k) for k in want} == want
    assert set(got) <= {"nccl", "aws_ofi_nccl", "libfabric", "driver_api", "net_plugin"}
    if "aws_ofi_nccl" not in want:
        assert "aws_ofi_nccl" not in got and "libfabric" not in got


def test_parse_fi_info_version() -> None:
    out = "fi_info: 2.1.0amzn3.0\nlibfabric: 2.1.0amzn3.0\nlibfabric api: 2.1\n"
    assert sp.parse_fi_info_version(out) == "2.1.0"
    assert sp.parse_fi_info_version("") is None


def test_probe_reads_each_layer(tmp_path: Path) -> None:
    (tmp_path / "proc/driver/nvidia").mkdir(parents=True)
    (tmp_path / "proc/driver/nvidia/version").write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  (dvs-builder@U16)\n"
    )
    (tmp_path / "usr/local/cuda").mkdir(parents=True)
    (tmp_path / "usr/local/cuda/version.json").write_text('{"cuda": {"name": "CUDA SDK", "version": "13.0.1"}}')
    calls = []

    def run(argv):
        calls.append(argv)
        return "fi_info: 2.3.0amzn1.0\nlibfabric: 2.3.0amzn1.0\n"

    env = {sp.IMAGE_ENV: "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1"}
    p = sp.probe("", env=env, root=str(tmp_path), run=run)
    assert p["torch"] == torch.__version__ and p["ray"] == ray.__version__ == "2.58.0"
    assert p["driver"] == "580.95.05" and p["cuda"] == "13.0.1"
    assert p["libfabric"] == "2.3.0" and calls == [["fi_info", "--version"]]
    assert p["image"].endswith("train-ml-cuda-v1.1") and p["sources"]["image"] == f"${sp.IMAGE_ENV}"
    assert p["nccl"] is None and p["aws_ofi_nccl"] is None  # CPU torch, no NCCL log: unknown, not guessed

    # the NCCL log and $CUDA_VERSION (NVIDIA's images) win over weaker sources
    log = (FIX / "real_efa_g7e_slurm_nccl2292_ofi1180_2node.log").read_text()
    p = sp.probe(log, env={**env, "CUDA_VERSION": "13.0.2"}, root=str(tmp_path), run=run)
    assert (p["nccl"], p["aws_ofi_nccl"], p["libfabric"], p["cuda"]) == ("2.29.2", "1.18.0", "2.3", "13.0.2")
    assert p["sources"]["libfabric"] == "NCCL log (NET/OFI)"


def test_probe_on_a_bare_host(tmp_path: Path) -> None:
    p = sp.probe("", env={}, root=str(tmp_path), run=lambda argv: None)
    assert p["driver"] is None and p["libfabric"] is None and p["image"] is None
    assert p["torch"] == torch.__version__


def _rank(**kw) -> dict:
    base = {
        "torch": "2.13.0+cu130",
        "cuda": "13.0.2",
        "driver": "580.95.05",
        "nccl": "2.29.7",
        "aws_ofi_nccl": "1.18.0",
        "libfabric": "2.3",
        "ray": "2.58.0",
        "image": "ray:train-ml-cuda-v1.1",
        "host": "node-a",
    }
    return {**base, **kw}


def test_versions_match_the_manifest() -> None:
    r = sp.compare_versions([_rank(), _rank(host="node-b")], V11)
    assert r["status"] == "ok" and r["reasons"] == []
    torch_row = next(t for t in r["table"] if t["key"] == "torch")
    assert torch_row == {"key": "torch", "expected": "2.13.0", "values": {"2.13.0+cu130": "0-1"}, "status": "ok"}


def test_torch_build_cuda_is_less_precise_but_matches() -> None:
    assert sp.version_matches("13.0.2", "13.0") and not sp.version_matches("13.0.2", "12.9")
    assert sp.version_matches("2.13.0", "2.13.0+cu130") and not sp.version_matches("2.29.7", "2.29.2")


def test_ranks_disagreeing_is_a_failure() -> None:
    probes = [_rank(), _rank(), _rank(host="node-b", nccl="2.27.3"), _rank(host="node-b", nccl="2.27.3")]
    r = sp.compare_versions(probes, V11)
    assert r["status"] == "failure"
    assert r["reasons"][0] == "ranks disagree on nccl: 2.29.7 on ranks 0-1 (node-a); 2.27.3 on ranks 2-3 (node-b)"


def test_manifest_mismatch_warns_or_fails_when_strict() -> None:
    probes = [_rank(ray="2.57.0"), _rank(ray="2.57.0")]
    r = sp.compare_versions(probes, V11)
    assert r["status"] == "warning" and "ray 2.57.0 differs from the image manifest's 2.58.0" in r["reasons"][0]
    assert sp.compare_versions(probes, V11, strict=True)["status"] == "failure"
    assert sp.compare_versions(probes, None)["status"] == "ok"  # no manifest: only cross-rank agreement


def test_parse_manifest() -> None:
    assert sp.parse_manifest('{"ray": "2.58.0", "nccl": "2.29.7"}') == {"ray": "2.58.0", "nccl": "2.29.7"}
    with pytest.raises(ValueError, match="not JSON"):
        sp.parse_manifest("ray=2.58.0")
    with pytest.raises(ValueError, match="'pytorch' is not a known layer"):
        sp.parse_manifest('{"pytorch": "2.13.0"}')
    with pytest.raises(ValueError, match="'ray' is not a known layer with a string version"):
        sp.parse_manifest('{"ray": 2.58}')


# -- what drifts most below the image: EFA driver, the loaded plugin file, pyarrow -----------------------


def test_probe_rows_for_the_efa_driver_the_loaded_plugin_and_pyarrow(tmp_path: Path) -> None:
    import pyarrow

    assert {"efa_driver", "net_plugin", "pyarrow"} <= set(sp.KEYS)
    (tmp_path / "host/sys/module/efa").mkdir(parents=True)  # a host view nothing mounts any more: not read
    (tmp_path / "host/sys/module/efa/version").write_text("2.17.0g\n")
    (tmp_path / "sys/module/efa").mkdir(parents=True)
    (tmp_path / "sys/module/efa/version").write_text("2.10.0g\n")
    log = (FIX / "real_efa_g7e_slurm_nccl2292_ofi1180_2node.log").read_text()
    p = sp.probe(log, env={}, root=str(tmp_path), run=lambda argv: None)
    assert p["efa_driver"] == "2.10.0g" and p["sources"]["efa_driver"].startswith("/sys/module/efa/version (the node")
    assert p["net_plugin"] == "/opt/aws-ofi-nccl/lib/libnccl-net.so"  # not the tuner plugin line
    assert p["pyarrow"] == pyarrow.__version__ and p["sources"]["pyarrow"] == "pyarrow.__version__"
    # NCCL 2.27's shorter plugin line
    old = (FIX / "real_undet_p4d_single_node_ofi_init_failed_socket_nccl2277.log").read_text()
    p = sp.probe(old, env={}, root=str(tmp_path), run=lambda argv: None)
    assert p["efa_driver"] == "2.10.0g" and p["net_plugin"] == "libnccl-net.so"
    bare = sp.probe("", env={}, root=str(tmp_path / "none"), run=lambda argv: None)
    assert bare["efa_driver"] is None and bare["net_plugin"] is None
    assert bare["sources"]["efa_driver"].startswith("not visible: no /sys/module/efa/version in this pod")


def test_ranks_on_different_efa_drivers_or_plugin_files_fail() -> None:
    probes = [
        _rank(efa_driver="2.17.0g", net_plugin="/opt/amazon/ofi-nccl/lib/libnccl-net.so", pyarrow="21.0.0"),
        _rank(host="node-b", efa_driver="2.10.0g", net_plugin="/usr/lib/libnccl-net.so", pyarrow="21.0.0"),
    ]
    r = sp.compare_versions(probes, V11)
    assert r["status"] == "failure"
    assert any(x.startswith("ranks disagree on efa_driver: 2.17.0g on ranks 0 (node-a); 2.10.0g") for x in r["reasons"])
    assert any(x.startswith("ranks disagree on net_plugin") for x in r["reasons"])
    rows = {t["key"]: t for t in r["table"]}
    assert rows["pyarrow"]["status"] == "ok" and rows["pyarrow"]["values"] == {"21.0.0": "0-1"}
