"""Verdicts of efacheck.nccl_log on real published logs and synthetic edge cases, each citing its deciding line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ray_efa_eks.efacheck.nccl_log import EXIT, UnreadableInput, analyze_bytes, analyze_paths, analyze_text

FIX = Path(__file__).parents[1] / "fixtures" / "nccl-logs"
ROOT = Path(__file__).parents[2]

# file -> (verdict, a cause it must name or None, the deciding lines as "file:line: text fragment")
REAL = {
    # the shared README: Libfabric on the inter-host ring links, but no provider line (the early plugin also ran on
    # tcp and sockets), so not efa
    "efa_old_ring_via_aws_libfabric.log": (
        "undetermined",
        "no_provider_line",
        [(13, "Ring 00 : 7 -> 8 [receive] via NET/AWS Libfabric/0")],
    ),
    # an unattributed excerpt (no host, no connection line, no node count): one node would print the same lines
    "efa_p4d_nccl29_network_lines.log": ("undetermined", "no_connections", [(1, "Using network AWS Libfabric")]),
    "socket_plugin_missing_nccl218.log": (
        "fallback",
        "plugin_not_found",
        [(2, "Plugin load (libnccl-net.so) returned 2")],
    ),
    "single_node_socket_loopback_nccl24.log": (
        "undetermined",
        "single_node",
        [(1, "Bootstrap : Using [0]lo:127.0.0.1")],
    ),
    "real_efa_p3dn_k8s_mpijob_nccl264_16ranks.log": (
        "efa",
        None,
        [
            (29, "NET/OFI Selected Provider is efa"),
            (31, "Using network AWS Libfabric"),
            (303, "[receive] via NET/AWS Libfabric/0"),
        ],
    ),
    "real_efa_g7e_slurm_nccl2292_ofi1180_2node.log": (
        "efa",
        None,
        [
            (31, "Selected provider is efa, fabric is efa (found 1 nics)"),
            (44, "Assigned NET plugin Libfabric to comm"),
            (75, "nRanks 2 nNodes 2"),
            (132, "via NET/Libfabric/0"),
        ],
    ),
    "real_efa_p4d_k8s_pods_rank0_view_nccl2273_ofi1162.log": (
        "efa",
        None,
        [(23, "Selected provider is efa"), (46, "nRanks 4 nNodes 4"), (115, "via NET/Libfabric/0/GDRDMA")],
    ),
    "real_socket_g6e_k8s_ofi_no_eligible_providers_nccl2273.log": (
        "fallback",
        "socket_network",
        [
            (22, "NET/OFI No eligible providers were found"),
            (35, "Assigned NET plugin Socket to comm"),
            (
                24,
                "[2025-12-28 16:04:25] llama-3-8b-node-0-0:152:386 [0] int nccl_net_ofi_create_plugin(nccl_net_ofi_plugin_t**):259 NCCL WARN NET/OFI",
            ),
            (41, "nNodes 4"),
            (87, "via NET/Socket/0"),
        ],
    ),
    "real_undet_p4d_single_node_ofi_init_failed_socket_nccl2277.log": (
        "undetermined",
        "single_node",
        [(152, "nRanks 4 nNodes 1"), (69, "NCCL WARN NET/OFI Failed to initialize sendrecv protocol")],
    ),
    "real_undet_p3dn_single_pod_np8_efa_selected_p2p_only_nccl264.log": (
        "undetermined",
        "single_node",
        [(142, "via P2P/IPC")],
    ),
}


def test_every_shared_log_is_a_fixture() -> None:
    assert {p.name for p in FIX.glob("*.log")} == set(REAL)


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_logs_verdict_and_deciding_lines(name: str) -> None:
    verdict, cause, lines = REAL[name]
    rep = analyze_paths([str(FIX / name)])
    assert rep.verdict == verdict, rep.reasons
    if cause:
        assert cause in rep.causes, rep.causes
    for line, text in lines:
        cited = [e for e in rep.evidence if e.startswith(f"{FIX / name}:{line}: ")]
        assert cited and text in cited[0], (line, rep.evidence)
        assert any(f"{name}:{line}:" in r for r in rep.reasons), rep.reasons  # the reason names it too


def test_p4d_single_node_reports_the_failed_plugin_too() -> None:
    rep = analyze_paths([str(FIX / "real_undet_p4d_single_node_ofi_init_failed_socket_nccl2277.log")])
    assert "ofi_init_failed" in rep.causes and rep.nodes == 1


def test_rank0_view_trap_lines_are_not_loopback() -> None:
    rep = analyze_paths([str(FIX / "real_efa_p4d_k8s_pods_rank0_view_nccl2273_ofi1162.log")])
    assert "socket_ifname" not in rep.causes and rep.nodes == 4


def _efa_rank(host: str, pid: int, pre: str = "", nics: int = 4, gdr: str = "/GDRDMA", post: str = "") -> str:
    p = f"{pre}{host}:{pid}:{pid + 1} [0] NCCL INFO "
    return (
        f"{p}NET/Plugin: Loaded net plugin Libfabric (v9){post}\n"
        f"{p}NET/OFI Selected provider is efa, fabric is efa-direct (found {nics} nics){post}\n"
        f"{p}Using network Libfabric{post}\n"
        f"{p}Channel 00/0 : 0[0] -> 8[0] [send] via NET/Libfabric/0{gdr}{post}\n"
        f"{p}Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read{post}\n"
    )


@pytest.mark.parametrize(
    "pre_a,pre_b",
    [
        ("[1,0]<stdout>:", "2026-01-01T00:00:00Z | "),  # mpirun, CloudWatch
        ("0: ", "1: "),  # srun -l
        ("[pod/w-0/ray-worker] ", "[pod/w-1/ray-worker] "),  # kubectl logs --prefix
        ("(RayTrainWorker pid=11, ip=10.0.0.1) ", "(RayTrainWorker pid=12, ip=10.0.0.2) "),  # Ray worker prefix
    ],
)
def test_efa_with_launcher_prefixes(pre_a: str, pre_b: str) -> None:
    rep = analyze_text(_efa_rank("node-a", 10, pre_a) + _efa_rank("node-b", 20, pre_b), expect_gdrdma=True)
    assert rep.verdict == "efa", rep.reasons
    assert rep.network == "Libfabric" and rep.provider == "efa"
    assert rep.hosts == ["node-a", "node-b"]
    assert any("<text>:4: " in e and "via NET/Libfabric/0/GDRDMA" in e for e in rep.evidence)


def test_ray_repeated_suffix_is_stripped() -> None:
    post = " [repeated 7x across cluster]"
    rep = analyze_text(_efa_rank("a", 1, "(RayTrainWorker pid=1) ", post=post) + _efa_rank("b", 2), expect_gdrdma=True)
    assert rep.verdict == "efa", rep.reasons
    assert rep.network == "Libfabric"  # not "Libfabric [repeated 7x across cluster]"


def test_single_host_efa_selected_p2p_only_is_undetermined() -> None:
    # the miss: aws-ofi-nccl loaded with provider efa, every connection P2P/SHM
    text = "".join(
        _efa_rank("h1", 10 + i).replace("via NET/Libfabric/0/GDRDMA", "via SHM/direct/direct") for i in range(4)
    )
    rep = analyze_text(text)
    assert rep.verdict == "undetermined" and "single_node" in rep.causes
    assert any("<text>:4: " in e and "via SHM/direct/direct" in e for e in rep.evidence), rep.evidence


def test_two_hosts_each_selecting_efa_is_efa_without_connection_lines() -> None:
    # two distinct hosts, each with its ranks on Libfabric and provider efa, nothing contradicting: NCCL sends
    # between different host hashes over the network it selected, so the job's inter-node transport was EFA
    text = "".join("\n".join(_efa_rank(h, 1).splitlines()[:3]) + "\n" for h in ("h1", "h2"))
    rep = analyze_text(text)
    assert rep.verdict == "efa", rep.reasons
    assert any(e.startswith("<text>:5: ") and "h2" in e for e in rep.evidence), rep.evidence  # h2's own line
    # one host, a host without a provider line, a tcp host or nNodes 1 are no such proof
    assert analyze_text("\n".join(_efa_rank("h1", 1).splitlines()[:3]) + "\n").verdict == "undetermined"
    no_prov = text.replace(
        "h2:1:2 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct (found 4 nics)\n", ""
    )
    assert no_prov != text and analyze_text(no_prov).verdict == "undetermined"
    assert analyze_text(text + "h3:1:2 [0] NCCL INFO Using network Libfabric\n").verdict == "undetermined"
    assert (
        analyze_text(
            text.replace(
                "h2:1:2 [0] NCCL INFO NET/OFI Selected provider is efa",
                "h2:1:2 [0] NCCL INFO NET/OFI Selected provider is tcp",
            )
        ).verdict
        == "fallback"
    )
    one = text + "h1:1:2 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0\n"
    assert analyze_text(one).verdict == "undetermined"


def _orders(lines: list[str]) -> list[list[str]]:
    """The line orders every excerpt must give the same verdict in: as published, reversed, and shuffled ones."""
    import random

    out = [list(lines), list(reversed(lines))]
    rng = random.Random(25)
    for _ in range(30):
        out.append(rng.sample(lines, len(lines)))
    return out


@pytest.mark.parametrize("name", ["efa_p4d_nccl29_network_lines.log", "efa_old_ring_via_aws_libfabric.log"])
def test_shared_excerpts_are_undetermined_in_any_line_order(name: str) -> None:
    lines = (FIX / name).read_text().splitlines()
    for order in _orders(lines):
        rep = analyze_text("\n".join(order) + "\n")
        assert rep.verdict == "undetermined", (order[:4], rep.reasons)


def test_every_shared_log_keeps_its_verdict_in_any_line_order() -> None:
    for name, (verdict, _cause, _lines) in REAL.items():
        lines = (FIX / name).read_text().splitlines()
        for order in _orders(lines)[:6]:
            assert analyze_text("\n".join(order) + "\n").verdict == verdict, name


_ONE_POD = "real_undet_p3dn_single_pod_np8_efa_selected_p2p_only_nccl264.log"


def _strip_host(line: str) -> str:
    pre, sep, rest = line.partition(" NCCL ")
    return f"NCCL {rest}" if sep else line


@pytest.mark.parametrize("keep", ["all", "net_lines"])
def test_stripped_one_pod_8_rank_log_is_never_efa(keep: str) -> None:
    # the one-pod, 8-rank log (all ranks in one pod, provider efa, P2P only), host prefixes stripped; "net_lines"
    # keeps only the lines people quote (network, provider, bootstrap), as in efa_p4d_nccl29_network_lines.log
    lines = [_strip_host(ln) for ln in (FIX / _ONE_POD).read_text().splitlines()]
    if keep == "net_lines":
        lines = [ln for ln in lines if any(k in ln for k in ("Using network", "Selected Provider", "Bootstrap"))]
        assert sum("Using network" in ln for ln in lines) >= 8 and any("Selected Provider is efa" in ln for ln in lines)
    for order in _orders(lines):
        rep = analyze_text("\n".join(order) + "\n")
        assert rep.verdict != "efa", rep.reasons


def test_aws_libfabric_without_provider_line_is_not_efa() -> None:
    # two hosts, inter-host connections on the old "AWS Libfabric" network, no "Selected Provider" line
    text = "".join(
        f"{h}:1:1 [0] NCCL INFO Using network AWS Libfabric\n"
        f"{h}:1:1 [0] NCCL INFO Ring 00 : 0[0] -> 8[0] [send] via NET/AWS Libfabric/0\n"
        for h in ("a", "b")
    )
    rep = analyze_text(text)
    assert rep.verdict == "undetermined" and "no_provider_line" in rep.causes, rep.reasons
    assert rep.reasons[0].startswith("Libfabric network but no 'Selected provider' line")


def test_node_count_with_every_comm_on_libfabric_is_efa() -> None:
    text = "".join("\n".join(_efa_rank(h, 1).splitlines()[:3]) + "\n" for h in ("h1",)) + (
        "h1:1:2 [0] NCCL INFO comm 0x1 rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0\n"
    )
    rep = analyze_text(text)
    assert rep.verdict == "efa" and rep.nodes == 2
    assert any(e.startswith("<text>:4: ") and "nNodes 2" in e for e in rep.evidence)


def test_new_libfabric_without_provider_line_is_undetermined() -> None:
    text = "".join(
        f"{h}:1:1 [0] NCCL INFO Using network Libfabric\n"
        f"{h}:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Libfabric/0\n"
        for h in ("a", "b")
    )
    rep = analyze_text(text)
    assert rep.verdict == "undetermined" and "no_provider_line" in rep.causes


def test_tcp_provider_next_to_libfabric_is_fallback() -> None:
    text = "".join(
        f"{h}:1:1 [0] NCCL INFO NET/OFI Selected provider is tcp, fabric is 10.0.0.0/16 (found 1 nics)\n"
        f"{h}:1:1 [0] NCCL INFO Using network Libfabric\n"
        f"{h}:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Libfabric/0\n"
        for h in ("a", "b")
    )
    rep = analyze_text(text)
    assert rep.verdict == "fallback" and "non_efa_provider" in rep.causes
    assert (
        "<text>:1: a:1:1 [0] NCCL INFO NET/OFI Selected provider is tcp, fabric is 10.0.0.0/16 (found 1 nics)"
        in rep.evidence
    )


def test_failed_to_initialize_any_net_plugin_is_fallback() -> None:
    text = (
        "a:1:1 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so\n"
        "a:1:1 [0] init.cc:233 NCCL WARN Failed to initialize any NET plugin\n"
    )
    rep = analyze_text(text)
    assert rep.verdict == "fallback" and "net_init_failed" in rep.causes
    assert rep.evidence[0].startswith("<text>:2: ")


def test_nccl_net_forcing_socket_is_fallback() -> None:
    text = "".join(
        f"{h}:1:1 [0] NCCL INFO NCCL_NET set by environment to Socket\n"
        f"{h}:1:1 [0] NCCL INFO Using network Socket\n"
        f"{h}:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0\n"
        for h in ("a", "b")
    )
    rep = analyze_text(text)
    assert rep.verdict == "fallback" and {"net_forced", "socket_network"} <= set(rep.causes)
    assert "<text>:1: a:1:1 [0] NCCL INFO NCCL_NET set by environment to Socket" in rep.evidence


@pytest.mark.parametrize(
    "warn",
    [
        "[2026-01-02 10:24:27] {h}:1:1 [0] int nccl_net_ofi_create_plugin(nccl_net_ofi_plugin_t**):353 NCCL WARN NET/OFI aws-ofi-nccl initialization failed",
        "{h}:1:1 [0] nccl_ofi_net.cc:1234 (nccl_net_ofi_init) NCCL WARN NET/OFI aws-ofi-nccl initialization failed",
    ],
)
def test_plugin_init_failure_warn_forms_then_socket_is_fallback(warn: str) -> None:
    text = "".join(
        f"{h}:1:1 [0] NCCL INFO NET/Plugin: Loaded net plugin Libfabric (v10)\n" + warn.format(h=h) + "\n"
        f"{h}:1:1 [0] NCCL INFO Initialized NET plugin Socket\n"
        f"{h}:1:1 [0] NCCL INFO Using network Socket\n"
        for h in ("a", "b")
    )
    rep = analyze_text(text)
    assert rep.verdict == "fallback" and "ofi_init_failed" in rep.causes, rep.reasons
    assert any(e.startswith("<text>:2: ") and "NCCL WARN NET/OFI" in e for e in rep.evidence)


def test_plugin_failed_and_nccl_carried_on_without_connections_is_fallback() -> None:
    text = (
        "a:1:1 [0] NCCL INFO NET/OFI No eligible providers were found\n"
        "a:1:1 [0] NCCL INFO Initialized NET plugin Socket\n"
    )
    rep = analyze_text(text)
    assert rep.verdict == "fallback" and "no_efa_provider" in rep.causes
    assert rep.evidence[0].startswith("<text>:1: ")


def test_bootstrap_no_space_on_loopback_is_single_node() -> None:
    rep = analyze_text(
        "h:1:1 [0] NCCL INFO Bootstrap: Using lo:127.0.0.1<0>\nh:1:1 [0] NCCL INFO Using network Socket\n"
    )
    assert rep.verdict == "undetermined" and {"single_node", "socket_ifname"} <= set(rep.causes)


# --- expected topology ---------------------------------------------------------------------------------------

G7E = str(FIX / "real_efa_g7e_slurm_nccl2292_ofi1180_2node.log")
P4D = str(FIX / "real_efa_p4d_k8s_pods_rank0_view_nccl2273_ofi1162.log")


def test_expect_nodes() -> None:
    assert analyze_paths([G7E], expect_nodes=2).verdict == "efa"
    rep = analyze_paths([G7E], expect_nodes=4)
    assert rep.verdict == "fallback" and rep.causes == ["fewer_nodes"]
    assert any(":75: " in e and "nNodes 2" in e for e in rep.evidence)
    single = analyze_paths(
        [str(FIX / "real_undet_p4d_single_node_ofi_init_failed_socket_nccl2277.log")], expect_nodes=2
    )
    assert single.verdict == "fallback" and "fewer_nodes" in single.causes


def test_expect_nics() -> None:
    assert analyze_paths([G7E], expect_nics=1).verdict == "efa"
    rep = analyze_paths([G7E], expect_nics=32)
    assert rep.verdict == "fallback" and "fewer_nics" in rep.causes
    assert any(":31: " in e and "found 1 nics" in e for e in rep.evidence)
    p5 = _efa_rank("a", 1, nics=32) + _efa_rank("b", 2, nics=32)
    assert analyze_text(p5, expect_nics=32).verdict == "efa"
    short = analyze_text(_efa_rank("a", 1, nics=32) + _efa_rank("b", 2, nics=16), expect_nics=32)
    assert short.verdict == "fallback" and any("host b" in r and "16" in r for r in short.reasons)


def test_expect_gdrdma() -> None:
    assert analyze_paths([P4D], expect_gdrdma=True).verdict == "efa"
    rep = analyze_paths([G7E], expect_gdrdma=True)
    assert rep.verdict == "fallback" and rep.causes == ["no_gdrdma"]
    assert any(":132: " in e for e in rep.evidence)


# --- every rank speaks ---------------------------------------------------------------------------------------


def _rank_dir(tmp_path: Path, extra: dict[str, bytes]) -> Path:
    d = tmp_path / "ranks"
    d.mkdir()
    (d / "rank0.log").write_text(_efa_rank("node-a", 1))
    (d / "rank1.log").write_text(_efa_rank("node-b", 2))
    for name, content in extra.items():
        (d / name).write_bytes(content)
    return d


def test_all_ranks_efa(tmp_path: Path) -> None:
    assert analyze_paths([str(_rank_dir(tmp_path, {}))]).verdict == "efa"


@pytest.mark.parametrize(
    "content,why", [(b"", "empty"), (b"\x00\x01\x02" * 100, "binary"), (b"hello\n", "no complete NCCL")]
)
def test_one_silent_rank_makes_it_undetermined(tmp_path: Path, content: bytes, why: str) -> None:
    rep = analyze_paths([str(_rank_dir(tmp_path, {"rank2.log": content}))])
    assert rep.verdict == "undetermined" and "rank_silent" in rep.causes
    assert len(rep.silent) == 1 and "rank2.log" in rep.silent[0] and why in rep.silent[0]
    assert any("rank2.log" in r for r in rep.reasons)


def test_missing_rank_file_among_many(tmp_path: Path) -> None:
    d = _rank_dir(tmp_path, {})
    rep = analyze_paths([str(d / "rank0.log"), str(d / "rank1.log"), str(d / "rank2.log")])
    assert rep.verdict == "undetermined" and "rank2.log: no such file" in rep.silent[0]


def test_silent_rank_does_not_hide_a_fallback(tmp_path: Path) -> None:
    d = _rank_dir(
        tmp_path,
        {"rank2.log": b"", "rank3.log": b"c:3:3 [0] NCCL INFO Channel 00/0 : 3[0] -> 0[0] [send] via NET/Socket/0\n"},
    )
    rep = analyze_paths([str(d)])
    assert rep.verdict == "fallback" and rep.silent


def test_nothing_readable_is_unreadable() -> None:
    with pytest.raises(UnreadableInput, match="a: empty.*b: binary"):
        analyze_bytes([("a", b" \n"), ("b", b"\x00" * 10)])


# --- CLI -----------------------------------------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ray_efa_eks.efacheck.nccl_log", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
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
    assert {"verdict", "network", "provider", "ranks", "reasons", "hints", "evidence", "nodes", "silent"} <= d.keys()
    assert d["verdict"] == "fallback" and d["ranks"] == 3
    assert d["evidence"][0].endswith(
        "socket_plugin_missing_nccl218.log:2: user:852750:852750 [0] NCCL INFO NET/Plugin : "
        "Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: cannot open shared object "
        "file: No such file or directory"
    )
    assert _cli(G7E).returncode == 0
    assert _cli("--expect-nodes", "4", G7E).returncode == 1
    assert _cli("--expect-gdrdma", "--expect-nics", "1", P4D).returncode == 0
    assert _cli(str(FIX / "single_node_socket_loopback_nccl24.log")).returncode == 2


@pytest.mark.parametrize("args", [["--expect-nodes", "0", G7E], ["--expect-nics", "x", G7E], ["--bogus", G7E], []])
def test_cli_usage_error_is_64_not_a_verdict(args: list[str]) -> None:
    r = _cli(*args)
    assert r.returncode == EXIT["usage"] == 64 and "Traceback" not in r.stderr
    assert r.returncode not in (EXIT["efa"], EXIT["fallback"], EXIT["undetermined"], EXIT["unreadable"])


def test_cli_help_documents_exit_codes() -> None:
    r = _cli("--help")
    rows = {
        ln.split(None, 1)[0]: ln.split(None, 1)[1]
        for ln in r.stdout.split("exit codes:\n", 1)[1].splitlines()
        if ln[:6].strip().isdigit()
    }  # "  64   usage error" (efacheck/exit_codes.py's rows)
    assert r.returncode == 0 and rows["64"] == "usage error" and rows["2"].startswith("undetermined"), r.stdout


def test_directory_input() -> None:
    # the whole fixture dir mixes EFA and non-EFA jobs; Socket connections among them must not read as EFA
    rep = analyze_paths([str(FIX)])
    assert rep.verdict == "fallback"


def test_optional_collnet_symbol_missing_is_still_efa() -> None:
    extra = "a:1:2 [0] NCCL INFO NET/Plugin: Failed to find ncclCollNetPlugin_v9 symbol.\n"
    rep = analyze_text(extra + _efa_rank("a", 1) + _efa_rank("b", 2))
    assert rep.verdict == "efa", rep.reasons


def test_mixed_efa_and_socket_ranks_is_fallback() -> None:
    sock = (
        "node-c:30:31 [0] NCCL INFO Using network Socket\n"
        "node-c:30:31 [0] NCCL INFO Channel 00/0 : 16[0] -> 0[0] [send] via NET/Socket/0\n"
    )
    rep = analyze_text(_efa_rank("node-a", 10) + _efa_rank("node-b", 20) + sock)
    assert rep.verdict == "fallback" and "socket_network" in rep.causes
    assert "<text>:12: node-c:30:31 [0] NCCL INFO Channel 00/0 : 16[0] -> 0[0] [send] via NET/Socket/0" in rep.evidence


def test_socket_single_host_no_channels_is_undetermined() -> None:
    rep = analyze_text("h:1:1 [0] NCCL INFO Using network Socket\n")
    assert rep.verdict == "undetermined" and "Socket" in rep.reasons[0]


def test_docs_table_covers_every_cause() -> None:
    from ray_efa_eks.efacheck.nccl_log import HINTS

    sec = (ROOT / "docs/efa-gate.md").read_text()
    for cause, hint in HINTS.items():
        assert f"| `{cause}` |" in sec and hint in sec, cause


def test_failed_candidate_name_or_protocol_then_working_plugin_is_still_efa() -> None:
    pre = "".join(
        f"{h}:1:2 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net-ofi.so.\n"
        f"[2026-01-02 10:24:27] {h}:1:2 [0] int nccl_net_ofi_create_plugin(nccl_net_ofi_plugin_t**):208 NCCL WARN "
        f"NET/OFI Failed to initialize rdma protocol\n"
        for h in ("a", "b")
    )
    rep = analyze_text(pre + _efa_rank("a", 1) + _efa_rank("b", 1))
    assert rep.verdict == "efa", rep.reasons


def test_silent_rank_is_not_read_as_a_missing_node(tmp_path: Path) -> None:
    # no nNodes line: the hosts that logged are the node count, unless a rank's log is missing
    d = _rank_dir(tmp_path, {})
    (d / "rank1.log").write_bytes(b"")
    rep = analyze_paths([str(d)], expect_nodes=2)
    assert rep.verdict == "undetermined" and "rank_silent" in rep.causes and "fewer_nodes" not in rep.causes
    (d / "rank1.log").unlink()
    rep = analyze_paths([str(d)], expect_nodes=2)
    assert rep.verdict == "fallback" and rep.causes == ["fewer_nodes"]
