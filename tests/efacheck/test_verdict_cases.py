"""efacheck/verdict.py, condition by condition through its public functions, each outcome asserted.

``judge`` turns the ranks' outputs into the gate's verdict: rank errors, wrong values, missing or unreadable logs,
the counter witness, the storage proof, the busbw floor and the non-EFA shapes each decide something here.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from ray_efa_eks.efacheck.failures import FAILURE_HINTS
from ray_efa_eks.efacheck.nccl_log import HINTS
from ray_efa_eks.efacheck.verdict import busbw, judge, shape_verdict, summarize_sweep, wrong_results

FIX = Path(__file__).parents[1] / "fixtures" / "nccl-logs"
EFA_LOG = (FIX / "real_efa_g7e_slurm_nccl2292_ofi1180_2node.log").read_bytes()
SOCKET_LOG = (FIX / "socket_plugin_missing_nccl218.log").read_bytes()


def _socket_rank(host: str, pid: int, nodes: int = 2, network: str = "Socket") -> str:
    p = f"{host}:{pid}:{pid + 1} [0] NCCL INFO "
    return (
        f"{p}NET/Plugin: Could not find: libnccl-net.so. Using internal net plugin.\n"
        f"{p}NET/Socket : Using [0]eth0:10.0.0.{pid}<0>\n"
        f"{p}Using network {network}\n"
        f"{p}comm 0x1 rank {pid} nRanks 2 nNodes {nodes} localRanks 1 localRank 0 MNNVL 0\n"
        f"{p}Channel 00/0 : 0[0] -> 1[0] [send] via NET/{network}/0\n"
    )


def _data(logs: dict[str, bytes] | None = None, *, results=None, world: int = 2, nodes: int = 2) -> dict:
    res = results or [{"collective": "all_reduce", "bytes": 1 << 20, "time_s": 1e-3}]
    return {
        "world": world,
        "nodes": nodes,
        "outs": [
            {
                "rank": 0,
                "results": [dict(r) for r in res],
                "logs": logs if logs is not None else {"a": EFA_LOG},
                "probe": {"p": 0},
            },
            {"rank": 1, "results": [dict(r) for r in res], "logs": {}, "probe": {"p": 1}},
        ],
    }


# -- small helpers ---------------------------------------------------------------------------------------------------


def test_busbw_is_nccl_tests_formula_and_zero_for_no_rank() -> None:
    assert busbw(10.0, 4) == pytest.approx(15.0)
    assert busbw(10.0, 1) == 0.0
    assert busbw(10.0, 0) == 0.0


@pytest.mark.parametrize(
    "n, says",
    [
        (1 << 30, "1 GiB"),
        ((1 << 30) - 1, "1024 MiB"),
        (1 << 20, "1 MiB"),
        (1536, "1.5 KiB"),
        (1 << 10, "1 KiB"),
        (1023, "1023 B"),
    ],
)
def test_a_wrong_result_names_its_size_in_the_largest_unit(n, says) -> None:
    d = _data(results=[{"collective": "all_reduce", "bytes": n, "time_s": 1e-3, "ok": False}])
    r = judge(d, "nccl", None)
    assert (r["verdict"], r["code"], r["failure"]["stage"]) == ("failed", 1, "wrong_result")
    assert f"all_reduce of {n} bytes ({says}, float32, pow2) on rank(s) 0, 1" in r["reasons"][0]


def test_summarize_sweep_without_collective_names_uses_the_slowest_rank() -> None:
    outs = [{"results": [{"bytes": 2_000_000, "time_s": 1e-3}]}, {"results": [{"bytes": 2_000_000, "time_s": 2e-3}]}]
    (row,) = summarize_sweep(outs, 4)
    assert row == {
        "collective": "all_reduce",
        "bytes": 2_000_000,
        "time_us": pytest.approx(2000.0),
        "algbw_gbps": pytest.approx(1.0),
        "busbw_gbps": pytest.approx(1.5),
    }
    named = [{"results": [{"collective": "all_reduce", "bytes": 2_000_000, "time_s": 1e-3}]}]
    assert summarize_sweep(named, 1)[0]["time_us_max"] == pytest.approx(1000.0)  # the sweep module's rows


def test_wrong_results_groups_ranks_per_row_and_reads_defaults() -> None:
    outs = [
        {"rank": 7, "results": [{"bytes": 8, "ok": False}, {"bytes": 4, "ok": True}, {"bytes": 2}]},
        {
            "rank": 9,
            "results": [
                {"bytes": 8, "ok": False, "rank": 3},
                {"collective": "all_gather", "bytes": 8, "ok": False, "dtype": "bfloat16", "source": "fsdp"},
            ],
        },
        {"rank": 1},
    ]
    rows = wrong_results(outs)
    assert rows == [
        {"collective": "all_gather", "bytes": 8, "source": "fsdp", "dtype": "bfloat16", "ranks": [9]},
        {"collective": "all_reduce", "bytes": 8, "source": "pow2", "dtype": "float32", "ranks": [7, 3]},
    ]
    assert wrong_results([{"rank": 0, "results": [{"bytes": 8, "ok": True}]}]) == []


# -- shape_verdict: efa: false and one GPU node ----------------------------------------------------------------------


def _rep(nodes, network):
    return SimpleNamespace(nodes=nodes, network=network)


def test_socket_shape_needs_two_nodes_and_nccls_own_socket() -> None:
    v, code, why = shape_verdict("socket", _rep(2, "Socket"), 2)
    assert (v, code) == ("socket", 0) and why.startswith("NCCL crossed 2 nodes over its Socket transport")
    v, code, why = shape_verdict("socket", _rep(2, "AWS Libfabric"), 2)
    assert (v, code) == ("undetermined", 2) and "but NCCL used AWS Libfabric" in why
    v, code, why = shape_verdict("socket", _rep(2, "Socket via libfabric"), 2)  # libfabric named: not NCCL's Socket
    assert (v, code) == ("undetermined", 2)
    v, code, why = shape_verdict("socket", _rep(2, None), 2)
    assert (v, code) == ("undetermined", 2) and "but NCCL used an unnamed network" in why
    v, code, why = shape_verdict("socket", _rep(1, "Socket"), 2)
    assert (v, code) == ("undetermined", 2) and "(1 node(s) counted)" in why
    v, code, why = shape_verdict("socket", _rep(None, "Socket"), 2)
    assert (v, code) == ("undetermined", 2) and "(no node(s) counted)" in why


def test_intra_node_shape_passes_at_most_one_node_and_says_what_ran() -> None:
    v, code, why = shape_verdict("intra-node", _rep(1, "Socket"), 8)
    assert (v, code) == ("intra_node", 0) and "(8 ranks, network Socket)" in why and "EFA was not exercised" in why
    assert "(8 ranks)" in shape_verdict("intra-node", _rep(None, None), 8)[2]
    assert "(one rank, no peer)" in shape_verdict("intra-node", _rep(0, "Socket"), 1)[2]
    v, code, why = shape_verdict("intra-node", _rep(2, "Socket"), 8)
    assert (
        (v, code) == ("undetermined", 2) and why.startswith("one GPU node expected") and why.endswith("count 2 nodes")
    )


# -- judge -----------------------------------------------------------------------------------------------------------


def test_judge_efa_result_fields() -> None:
    r = judge(_data(), "nccl", None)
    assert (r["verdict"], r["code"], r["failure"]) == ("efa", 0, None)
    assert r["network"] == "Libfabric" and r["provider"] == "efa" and r["transport"] == "efa"
    assert r["efa_exercised"] is True and r["world"] == 2 and r["nodes"] == 2 and r["backend"] == "nccl"
    assert r["probes"] == [{"p": 0}, {"p": 1}] and r["counters"] is None and r["storage"] is None
    assert r["witness"] is None and r["hints"] == [] and r["reasons"]


def test_judge_fallback_log_keeps_its_reasons_and_hints() -> None:
    r = judge(_data({"a": SOCKET_LOG}), "nccl", None)
    assert (r["verdict"], r["code"]) == ("fallback", 1) and r["hints"] and r["reasons"]


def test_no_logs_at_all_is_undetermined_with_the_hint() -> None:
    r = judge(_data({}), "nccl", None)
    assert (r["verdict"], r["code"]) == ("undetermined", 2)
    assert r["reasons"] == ["no NCCL log files were written by any rank"] and r["hints"] == [HINTS["no_net_info"]]


def test_unreadable_logs_are_their_own_verdict() -> None:
    r = judge(_data({"a": b"\x00\x01binary\x00" * 100}), "nccl", None)
    assert (r["verdict"], r["code"]) == ("unreadable", 3)
    assert r["reasons"][0].startswith("NCCL logs unreadable: ")


def test_gloo_backend_reasons_first_and_never_passes_another_shape() -> None:
    r = judge(_data({}), "gloo", None)
    assert r["reasons"][0].startswith("backend gloo: NCCL was not used") and r["code"] == 2
    logs = {"a": (_socket_rank("node-a", 1) + _socket_rank("node-b", 2)).encode()}
    assert judge(_data(logs), "nccl", None, transport="socket")["code"] == 0
    s = judge(_data(logs), "gloo", None, transport="socket")
    assert (s["verdict"], s["code"]) == ("undetermined", 2)


def test_rank_errors_skip_the_sweep_and_name_at_most_four_ranks() -> None:
    d = _data()
    d["outs"] = [
        {
            "rank": i,
            "results": [{"bytes": 8, "ok": False}],
            "logs": {"a": EFA_LOG} if i == 0 else {},
            "probe": {},
            **({"error": f"boom{i}"} if i else {}),
        }
        for i in range(6)
    ]
    r = judge(d, "nccl", None)
    assert (r["verdict"], r["code"]) == ("failed", 1) and r["sweep"] == []
    assert r["failure"] == {
        "stage": "rank_error",
        "reason": "rank 1: boom1; rank 2: boom2; rank 3: boom3; rank 4: boom4",
    }
    assert r["reasons"][0] == r["failure"]["reason"] and r["hints"][0] == FAILURE_HINTS["rank_error"]


def test_wrong_values_name_six_rows_then_count_the_rest() -> None:
    rows = [{"collective": "all_reduce", "bytes": 1 << i, "time_s": 1e-3, "ok": False} for i in range(10, 18)]
    r = judge(_data(results=rows), "nccl", None)
    assert (r["verdict"], r["code"]) == ("failed", 1) and r["failure"]["stage"] == "wrong_result"
    assert r["failure"]["reason"].startswith(
        "wrong collective results: all_reduce of 1024 bytes (1 KiB, float32, pow2) on rank(s) 0, 1; "
    )
    assert r["failure"]["reason"].count(" on rank(s) ") == 6 and r["failure"]["reason"].endswith(" (and 2 more)")
    assert len(r["failure"]["rows"]) == 8 and r["hints"][-1] == FAILURE_HINTS["wrong_result"]
    six = judge(_data(results=rows[:6]), "nccl", None)
    assert "more)" not in six["failure"]["reason"]


def test_wrong_values_on_a_fallback_log_are_still_a_failure_and_an_efa_one_too() -> None:
    rows = [{"collective": "all_reduce", "bytes": 1 << 20, "time_s": 1e-3, "ok": False}]
    assert judge(_data(results=rows), "nccl", None)["code"] == 1
    r = judge(_data({"a": SOCKET_LOG}, results=rows), "nccl", None)
    assert (r["verdict"], r["code"]) == ("fallback", 1)  # code 1 already: the log's fallback stands


def _storage(ok: bool) -> dict:
    return {
        "ok": ok,
        "object": "s3://b/k",
        "filesystem": "s3",
        "host": "n1",
        "credentials": {"source": "pod"},
        "step": "put",
        "error": "AccessDenied",
        "causes": ["bucket_policy"],
        "storage_path": "s3://b/",
    }


def test_storage_proof_passes_after_and_fails_first() -> None:
    ok = judge({**_data(), "storage": _storage(True)}, "nccl", None)
    assert (ok["verdict"], ok["code"]) == ("efa", 0) and ok["reasons"][-1].startswith("storage proof: wrote")
    bad = judge({**_data(), "storage": _storage(False)}, "nccl", None)
    assert (bad["verdict"], bad["code"]) == ("failed", 1)
    assert bad["reasons"][0].startswith("storage proof failed at put") and FAILURE_HINTS["storage"] in bad["hints"]
    assert bad["failure"] == {
        "stage": "storage",
        "reason": bad["reasons"][0],
        "step": "put",
        "error": "AccessDenied",
        "causes": ["bucket_policy"],
    }
    # an undetermined run with failed storage is a failure too; a rank error stays the failure named
    assert judge({**_data({}), "storage": _storage(False)}, "nccl", None)["code"] == 1
    d = _data()
    d["outs"][1]["error"] = "boom"
    both = judge({**d, "storage": _storage(False)}, "nccl", None)
    assert both["failure"]["stage"] == "rank_error" and both["reasons"][0].startswith("storage proof failed")


def test_busbw_floor_turns_only_a_pass_into_fallback() -> None:
    peak = (1 << 20) / 1e-3 / 1e9  # busbw of 2 ranks = algbw
    at = judge(_data(), "nccl", peak)
    assert at["code"] == 0 and not any("below the floor" in x for x in at["reasons"])
    low = judge(_data(), "nccl", peak * 1.01)
    assert (low["verdict"], low["code"]) == ("fallback", 1) and "is below the floor" in low["reasons"][-1]
    und = judge(_data({}), "nccl", peak * 2)
    assert (und["verdict"], und["code"]) == ("undetermined", 2) and "below the floor" in und["reasons"][-1]
    # only all-reduce rows count for the floor
    rows = [
        {"collective": "all_reduce", "bytes": 1 << 10, "time_s": 1e-3},
        {"collective": "all_gather_into_tensor", "bytes": 1 << 30, "time_s": 1e-3},
    ]
    assert judge(_data(results=rows), "nccl", 1.0)["code"] == 1
    assert judge(_data(), "nccl", 0.0)["code"] == 0


def _counters(moved: int, hosts=("n1", "n2")) -> dict:
    snap = lambda n: {"rdmap0s6": {"tx_bytes": n, "rx_bytes": n, "errors": {}}}  # noqa: E731
    return {
        "before": [{"host": h, "snapshot": snap(0)} for h in hosts],
        "after": [{"host": h, "snapshot": snap(moved)} for h in hosts],
    }


def _witness(
    moved: int | None = None, rows: list[dict] | None = None, counters: dict | None = None, **extra
) -> str | None:
    """The counter witness ``judge`` reports for an efa log: moved, flat, unreadable or None (no snapshots)."""
    d = {**_data(results=rows), "counters": _counters(moved) if counters is None else counters, **extra}
    return (judge(d, "nccl", None)["witness"] or {}).get("counters")


def test_counter_witness_counts_each_timed_iteration_plus_the_checked_call() -> None:
    """At the 50% boundary: iters=3 is 4 calls of 64 MiB, so each of 2 nodes had to send 2*(1/2)*4*64 MiB; half of
    that passes and one byte less does not (3 or 5 calls would move the boundary)."""
    size = 64 << 20
    rows = [{"collective": "all_reduce", "bytes": size, "time_s": 1e-2}]
    assert _witness(2 * size, rows, iters=3) == "moved"
    assert _witness(2 * size - 1, rows, iters=3) == "flat"
    # the default is 5 timed iterations: 6 calls
    assert _witness(3 * size, rows) == "moved"
    assert _witness(3 * size - 1, rows) == "flat"
    # other collectives do not add to the all-reduce bytes
    gather = [*rows, {"collective": "all_gather_into_tensor", "bytes": 1 << 34, "time_s": 1e-2}]
    assert _witness(2 * size, gather, iters=3) == "moved"


def _after_missing() -> dict:
    c = _counters(1 << 40)
    c["after"] = None
    return c


def _before_none() -> dict:
    c = _counters(1 << 40)  # a host whose before snapshot is None: its device appeared during the sweep
    c["before"][0]["snapshot"] = None
    c["before"][1]["snapshot"] = None
    return c


@pytest.mark.parametrize(
    "counters, state",
    [
        ({}, None),  # no snapshots: no second witness
        ({"before": [], "after": []}, None),
        (_after_missing(), "unreadable"),  # one-sided hosts are no delta
        (_before_none(), "unreadable"),
    ],
)
def test_counter_witness_absent_snapshots_and_one_sided_hosts(counters, state) -> None:
    rows = [{"collective": "all_reduce", "bytes": 1 << 20, "time_s": 1e-3}]
    assert _witness(rows=rows, counters=counters, iters=1) == state


def test_a_host_without_a_before_snapshot_is_a_device_that_appeared_during_the_sweep() -> None:
    d = {
        **_data(results=[{"collective": "all_reduce", "bytes": 1 << 20, "time_s": 1e-3}]),
        "counters": _before_none(),
        "iters": 1,
    }
    assert judge(d, "nccl", None)["witness"]["reasons"] == [
        f"node {h}: no readable EFA counter (rdmap0s6 device: appeared during the sweep)" for h in ("n1", "n2")
    ]


def test_counter_witness_quotes_unreadable_and_error_hosts() -> None:
    c = _counters(0)
    for side in ("before", "after"):  # no readable counter on either node: the reason is quoted
        for s in c[side]:
            s["snapshot"] = {"rdmap0s6": {"errors": {"hw_counters": "no such directory"}}}
    c["before"][0]["unreadable"] = "no hw_counters on n1"
    c["after"][1]["error"] = "exporter on n2 refused"
    r = judge(
        {**_data(results=[{"collective": "all_reduce", "bytes": 1 << 20, "time_s": 1e-3}]), "counters": c, "iters": 1},
        "nccl",
        None,
    )
    text = " ".join(r["witness"]["reasons"])
    assert r["witness"]["counters"] == "unreadable" and "no hw_counters on n1" in text
    assert "exporter on n2 refused" in text and r["verdict"] == "efa"


def test_judge_reads_counters_only_for_the_efa_gate_over_nccl() -> None:
    flat = {
        **_data(results=[{"collective": "all_reduce", "bytes": 64 << 20, "time_s": 1e-2}]),
        "counters": _counters(0),
        "iters": 1,
    }
    r = judge(flat, "nccl", None)
    assert (r["verdict"], r["code"]) == ("fallback", 1) and r["witness"]["counters"] == "flat"
    logs = {"a": (_socket_rank("node-a", 1) + _socket_rank("node-b", 2)).encode()}
    sock = judge({**flat, "outs": _data(logs)["outs"]}, "nccl", None, transport="socket")
    assert (sock["verdict"], sock["code"], sock["witness"]) == ("socket", 0, None)
    assert sock["efa_exercised"] is False and sock["reasons"][0].startswith("NCCL crossed 2 nodes")
    assert all(x.startswith("NCCL log: ") for x in sock["reasons"][1:]) and sock["hints"] == []


def test_require_counters_without_any_snapshot_is_undetermined_only_on_the_efa_gate() -> None:
    r = judge(_data(), "nccl", None, require_counters=True)
    assert (r["verdict"], r["code"]) == ("undetermined", 2) and r["witness"]["required"] is True
    assert any("no node reported EFA counters" in x for x in r["reasons"])
    assert judge(_data(), "nccl", None, require_counters=False)["code"] == 0
    logs = {"a": (_socket_rank("node-a", 1) + _socket_rank("node-b", 2)).encode()}
    s = judge(_data(logs), "nccl", None, require_counters=True, transport="socket")
    assert (s["verdict"], s["code"], s["witness"]) == ("socket", 0, None)


def test_expected_topology_reaches_the_log_reader() -> None:
    r = judge(_data(), "nccl", None, expect={"expect_nodes": 4, "unknown_key": 1, "expect_gdrdma": None})
    assert r["code"] != 0 and any("4" in x for x in r["reasons"])
    assert judge(_data(), "nccl", None, expect={"expect_nodes": 2})["code"] == 0


# -- the mutation run's survivors (.ci/mutation.py efacheck/verdict.py) ----------------------------------------------


def test_two_ranks_inside_one_node_are_counted_not_called_one() -> None:
    v, code, why = shape_verdict("intra-node", _rep(1, None), 2)
    assert (v, code) == ("intra_node", 0) and why.startswith("NCCL ran inside one node (2 ranks) and")


def test_a_rank_error_beside_an_undetermined_log_is_a_failure() -> None:
    d = _data({})
    d["outs"][1]["error"] = "CUDA error: out of memory"
    r = judge(d, "nccl", None)
    assert (r["verdict"], r["code"]) == ("failed", 1) and r["failure"]["stage"] == "rank_error"
    assert r["reasons"] == ["rank 1: CUDA error: out of memory", "no NCCL log files were written by any rank"]


def test_required_counters_that_no_node_sent_say_so() -> None:
    r = judge(_data(), "nccl", None, require_counters=True)
    first = r["reasons"][0]
    assert first.startswith("the EFA hardware counters could not be read") and first.endswith(
        "efaCheckRequireCounters makes the verdict undetermined: no node reported EFA counters"
    )
    assert r["witness"] == {"counters": "unreadable", "required": True, "reasons": ["no node reported EFA counters"]}


def test_a_gloo_run_beside_nccl_logs_that_say_efa_is_never_efa() -> None:
    """A real bug the run found: backend gloo with NCCL logs in the directory (an earlier run's) passed the EFA gate
    (0); NCCL was not used, so it is undetermined whatever the logs say."""
    r = judge(_data(), "gloo", None)
    assert (r["verdict"], r["code"]) == ("undetermined", 2)
    assert r["reasons"][0].startswith("backend gloo: NCCL was not used") and r["reasons"][0].endswith("and no EFA")


def test_the_result_carries_counters_witness_and_reasons_as_given() -> None:
    flat = {
        **_data(results=[{"collective": "all_reduce", "bytes": 64 << 20, "time_s": 1e-2}]),
        "counters": _counters(0),
        "iters": 1,
    }
    assert judge(flat, "nccl", None)["counters"] == _counters(0)
    assert judge(_data({}), "nccl", None)["witness"] is None
    d = _data({"a": (_socket_rank("node-a", 1) + _socket_rank("node-b", 2)).encode()})
    d["outs"][1]["error"] = "boom"
    sock = judge(d, "nccl", None, transport="socket")
    assert sock["reasons"][:2] == ["rank 1: boom", sock["reasons"][1]] and sock["reasons"][1].startswith("NCCL crossed")


def test_the_floor_without_any_timing_says_zero() -> None:
    d = _data()
    d["outs"][1]["error"] = "boom"
    r = judge(d, "nccl", 5.0)
    assert r["reasons"][-1] == "peak all-reduce busbw 0.00 GB/s is below the floor 5.0 GB/s"


def test_wrong_rows_name_their_ranks_in_order_and_count_past_six() -> None:
    rows = [{"collective": "all_reduce", "bytes": 1 << i, "time_s": 1e-3, "ok": False} for i in range(10, 17)]
    d = _data(results=rows)
    d["outs"][0]["rank"], d["outs"][1]["rank"] = 10, 2
    r = judge(d, "nccl", None)["failure"]["reason"]
    assert "on rank(s) 2, 10; " in r and r.endswith(" (and 1 more)")
    six = judge(_data(results=rows[:6]), "nccl", None)["failure"]["reason"]
    assert six.endswith("all_reduce of 32768 bytes (32 KiB, float32, pow2) on rank(s) 0, 1")


def test_shape_reasons_word_for_word() -> None:
    nothing = shape_verdict("socket", _rep(None, "Socket"), 2)[2]
    assert nothing.startswith("efa: false: nothing in the NCCL logs") and nothing.endswith("(no node(s) counted)")
    inside = shape_verdict("intra-node", _rep(1, None), 2)[2]
    assert inside.startswith("NCCL ran inside one node (2 ranks) and") and "EFA was not exercised: " in inside
    assert inside.endswith("one GPU node has no peer to reach over it")


def test_one_ranks_unnamed_sweep_is_its_own_timing() -> None:
    (row,) = summarize_sweep([{"results": [{"bytes": 1_000_000_000, "time_s": 0.5}]}], 1)
    assert (row["algbw_gbps"], row["time_us"]) == (2.0, 500000.0)
