"""The EFA hardware-counter witness on sysfs trees laid out like /sys/class/infiniband (one integer per file)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ray_efa_eks.efacheck.efa_counters import (
    TOLERANCE,
    allreduce_bytes_per_node,
    combine,
    counter_delta,
    judge_counters,
    node_bytes,
    read_counters,
)
from ray_efa_eks.efacheck.nccl_log import analyze_paths

FIX = Path(__file__).parents[1] / "fixtures" / "nccl-logs"
GB = 10**9


def lay_out(root: Path, devices: dict[str, dict[str, object]]) -> str:
    """Write <root>/<dev>/ports/1/hw_counters/<name> files; a bytes value is written raw."""
    for dev, counters in devices.items():
        hw = root / dev / "ports" / "1" / "hw_counters"
        hw.mkdir(parents=True, exist_ok=True)
        for name, value in counters.items():
            (hw / name).write_bytes(value if isinstance(value, bytes) else f"{value}\n".encode())
    return str(root)


def _node(tmp: Path, name: str, tx: int, rx: int, extra: dict | None = None) -> str:
    return lay_out(
        tmp / name,
        {
            "rdmap16s27": {"tx_bytes": tx, "rx_bytes": rx, **(extra or {})},
            "rdmap32s27": {"tx_bytes": tx, "rx_bytes": rx},
        },
    )


def test_read_counters_and_delta(tmp_path: Path) -> None:
    before = read_counters(_node(tmp_path, "b", 100, 200, {"rdma_write_bytes": 5, "send_bytes": 7}))
    assert before["rdmap16s27"] == {
        "tx_bytes": 100,
        "rx_bytes": 200,
        "rdma_write_bytes": 5,
        "send_bytes": 7,
        "errors": {},
    }
    after = read_counters(
        _node(tmp_path, "a", 100 + 3 * GB, 200 + 3 * GB, {"rdma_write_bytes": 5 + GB, "send_bytes": 7})
    )
    d = counter_delta(before, after)
    assert d["rdmap16s27"]["tx_bytes"] == 3 * GB and d["rdmap16s27"]["rdma_write_bytes"] == GB
    assert node_bytes(d)["rdmap32s27"] == {"sent": 3 * GB, "received": 3 * GB}


def _deltas(tmp: Path, node: str, moved: int) -> dict:
    before = read_counters(_node(tmp, f"{node}-0", 1000, 1000))
    after = read_counters(_node(tmp, f"{node}-1", 1000 + moved, 1000 + moved))
    return counter_delta(before, after)


def test_counters_move(tmp_path: Path) -> None:
    # two devices per node, 3 GB each way on each: 6 GB per node against 10 GB expected = 60% >= 50%
    deltas = {n: _deltas(tmp_path, n, 3 * GB) for n in ("node-a", "node-b")}
    ok, reasons = judge_counters(deltas, 10 * GB, "efa")
    assert ok is True and len(reasons) == 2
    assert "node node-a: EFA moved 6.000 GB = 60%" in reasons[0]
    assert "rdmap16s27 sent 3.000 GB received 3.000 GB" in reasons[0]  # bytes per device and node


def test_counters_flat_while_log_says_efa(tmp_path: Path) -> None:
    deltas = {"node-a": _deltas(tmp_path, "node-a", 3 * GB), "node-b": _deltas(tmp_path, "node-b", 0)}
    ok, reasons = judge_counters(deltas, 10 * GB, "efa")
    assert ok is False
    assert any(r.startswith("EFA loaded, traffic went elsewhere: node node-b") for r in reasons)


def test_counters_partly_moved(tmp_path: Path) -> None:
    ok, reasons = judge_counters({"n": _deltas(tmp_path, "n", GB)}, 10 * GB, "efa")  # 2 GB = 20%
    assert ok is False and "only part of the traffic used EFA" in reasons[0]


def test_tolerance_boundary(tmp_path: Path) -> None:
    exp = 10 * GB
    at = int(exp * TOLERANCE / 2)  # two devices
    assert judge_counters({"n": _deltas(tmp_path, "a", at)}, exp, "efa")[0] is True
    assert judge_counters({"n": _deltas(tmp_path, "b", at - 1)}, exp, "efa")[0] is False


def test_no_devices(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert read_counters(str(tmp_path / "empty")) == {}
    assert read_counters(str(tmp_path / "absent")) == {}
    ok, reasons = judge_counters({"node-a": counter_delta({}, {})}, 10 * GB, "efa")
    assert ok is None and "no EFA device" in reasons[0]


def test_unreadable_files(tmp_path: Path) -> None:
    root = lay_out(
        tmp_path / "bad",
        {"rdmap0": {"tx_bytes": b"not a number\n", "rx_bytes": b"\xff\xfe"}, "rdmap1": {"rx_bytes": 5}},
    )
    os.makedirs(os.path.join(root, "rdmap2"))  # a device without hw_counters
    os.makedirs(os.path.join(root, "rdmap3/ports/1/hw_counters/tx_bytes"))  # open() fails (root reads any mode)
    (Path(root) / "rdmap3/ports/1/hw_counters/rx_bytes").write_text("7\n")
    c = read_counters(root)
    assert "tx_bytes" not in c["rdmap0"] and set(c["rdmap0"]["errors"]) == {"tx_bytes", "rx_bytes"}
    assert c["rdmap1"]["rx_bytes"] == 5 and "missing" in c["rdmap1"]["errors"]["tx_bytes"]
    assert "no such directory" in c["rdmap2"]["errors"]["hw_counters"]
    assert "a directory" in c["rdmap3"]["errors"]["tx_bytes"] and c["rdmap3"]["rx_bytes"] == 7
    ok, reasons = judge_counters({"n": counter_delta({"rdmap0": c["rdmap0"]}, {"rdmap0": c["rdmap0"]})}, GB, "efa")
    assert ok is None and "no readable EFA counter" in reasons[0] and "tx_bytes" in reasons[0]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_permission_denied(tmp_path: Path) -> None:
    root = lay_out(tmp_path / "perm", {"rdmap0": {"tx_bytes": 1, "rx_bytes": 1}})
    os.chmod(os.path.join(root, "rdmap0/ports/1/hw_counters/tx_bytes"), 0)
    assert "Permission denied" in read_counters(root)["rdmap0"]["errors"]["tx_bytes"]


def test_counter_reset_and_vanished_device() -> None:
    d = counter_delta(
        {"a": {"tx_bytes": 10, "rx_bytes": 10}, "b": {"tx_bytes": 1, "rx_bytes": 1}},
        {"a": {"tx_bytes": 5, "rx_bytes": 20}},
    )
    assert "went backwards" in d["a"]["errors"]["tx_bytes"] and d["a"]["rx_bytes"] == 10
    assert d["b"]["errors"]["device"] == "disappeared during the sweep"


def test_combine_with_the_log_verdict(tmp_path: Path) -> None:
    efa = analyze_paths([str(FIX / "real_efa_g7e_slurm_nccl2292_ofi1180_2node.log")])
    flat = judge_counters({"n": _deltas(tmp_path, "f", 0)}, 10 * GB, "efa")
    moved = judge_counters({"n": _deltas(tmp_path, "m", 5 * GB)}, 10 * GB, "efa")
    none = judge_counters({"n": {}}, 10 * GB, "efa")
    bad = combine(efa, flat)
    assert bad.verdict == "fallback" and "counters_flat" in bad.causes and bad.exit_code == 1
    assert "EFA loaded, traffic went elsewhere" in bad.reasons[-1]
    assert combine(efa, moved).verdict == "efa" and efa.verdict == "efa"  # the log report is not mutated
    assert combine(efa, none).verdict == "efa" and combine(efa, none, require=True).verdict == "undetermined"
    undet = analyze_paths([str(FIX / "real_undet_p3dn_single_pod_np8_efa_selected_p2p_only_nccl264.log")])
    assert combine(undet, moved).verdict == "undetermined"  # counters alone never make efa


def test_allreduce_bytes_per_node() -> None:
    assert allreduce_bytes_per_node(GB, world=8, nodes=2) == pytest.approx(1.75 * GB)  # 2 x g6.12xlarge, 4 GPUs each
    assert allreduce_bytes_per_node(GB, world=4, nodes=1) == 0.0


# -- where the counters are visible: the host's sysfs, not the pod's ------------------------------------


def _pod_view(root: Path, devices: tuple[str, ...] = ("rdmap16s27", "rdmap32s27")) -> str:
    """/sys/class/infiniband as a pod (own network namespace) sees it on kernels with commit a1ecb30f9085: the
    devices and their ports, no port hw_counters; the device-level hw_counters directory is there (and must never
    be read: on 5.14..fix kernels reading it inside a namespace oopses the node)."""
    for dev in devices:
        (root / dev / "ports" / "1").mkdir(parents=True, exist_ok=True)
        (root / dev / "ports" / "1" / "state").write_text("4: ACTIVE\n")
        (root / dev / "hw_counters").mkdir(exist_ok=True)
        (root / dev / "hw_counters" / "tx_bytes").write_text("999999999999\n")
        (root / dev / "hw_counters" / "rx_bytes").write_text("999999999999\n")
    return str(root)


def test_pod_view_has_devices_but_no_port_counters_and_the_host_view_has_them(tmp_path: Path, monkeypatch) -> None:
    from ray_efa_eks.efacheck import efa_counters

    pod = _pod_view(tmp_path / "pod" / "sys" / "class" / "infiniband")
    host = _node(tmp_path / "host", "sys", 10 * GB, 11 * GB)
    opened: list[str] = []
    real_open = os.open

    def spy(path, *a, **kw):
        opened.append(str(path))
        return real_open(path, *a, **kw)

    monkeypatch.setattr("os.open", spy)  # the counters are read with os.open (efa_counters.read_small)
    views = (("host", host), ("pod", pod))
    v = efa_counters.read_view(views)
    assert v["view"] == "host" and v["unreadable"] is None
    assert v["snapshot"]["rdmap16s27"]["tx_bytes"] == 10 * GB
    # the pod alone: devices, no port counters -> unreadable, saying why and what to mount
    only_pod = efa_counters.read_view((("host", str(tmp_path / "no-host-mount")), ("pod", pod)))
    assert only_pod["view"] is None and set(only_pod["snapshot"]) == {"rdmap16s27", "rdmap32s27"}
    assert "host view" in only_pod["unreadable"] and "no EFA device" in only_pod["unreadable"]
    assert "2 device(s), no readable port counter" in only_pod["unreadable"]
    assert "RAY_EFA_EKS_EFA_EXPORTER" in only_pod["unreadable"]
    # never the device-level <dev>/hw_counters, in either view
    assert opened and not [
        p for p in opened if p.rstrip("/").split("/")[-2] == "hw_counters" and p.split("/")[-3] != "1"
    ], opened


def test_default_views_try_the_nodes_exporter_first() -> None:
    from ray_efa_eks.efacheck import efa_counters

    url = "http://efa-exporter.efa-node-agent.svc.cluster.local:9810/metrics"
    assert efa_counters.default_views({efa_counters.EXPORTER_ENV: url}) == (
        ("exporter", url),
        ("pod", "/sys/class/infiniband"),
    )
    assert efa_counters.default_views({}) == (("pod", "/sys/class/infiniband"),)  # local runs: the pod's own sysfs


def test_unreadable_counters_are_the_first_reason_and_the_witness(tmp_path: Path) -> None:
    from ray_efa_eks.efacheck import efa_counters

    efa = analyze_paths([str(FIX / "real_efa_g7e_slurm_nccl2292_ofi1180_2node.log")])
    pod = _pod_view(tmp_path / "pod")
    v = efa_counters.read_view((("pod", pod),))
    d = counter_delta(v["snapshot"], v["snapshot"])
    judged = judge_counters(
        {"n1": d, "n2": d}, 10 * GB, "efa", unreadable={"n1": v["unreadable"], "n2": v["unreadable"]}
    )
    assert judged[0] is None
    kept = combine(efa, judged)
    assert kept.verdict == "efa" and kept.reasons[0].startswith("the EFA hardware counters could not be read")
    assert "no readable port counter" in kept.reasons[0]
    assert kept.witness == {"counters": "unreadable", "required": False, "reasons": judged[1]}
    assert kept.to_dict()["witness"]["counters"] == "unreadable"
    req = combine(efa, judged, require=True)
    assert req.verdict == "undetermined" and req.exit_code == 2 and "efaCheckRequireCounters" in req.reasons[0]
    assert "counters_unavailable" in req.causes
    moved = combine(efa, judge_counters({"n": _deltas(tmp_path, "m", 5 * GB)}, 10 * GB, "efa"), require=True)
    assert moved.verdict == "efa" and moved.witness["counters"] == "moved"


def test_tree_share_margin_on_2_nodes_x_8_gpus() -> None:
    from ray_efa_eks.efacheck.efa_counters import tree_share

    # ring: each node sends 2(n-1)/n x S across nodes; tree: S per node and direction (two trees, half each)
    world = 16
    ring = allreduce_bytes_per_node(1.0, world=world, nodes=2)
    assert ring == pytest.approx(2 * 15 / 16)
    assert tree_share(world) == pytest.approx(1.0 / ring) == pytest.approx(8 / 15)
    assert round(tree_share(16), 3) == 0.533 and round(tree_share(8), 3) == 0.571
    assert TOLERANCE < tree_share(16)  # a real tree run still passes


def test_the_node_agents_volumes_make_the_counters_readable(tmp_path: Path) -> None:
    """The hostPath volumes components/addons/node_agent.py gives the exporter, applied to a kernel-shaped host sysfs: both
    trees make the port counters readable, the class tree alone does not (its entries point into ../../devices)."""
    from ray_efa_eks.components.addons.node_agent import HOST_SYSFS, host_sysfs_volumes
    from ray_efa_eks.efacheck import efa_counters
    from tests.helpers.sysfs import as_mounted, kernel_sysfs

    kernel_sysfs(tmp_path / "host" / "sys", counters={"rdmap0s30": {"tx_bytes": 7 * GB, "rx_bytes": 7 * GB}})
    vols, mounts = host_sysfs_volumes()
    as_mounted(tmp_path / "host", tmp_path / "pod", vols, mounts)
    view = efa_counters.read_view((("host", str(tmp_path / "pod") + HOST_SYSFS + "/class/infiniband"),))
    assert view["view"] == "host" and view["snapshot"]["rdmap0s30"]["tx_bytes"] == 7 * GB
    only_class = [m for m in mounts if m["mountPath"].endswith("/class/infiniband")]
    as_mounted(tmp_path / "host", tmp_path / "pod2", vols, only_class)
    view = efa_counters.read_view((("host", str(tmp_path / "pod2") + HOST_SYSFS + "/class/infiniband"),))
    assert view["view"] is None and "no readable port counter" in view["unreadable"]
