"""efa_check: formulas, environment probe, verdict logic, and a real run on a local 2-node Ray cluster with gloo."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ray_efa_eks.training.efa_check import busbw, judge, probe_env, sizes

ROOT = Path(__file__).parent.parent
FIX = Path(__file__).parent / "fixtures" / "nccl-logs"


def test_busbw_formula() -> None:
    assert busbw(10.0, 2) == pytest.approx(10.0)
    assert busbw(10.0, 16) == pytest.approx(10.0 * 2 * 15 / 16)
    assert busbw(10.0, 1) == 0.0


def test_sizes_doubling() -> None:
    assert sizes(1 << 20, 1 << 23) == [1 << 20, 1 << 21, 1 << 22, 1 << 23]


def test_probe_env_finds_devices_plugin_and_fi_info(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "uverbs0").touch()
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "libnccl-net-ofi.so").touch()
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    fi = bin_ / "fi_info"
    fi.write_text("#!/bin/sh\necho 'provider: efa'\n")
    fi.chmod(fi.stat().st_mode | stat.S_IEXEC)
    env = {"PATH": str(bin_), "LD_LIBRARY_PATH": str(lib), "FI_PROVIDER": "efa", "NCCL_NET_PLUGIN": "ofi"}
    p = probe_env(env, dev_dir=str(dev))
    assert p["efa_devices"] == ["uverbs0"]
    assert p["fi_info_efa"] == "efa"
    assert str(lib / "libnccl-net-ofi.so") in p["ofi_plugin_libs"]
    assert p["env"]["FI_PROVIDER"] == "efa" and p["env"]["NCCL_SOCKET_IFNAME"] is None


def test_probe_env_empty_pod(tmp_path: Path) -> None:
    p = probe_env({"PATH": str(tmp_path)}, dev_dir=str(tmp_path / "none"))
    assert p["efa_devices"] == [] and p["fi_info_efa"] is None


def _data(logs: dict[str, bytes]) -> dict:
    res = [{"bytes": 1 << 20, "time_s": 1e-3}]
    return {"world": 2, "nodes": 2, "outs": [{"results": res, "logs": logs, "probe": {}}, {"results": res, "logs": {}, "probe": {}}]}


def test_judge_uses_nccl_logs_and_floor() -> None:
    logs = {"a": (FIX / "efa_old_ring_via_aws_libfabric.log").read_bytes()}
    r = judge(_data(logs), "nccl", None)
    assert r["code"] == 0 and r["sweep"][0]["busbw_gbps"] == pytest.approx((1 << 20) / 1e-3 / 1e9)
    low = judge(_data(logs), "nccl", 1000.0)
    assert low["code"] == 1 and any("below the floor" in x for x in low["reasons"])


def test_judge_gloo_never_efa() -> None:
    r = judge(_data({}), "gloo", None)
    assert r["code"] == 2 and any("gloo" in x for x in r["reasons"])


def test_local_two_node_cluster_gloo_is_not_efa() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "ray_efa_eks.training.efa_check", "--local", "--json", "--max-bytes", str(256 << 10), "--iters", "2"],
        cwd=ROOT, capture_output=True, text=True, timeout=180, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )
    assert r.returncode in (1, 2), r.stderr[-2000:]
    out = json.loads(r.stdout[r.stdout.index("{"):])
    assert out["verdict"] != "efa" and out["reasons"]
    assert out["backend"] == "gloo" and out["nodes"] == 2 and out["world"] == 2
    assert len(out["sweep"]) >= 1
