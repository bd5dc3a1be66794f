"""efa_check: formulas, environment probe, verdict logic, and a real run on a local 2-node Ray cluster with gloo."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ray_efa_eks.efacheck.ranks import OFI_PLUGIN_DIRS, probe_env, sizes
from ray_efa_eks.efacheck.verdict import busbw, judge

ROOT = Path(__file__).parents[2]
FIX = Path(__file__).parents[1] / "fixtures" / "nccl-logs"


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
    # without LD_LIBRARY_PATH: the DLC's own directory (lib64), not only the Ubuntu installer's lib
    lib64 = tmp_path / "opt/amazon/ofi-nccl/lib64"
    lib64.mkdir(parents=True)
    (lib64 / "libnccl-net.so").touch()
    dirs = tuple(str(tmp_path / d.lstrip("/")) for d in OFI_PLUGIN_DIRS)
    assert probe_env({"PATH": str(bin_)}, dev_dir=str(dev), plugin_dirs=dirs)["ofi_plugin_libs"] == [
        str(lib64 / "libnccl-net.so")
    ]


def test_probe_env_empty_pod(tmp_path: Path) -> None:
    p = probe_env({"PATH": str(tmp_path)}, dev_dir=str(tmp_path / "none"))
    assert p["efa_devices"] == [] and p["fi_info_efa"] is None


def _data(logs: dict[str, bytes]) -> dict:
    res = [{"bytes": 1 << 20, "time_s": 1e-3}]
    return {
        "world": 2,
        "nodes": 2,
        "outs": [{"results": res, "logs": logs, "probe": {}}, {"results": res, "logs": {}, "probe": {}}],
    }


def test_judge_uses_nccl_logs_and_floor() -> None:
    logs = {"a": (FIX / "real_efa_g7e_slurm_nccl2292_ofi1180_2node.log").read_bytes()}
    r = judge(_data(logs), "nccl", None)
    assert r["code"] == 0 and r["sweep"][0]["busbw_gbps"] == pytest.approx((1 << 20) / 1e-3 / 1e9)
    low = judge(_data(logs), "nccl", 1000.0)
    assert low["code"] == 1 and any("below the floor" in x for x in low["reasons"])


def test_judge_gloo_never_efa() -> None:
    r = judge(_data({}), "gloo", None)
    assert r["code"] == 2 and any("gloo" in x for x in r["reasons"])


@pytest.mark.rehearsal
def test_local_two_node_cluster_gloo_is_not_efa() -> None:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "ray_efa_eks.efacheck.efa_check",
            "--local",
            "--json",
            "--max-bytes",
            str(256 << 10),
            "--iters",
            "2",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )
    assert r.returncode in (1, 2), r.stderr[-2000:]
    out = json.loads(r.stdout[r.stdout.index("{") :])
    assert out["verdict"] != "efa" and out["reasons"]
    assert out["backend"] == "gloo" and out["nodes"] == 2 and out["world"] == 2
    assert len(out["sweep"]) >= 1


# -- backend and topology from the cluster --------------------------------------------------------------

from ray_efa_eks.efacheck import efa_check, failures, stale, topology  # noqa: E402


def _node(gpus: int = 0, cpus: int = 1, alive: bool = True, ip: str = "10.0.0.1") -> dict:
    res = {"CPU": float(cpus), **({"GPU": float(gpus)} if gpus else {})}
    return {"Alive": alive, "Resources": res, "NodeID": ip.replace(".", "") * 3, "NodeManagerAddress": ip}


HEAD = _node(cpus=0, ip="10.0.0.9")  # the GPU-less, CPU-less head the driver runs on


def test_backend_comes_from_the_cluster_not_the_driver() -> None:
    """The driver has no CUDA here (as on the head); GPU nodes in the cluster still mean nccl."""
    assert topology.choose_backend([HEAD, _node(4), _node(4)], 0) == "nccl"
    assert topology.choose_backend([HEAD, _node(), _node()], 4) == "nccl"  # GPUs declared: never gloo
    assert topology.choose_backend([HEAD, _node(), _node()], 0) == "gloo"  # all-CPU and expected so
    assert topology.choose_backend([HEAD, _node(4, alive=False)], 0) == "gloo"


def test_assess_names_what_is_missing() -> None:
    use, why = topology.assess([HEAD, _node(4, ip="10.0.0.1")], "nccl", 2, 4)
    assert len(use) == 1 and "1 of 2 expected GPU nodes with 4 GPU(s) each" in why
    _, why = topology.assess([HEAD, _node(4, ip="10.0.0.1"), _node(2, ip="10.0.0.2")], "nccl", 2, 4)
    assert "10.0.0.2 has 2" in why
    _, why = topology.assess([HEAD, _node(), _node()], "nccl", 2, 4)
    assert why.startswith("no GPU nodes")
    use, why = topology.assess([HEAD, _node(4), _node(4, ip="10.0.0.2")], "nccl", 2, 4)
    assert why is None and len(use) == 2


def test_wait_topology_waits_for_late_nodes_and_gives_up_at_the_deadline(monkeypatch) -> None:
    import ray

    seq = iter([[HEAD, _node(1)], [HEAD, _node(1)], [HEAD, _node(1), _node(1, ip="10.0.0.2")]])
    monkeypatch.setattr(ray, "nodes", lambda: next(seq))
    backend, nodes = topology.wait_topology(2, 1, wait_s=30, poll_s=0.01, log=lambda m: None)
    assert backend == "nccl" and len(nodes) == 2
    monkeypatch.setattr(ray, "nodes", lambda: [HEAD, _node(1)])
    with pytest.raises(efa_check.CheckFailed) as e:
        topology.wait_topology(2, 1, wait_s=0.05, poll_s=0.01, log=lambda m: None)
    assert e.value.stage == "topology" and "1 of 2" in e.value.reason


def test_wait_topology_asks_the_autoscaler_for_the_nodes_and_withdraws_the_request(monkeypatch) -> None:
    """GPU nodes from zero: nothing brings a node until Ray asks; the request is sticky, so it is
    withdrawn when the wait ends, met or not (else idle nodes would never go)."""
    import ray

    asked: list = []
    seq = iter([[HEAD], [HEAD, _node(4)], [HEAD, _node(4), _node(4, ip="10.0.0.2")]])
    monkeypatch.setattr(ray, "nodes", lambda: next(seq))
    backend, nodes = topology.wait_topology(2, 4, wait_s=30, poll_s=0.01, log=lambda m: None, ask=asked.append)
    assert len(nodes) == 2 and asked == [[{"GPU": 4.0}, {"GPU": 4.0}], []]
    asked.clear()
    monkeypatch.setattr(ray, "nodes", lambda: [HEAD])
    with pytest.raises(efa_check.CheckFailed):
        topology.wait_topology(2, 4, wait_s=0.05, poll_s=0.01, log=lambda m: None, ask=asked.append)
    assert asked == [[{"GPU": 4.0}, {"GPU": 4.0}], []]


def test_a_rank_error_is_a_failure_even_with_efa_logs() -> None:
    logs = {"a": (FIX / "real_efa_g7e_slurm_nccl2292_ofi1180_2node.log").read_bytes()}
    data = _data(logs)
    data["outs"][1]["error"] = "DistBackendError: NCCL error in: ProcessGroupNCCL.cpp, unhandled system error"
    data["outs"][0]["rank"], data["outs"][1]["rank"] = 0, 1
    r = efa_check.judge(data, "nccl", None)
    assert r["code"] == 1 and r["verdict"] == "failed" and r["failure"]["stage"] == "rank_error"
    assert "rank 1: DistBackendError" in r["failure"]["reason"]


def test_cli_usage_error_and_unreachable_address() -> None:
    bad = subprocess.run(
        [sys.executable, "-m", "ray_efa_eks.efacheck.efa_check", "--expect-nodes", "two"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 64 and "Traceback" not in bad.stderr
    r = subprocess.run(
        [sys.executable, "-m", "ray_efa_eks.efacheck.efa_check", "--json", "--address", "127.0.0.1:9", "--wait-s", "5"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert out["failure"]["stage"] == "unreachable" and "127.0.0.1:9" in out["failure"]["reason"]
    assert "Traceback" not in r.stdout + r.stderr


def test_counter_witness_flat_counters_turn_an_efa_log_into_fallback() -> None:
    """The second witness as efa_check wires it: one snapshot per node before and after the sweep."""
    logs = {"a": (FIX / "real_efa_g7e_slurm_nccl2292_ofi1180_2node.log").read_bytes()}
    big = 64 << 20

    def data(moved: int) -> dict:
        d = _data(logs)
        for o in d["outs"]:
            o["results"] = [{"collective": "all_reduce", "bytes": big, "time_s": 1e-2}]
        snap = lambda n: {"rdmap0s6": {"tx_bytes": n, "rx_bytes": n, "errors": {}}}  # noqa: E731
        d["counters"] = {
            "before": [{"host": h, "snapshot": snap(0)} for h in ("n1", "n2")],
            "after": [{"host": h, "snapshot": snap(moved)} for h in ("n1", "n2")],
        }
        d["iters"] = 1
        return d

    flat = efa_check.judge(data(0), "nccl", None)
    assert flat["verdict"] == "fallback" and flat["code"] == 1
    assert any("EFA loaded, traffic went elsewhere" in x for x in flat["reasons"])
    moved = efa_check.judge(data(4 * big), "nccl", None)
    assert moved["verdict"] == "efa" and moved["code"] == 0


def test_unreadable_counters_say_so_first_and_require_counters_makes_it_undetermined() -> None:
    """Counters as a pod without the host-sysfs mount reads them: devices, no port counters."""
    logs = {"a": (FIX / "real_efa_g7e_slurm_nccl2292_ofi1180_2node.log").read_bytes()}
    why = "host view /host/sys/class/infiniband: no EFA device; pod view /sys/class/infiniband: 1 device(s), no readable port counter"

    def data() -> dict:
        d = _data(logs)
        for o in d["outs"]:
            o["results"] = [{"collective": "all_reduce", "bytes": 1 << 26, "time_s": 1e-2}]
        snap = {
            "rdmap0s6": {
                "errors": {"hw_counters": "/sys/class/infiniband/rdmap0s6/ports/1/hw_counters: no such directory"}
            }
        }
        d["counters"] = {
            k: [{"host": h, "view": None, "snapshot": snap, "unreadable": why} for h in ("n1", "n2")]
            for k in ("before", "after")
        }
        d["iters"] = 1
        return d

    kept = efa_check.judge(data(), "nccl", None)
    assert kept["verdict"] == "efa" and kept["reasons"][0].startswith("the EFA hardware counters could not be read")
    assert why in kept["reasons"][0] and kept["witness"]["counters"] == "unreadable"
    req = efa_check.judge(data(), "nccl", None, require_counters=True)
    assert req["verdict"] == "undetermined" and req["code"] == 2 and req["witness"]["required"] is True
    assert "efaCheckRequireCounters" in req["reasons"][0]
    assert efa_check.parser().parse_args(["--require-counters"]).require_counters is True


# -- right answers and the Socket comparison -------------------------------------------------------------


def _sweep_data(ok_by_rank: dict[int, bool]) -> dict:
    logs = {"a": (FIX / "real_efa_g7e_slurm_nccl2292_ofi1180_2node.log").read_bytes()}
    d = _data(logs)
    for rank, o in enumerate(d["outs"]):
        o["rank"] = rank
        o["results"] = [
            {
                "collective": "all_reduce",
                "bytes": 1 << 20,
                "dtype": "float32",
                "source": "pow2",
                "time_s": 1e-3,
                "ok": True,
                "rank": rank,
            },
            {
                "collective": "reduce_scatter_tensor",
                "bytes": 64 << 20,
                "dtype": "float32",
                "source": "pow2",
                "time_s": 1e-2,
                "ok": ok_by_rank.get(rank, True),
                "rank": rank,
            },
        ]
    return d


def test_wrong_collective_results_fail_the_check_naming_collective_and_size() -> None:
    good = efa_check.judge(_sweep_data({}), "nccl", None)
    assert good["code"] == 0 and good["failure"] is None
    r = efa_check.judge(_sweep_data({1: False}), "nccl", None)
    assert r["code"] == 1 and r["verdict"] == "failed" and r["failure"]["stage"] == "wrong_result"
    assert "reduce_scatter_tensor of 67108864 bytes (64 MiB" in r["failure"]["reason"]
    assert "rank(s) 1" in r["failure"]["reason"] and "all_reduce" not in r["failure"]["reason"]
    assert r["reasons"][0] == r["failure"]["reason"]


def _args(**kw):
    return dataclasses.replace(efa_check.parse(["--compare-socket", "--expect-nodes", "2", "--iters", "1"]), **kw)


def test_failed_socket_comparison_is_reported_and_the_efa_verdict_stands(monkeypatch) -> None:
    calls = []

    def run_check(*args, env_vars=None, **kw):
        calls.append(env_vars)
        if env_vars:  # the NCCL_NET=Socket sweep hangs
            raise efa_check.CheckFailed("timeout", "the collective sweep did not finish within 600 s")
        d = _sweep_data({})
        d["iters"] = 1
        return d

    monkeypatch.setattr(efa_check, "wait_topology", lambda *a, **k: ("nccl", [{}, {}]))
    monkeypatch.setattr(efa_check, "run_check", run_check)
    r = efa_check.check(_args())
    assert calls == [None, {"NCCL_NET": "Socket"}]
    assert r["verdict"] == "efa" and r["code"] == 0 and r["failure"] is None
    assert r["comparison"]["error"] == {
        "stage": "timeout",
        "reason": "the collective sweep did not finish within 600 s",
    }
    assert any(
        x.startswith("the Socket comparison failed (timeout)") and "EFA verdict above stands" in x for x in r["reasons"]
    )
    from ray_efa_eks.efacheck.report import render_markdown as render

    assert "the Socket comparison failed (timeout)" in render(r)


# -- every accepted shape has a gate it can pass ---------------------------------------------------------


def _socket_rank(host: str, pid: int) -> str:
    p = f"{host}:{pid}:{pid + 1} [0] NCCL INFO "
    return (
        f"{p}NET/Plugin: Could not find: libnccl-net.so. Using internal net plugin.\n"
        f"{p}NET/Socket : Using [0]eth0:10.0.0.{pid}<0>\n"
        f"{p}Using network Socket\n"
        f"{p}comm 0x1 rank {pid} nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0\n"
        f"{p}Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0\n"
    )


def _shape_run(monkeypatch, logs: dict[str, bytes], argv: list[str], ok: bool = True) -> dict:
    calls = []

    def run_check(*args, **kw):
        calls.append(kw)
        d = _sweep_data({} if ok else {0: False})
        d["outs"][0]["logs"] = logs
        d["iters"] = 1
        return d

    monkeypatch.setattr(efa_check, "wait_topology", lambda *a, **k: ("nccl", [{}]))
    monkeypatch.setattr(efa_check, "run_check", run_check)
    r = efa_check.check(efa_check.CheckRequest.from_namespace(efa_check.parser().parse_args(argv)))
    r["_calls"] = calls
    return r


def test_efa_false_gate_passes_on_nccl_across_nodes_over_socket_and_says_so(monkeypatch) -> None:
    logs = {"a": (_socket_rank("node-a", 1) + _socket_rank("node-b", 2)).encode()}
    argv = ["--expect-transport", "socket", "--expect-nodes", "2", "--expect-gpus-per-node", "1"]
    r = _shape_run(monkeypatch, logs, argv)
    assert r["code"] == 0 and r["verdict"] == "socket" and r["efa_exercised"] is False
    assert r["reasons"][0].startswith("NCCL crossed 2 nodes over its Socket transport, as configured (efa: false)")
    assert "EFA was not exercised" in r["reasons"][0] and r["witness"] is None
    # the same logs under the EFA gate are a fallback: the shape decides what passes
    assert _shape_run(monkeypatch, logs, ["--expect-nodes", "2"])["code"] == 1
    # one host only, or wrong values, never pass the Socket gate
    one = {"a": _socket_rank("node-a", 1).replace("nNodes 2", "nNodes 1").encode()}
    assert _shape_run(monkeypatch, one, argv)["code"] == 2
    bad = _shape_run(monkeypatch, logs, argv, ok=False)
    assert bad["code"] == 1 and bad["failure"]["stage"] == "wrong_result"


def test_one_gpu_node_gate_checks_nccl_inside_the_node_and_says_efa_was_not_exercised(monkeypatch) -> None:
    logs = {"a": (FIX / "real_undet_p3dn_single_pod_np8_efa_selected_p2p_only_nccl264.log").read_bytes()}
    argv = ["--expect-transport", "intra-node", "--expect-nodes", "1", "--expect-gpus-per-node", "8"]
    r = _shape_run(monkeypatch, logs, argv)
    assert r["code"] == 0 and r["verdict"] == "intra_node" and r["_calls"][0]["min_nodes"] == 1
    assert r["reasons"][0].startswith("NCCL ran inside one node") and "EFA was not exercised" in r["reasons"][0]
    # a log that counts two nodes is no one-node run
    two = {"a": (FIX / "real_efa_g7e_slurm_nccl2292_ofi1180_2node.log").read_bytes()}
    assert _shape_run(monkeypatch, two, argv)["code"] == 2


def test_transport_and_node_count_must_agree() -> None:
    for argv in (["--expect-transport", "intra-node", "--expect-nodes", "2"], ["--expect-nodes", "1"]):
        r = subprocess.run(
            [sys.executable, "-m", "ray_efa_eks.efacheck.efa_check", *argv],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 64 and "Traceback" not in r.stderr and "--expect-nodes" in r.stderr


# -- what really runs, and a busy cluster ------------------------------------------------------------------


def test_stale_pods_are_named_with_what_differs() -> None:
    want = {"image": "img:v2", "spec_hash": "h2"}
    seen = [
        {"host": "ray-gpu-a", "ip": "10.0.0.1", "image": "img:v2", "spec_hash": "h2"},
        {"host": "ray-gpu-b", "ip": "10.0.0.2", "image": "img:v1", "spec_hash": "h1"},
        {"host": "ray-gpu-b", "ip": "10.0.0.2", "image": "img:v1", "spec_hash": "h1"},  # second rank, same pod
        {"role": "head", "host": "ray-head-x", "ip": "10.0.0.3", "image": None, "spec_hash": None},
    ]
    bad = stale.stale_pods(seen, want)
    assert bad == [
        "worker pod ray-gpu-b on node 10.0.0.2: image img:v1 (expected img:v2), spec_hash h1 (expected h2)",
        "head pod ray-head-x on node 10.0.0.3: image (unset) (expected img:v2), spec_hash (unset) (expected h2)",
    ]
    assert stale.stale_pods(seen[:1], want) == [] and stale.stale_pods(seen, {"image": None}) == []
    with pytest.raises(efa_check.CheckFailed) as e:
        stale.check_stale(seen, want)
    assert e.value.stage == "stale" and failures.FAILURES["stale"] == ("undetermined", 2)


def test_pod_stack_reads_the_env_the_stack_sets() -> None:
    from ray_efa_eks.components.ray import raycluster

    assert (stale.IMAGE_ENV, stale.SPEC_HASH_ENV) == (raycluster.IMAGE_ENV, raycluster.SPEC_HASH_ENV)
    assert stale.pod_stack({stale.IMAGE_ENV: "i", stale.SPEC_HASH_ENV: "h"}) == {"image": "i", "spec_hash": "h"}


def test_a_busy_cluster_is_waited_for_then_named(monkeypatch) -> None:
    import ray

    monkeypatch.setattr(ray, "nodes", lambda: [HEAD, _node(1), _node(1, ip="10.0.0.2")])
    answers = iter(["0 of the 2 GPUs the check needs are free: train-7 holds 2 GPU(s)", None])
    logged: list[str] = []
    backend, nodes = topology.wait_topology(
        2, 1, wait_s=30, poll_s=0.01, log=logged.append, busy=lambda need: next(answers)
    )
    assert len(nodes) == 2 and any("the cluster is busy" in m and "train-7" in m for m in logged)
    with pytest.raises(efa_check.CheckFailed) as e:
        topology.wait_topology(
            2,
            1,
            wait_s=0.05,
            poll_s=0.01,
            log=lambda m: None,
            busy=lambda need: f"0 of the {need} GPUs the check needs are free: train-7 holds 2",
        )
    assert e.value.stage == "busy" and "train-7" in e.value.reason and "0 of the 2 GPUs" in e.value.reason
    assert "ray job stop" in failures.FAILURE_HINTS["busy"]
