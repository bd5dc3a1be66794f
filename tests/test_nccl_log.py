"""Verdicts of training.nccl_log on real published logs and synthetic edge cases."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ray_efa_eks.training.nccl_log import analyze_paths, analyze_text

FIX = Path(__file__).parent / "fixtures" / "nccl-logs"
ROOT = Path(__file__).parent.parent


@pytest.mark.parametrize(
    "name,verdict",
    [
        ("efa_p4d_nccl29_network_lines.log", "efa"),
        ("efa_old_ring_via_aws_libfabric.log", "efa"),
        ("socket_plugin_missing_nccl218.log", "fallback"),
        ("single_node_socket_loopback_nccl24.log", "undetermined"),
    ],
)
def test_real_logs(name: str, verdict: str) -> None:
    rep = analyze_paths([str(FIX / name)])
    assert rep.verdict == verdict
    assert rep.reasons and all(isinstance(r, str) for r in rep.reasons)


def test_plugin_missing_has_plugin_hint() -> None:
    rep = analyze_paths([str(FIX / "socket_plugin_missing_nccl218.log")])
    assert "plugin_not_found" in rep.causes
    assert any("NCCL_NET_PLUGIN" in h for h in rep.hints)
    assert any("socket_plugin_missing_nccl218.log:2" in r for r in rep.reasons)


def _efa_rank(host: str, pid: int, pre: str = "") -> str:
    p = f"{pre}{host}:{pid}:{pid + 1} [0] NCCL INFO "
    return (
        f"{p}NET/Plugin: Loaded net plugin Libfabric (v9)\n"
        f"{p}NET/OFI Selected provider is efa, fabric is efa-direct (found 4 nics)\n"
        f"{p}Using network Libfabric\n"
        f"{p}Channel 00/0 : 0[0] -> 8[0] [send] via NET/Libfabric/0/GDRDMA\n"
        f"{p}Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n"
    )


def test_new_format_efa_with_launcher_prefixes() -> None:
    text = _efa_rank("node-a", 10, "[1,0]<stdout>:") + _efa_rank("node-b", 20, "2026-01-01T00:00:00Z | ")
    rep = analyze_text(text)
    assert rep.verdict == "efa", rep.reasons
    assert rep.network == "Libfabric" and rep.provider == "efa"
    assert rep.hosts == ["node-a", "node-b"]


def test_mixed_efa_and_socket_ranks_is_fallback() -> None:
    sock = (
        "node-c:30:31 [0] NCCL INFO Using network Socket\n"
        "node-c:30:31 [0] NCCL INFO Channel 00/0 : 16[0] -> 0[0] [send] via NET/Socket/0\n"
    )
    rep = analyze_text(_efa_rank("node-a", 10) + _efa_rank("node-b", 20) + sock)
    assert rep.verdict == "fallback"
    assert "socket_network" in rep.causes
    assert any("NET/Socket" in r for r in rep.reasons)


def test_single_node_p2p_shm_only_is_undetermined() -> None:
    text = "".join(
        f"h1:{pid}:{pid} [{i}] NCCL INFO Channel 00/0 : {i}[{i}] -> {(i + 1) % 2}[{(i + 1) % 2}] via {tr}\n"
        for i, (pid, tr) in enumerate([(1, "P2P/IPC"), (2, "SHM/direct/direct")])
    )
    rep = analyze_text(text)
    assert rep.verdict == "undetermined"
    assert "single_node" in rep.causes


def test_plugin_failure_then_socket_is_fallback() -> None:
    text = "".join(
        f"{h}:1:1 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net-ofi.so\n"
        f"{h}:1:1 [0] NCCL INFO NET/Plugin: Using internal network plugin.\n"
        f"{h}:1:1 [0] NCCL INFO Using network Socket\n"
        for h in ("a", "b")
    )
    rep = analyze_text(text)
    assert rep.verdict == "fallback"
    assert "plugin_not_found" in rep.causes and "socket_network" in rep.causes


def test_non_efa_provider_is_fallback() -> None:
    text = _efa_rank("a", 1).replace("provider is efa", "provider is tcp") + _efa_rank("b", 2)
    rep = analyze_text(text)
    assert rep.verdict == "fallback" and "non_efa_provider" in rep.causes


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ray_efa_eks.training.nccl_log", *args], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


def test_cli_truncated_is_exit_3(tmp_path: Path) -> None:
    f = tmp_path / "trunc.log"
    f.write_bytes((FIX / "efa_old_ring_via_aws_libfabric.log").read_bytes()[:20])
    r = _cli(str(f))
    assert r.returncode == 3
    assert "unreadable" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("content", [b"", bytes(range(256)) * 64])
def test_cli_empty_or_binary_is_exit_3(tmp_path: Path, content: bytes) -> None:
    f = tmp_path / "bad.log"
    f.write_bytes(content)
    r = _cli(str(f))
    assert r.returncode == 3 and "Traceback" not in r.stderr and r.stderr.strip()


def test_cli_missing_file_is_exit_3(tmp_path: Path) -> None:
    r = _cli(str(tmp_path / "nope.log"))
    assert r.returncode == 3 and "no such file" in r.stderr


def test_cli_json_shape_and_exit_codes() -> None:
    r = _cli("--json", str(FIX / "socket_plugin_missing_nccl218.log"))
    assert r.returncode == 1
    d = json.loads(r.stdout)
    assert {"verdict", "network", "provider", "ranks", "reasons", "hints"} <= d.keys()
    assert d["verdict"] == "fallback" and d["ranks"] == 3
    assert _cli(str(FIX / "efa_p4d_nccl29_network_lines.log")).returncode == 0
    assert _cli(str(FIX / "single_node_socket_loopback_nccl24.log")).returncode == 2


def test_directory_input() -> None:
    # the whole fixture dir mixes EFA and non-EFA jobs; the Socket loopback job must not read as EFA
    rep = analyze_paths([str(FIX)])
    assert rep.verdict != "efa"


def test_optional_collnet_symbol_missing_is_still_efa() -> None:
    extra = "a:1:2 [0] NCCL INFO NET/Plugin: Failed to find ncclCollNetPlugin_v9 symbol.\n"
    rep = analyze_text(extra + _efa_rank("a", 1) + _efa_rank("b", 2))
    assert rep.verdict == "efa", rep.reasons


def test_socket_single_host_no_channels_is_undetermined() -> None:
    rep = analyze_text("h:1:1 [0] NCCL INFO Using network Socket\n")
    assert rep.verdict == "undetermined" and "Socket" in rep.reasons[0]
