"""The counter witness reads its node's exporter: the gate's and each run's, against a real exporter
process on loopback serving a kernel-shaped sysfs tree whose counters move."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from ray_efa_eks.efacheck import efa_counters
from tests.helpers.sysfs import P5_48XLARGE, kernel_sysfs, write_counter

GB = 10**9
NODE = "ip-10-0-1-23.ec2.internal"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_exporter(sysfs: Path, node: str = NODE) -> tuple[subprocess.Popen, str]:
    """``ray-efa-eks efa-exporter`` in its own process, as the node agent runs it; returns (process, /metrics URL)."""
    port = _free_port()
    exe = Path(sys.executable).with_name("ray-efa-eks")
    proc = subprocess.Popen(
        [str(exe), "efa-exporter", "--sysfs", str(sysfs), "--port", str(port), "--host", "127.0.0.1", "--node", node],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}/metrics"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(url.replace("/metrics", "/healthz"), timeout=2).close()
            return proc, url
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise AssertionError(proc.communicate()[1])
            time.sleep(0.1)


@pytest.fixture()
def node(tmp_path: Path, monkeypatch):
    """A g6.12xlarge-shaped node whose exporter runs; the pod's env points at it as the Ray workers' does."""
    sysfs = kernel_sysfs(tmp_path / "sys", counters={"rdmap0s30": {"tx_bytes": 10 * GB, "rx_bytes": 20 * GB}})
    proc, url = start_exporter(sysfs)
    monkeypatch.setenv(efa_counters.EXPORTER_ENV, url)
    monkeypatch.setenv(efa_counters.NODE_ENV, NODE)
    yield sysfs, url
    proc.terminate()
    proc.wait(timeout=30)


def test_read_exporter_gives_the_sysfs_readers_shape_exactly(node) -> None:
    sysfs, url = node
    write_counter(sysfs, "rdmap0s30", "rdma_write_bytes", 2**63 + 7)  # past float64's exact integers
    snap, why = efa_counters.read_exporter(url, NODE)
    assert why is None
    assert snap == {
        "rdmap0s30": {
            "errors": {},
            "tx_bytes": 10 * GB,
            "rx_bytes": 20 * GB,
            "send_bytes": 0,
            "rdma_write_bytes": 2**63 + 7,
            "rdma_read_resp_bytes": 0,
            "recv_bytes": 0,
            "rdma_read_bytes": 0,
            "rdma_write_recv_bytes": 0,
        }
    }
    # the same tree read directly gives the same snapshot: one reader, one shape
    assert efa_counters.read_counters(str(sysfs / "class" / "infiniband")) == snap


def test_the_exporter_of_another_node_is_refused(node) -> None:
    _, url = node
    snap, why = efa_counters.read_exporter(url, "ip-10-0-9-9.ec2.internal")
    assert snap == {} and f"answered for node {NODE}" in why and "internalTrafficPolicy: Local" in why


def test_no_exporter_falls_back_to_the_pods_sysfs_and_says_both(tmp_path: Path, monkeypatch) -> None:
    url = f"http://127.0.0.1:{_free_port()}/metrics"  # nothing listens
    monkeypatch.setenv(efa_counters.EXPORTER_ENV, url)
    v = efa_counters.read_view((("exporter", url), ("pod", str(tmp_path / "no-class"))))
    assert v["view"] is None and v["snapshot"] == {}
    assert f"exporter {url}: no answer" in v["unreadable"] and "kubectl -n efa-node-agent get pods" in v["unreadable"]
    assert "pod view" in v["unreadable"]
    # a local run keeps its own sysfs: the pod view answers when the exporter does not
    local = kernel_sysfs(tmp_path / "sys", counters={"rdmap0s30": {"tx_bytes": 5, "rx_bytes": 6}})
    v = efa_counters.read_view((("exporter", url), ("pod", str(local / "class" / "infiniband"))))
    assert v["view"] == "pod" and v["snapshot"]["rdmap0s30"]["tx_bytes"] == 5


def test_an_exporter_without_the_devices_mount_is_unreadable_not_zero(tmp_path: Path) -> None:
    import shutil

    host = kernel_sysfs(tmp_path / "host", devices=P5_48XLARGE[:2])
    shutil.copytree(host / "class", tmp_path / "pod" / "class", symlinks=True)  # class entries dangle
    proc, url = start_exporter(tmp_path / "pod")
    try:
        snap, why = efa_counters.read_exporter(url, NODE)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert snap == {} and "2 EFA device(s), no readable port counter (2 read error(s)" in why
    assert "/sys/devices" in why


def test_the_gates_witness_reads_the_exporter_and_judges_the_moved_bytes(node) -> None:
    """The gate's judgement (``verdict.judge``) of counters read before and after the sweep as each rank reads them
    (``efa_counters.read_view``: the exporter first), with a two-node EFA log."""
    from ray_efa_eks.efacheck import verdict

    sysfs, url = node
    log = (Path(__file__).parents[1] / "fixtures/nccl-logs/real_efa_g7e_slurm_nccl2292_ofi1180_2node.log").read_bytes()
    rows = [{"collective": "all_reduce", "bytes": 300 * 10**6, "time_s": 0.1}]  # x 6 calls x 2*7/8 = 3.15 GB a node
    data = {
        "iters": 5,
        "world": 8,
        "nodes": 2,
        "outs": [{"rank": r, "results": rows, "logs": {"a": log} if r == 0 else {}, "probe": {}} for r in range(8)],
    }

    def rank_reads() -> dict:
        return {"host": NODE, **efa_counters.read_view()}

    before = rank_reads()
    assert before["view"] == "exporter" and before["root"] == url and before["unreadable"] is None
    write_counter(sysfs, "rdmap0s30", "tx_bytes", 13 * GB)
    write_counter(sysfs, "rdmap0s30", "rx_bytes", 23 * GB)
    after = rank_reads()
    r = verdict.judge({**data, "counters": {"before": [before], "after": [after]}}, "nccl", None)
    assert (r["verdict"], r["witness"]["counters"]) == ("efa", "moved")
    assert "EFA moved 3.000 GB = 95%" in r["witness"]["reasons"][0], r["witness"]
    # the same run with the counters standing still: the log says efa, the hardware says otherwise
    still = rank_reads()
    r = verdict.judge({**data, "counters": {"before": [after], "after": [still]}}, "nccl", None)
    assert (r["verdict"], r["code"], r["witness"]["counters"]) == ("fallback", 1, "flat")
    assert r["witness"]["reasons"][0].startswith("EFA loaded, traffic went elsewhere"), r["witness"]


def test_a_runs_fabric_capture_reads_the_exporter(node, tmp_path: Path) -> None:
    from ray_efa_eks.training import fabric

    sysfs, _ = node
    probe = fabric.Probe("nccl", rank=0, local_rank=0, log_dir=str(tmp_path / "logs"), environ={})
    assert probe.counters_before["rdmap0s30"]["tx_bytes"] == 10 * GB
    write_counter(sysfs, "rdmap0s30", "tx_bytes", 12 * GB)
    sent = []

    class Dist:  # torch.distributed as a one-rank job: what the rank sends to rank 0 is kept
        def get_world_size(self):
            return 1

        def gather_object(self, payload, gathered, dst):
            sent.append(payload)
            gathered[0] = payload

    probe.judge(Dist(), final=True)
    delta = sent[0]["counters"]
    assert delta["rdmap0s30"]["tx_bytes"] == 2 * GB and delta["rdmap0s30"]["rx_bytes"] == 0
