"""The verdict: the ranks' timings, NCCL logs, EFA counters and storage proof turned into one result (verdict,
exit code, reasons, hints); never ``efa`` without the NCCL logs saying so."""

from __future__ import annotations

import inspect
from typing import Any

from . import efa_counters as _counters
from . import sweep as _sweep
from .failures import FAILURE_HINTS
from .nccl_log import EXIT, HINTS, UnreadableInput, analyze_bytes

TRANSPORTS = ("efa", "socket", "intra-node")
"""What the gate expects (``--expect-transport``): EFA across nodes, NCCL's Socket across nodes (``efa: false``), or
NCCL inside one node (one GPU node)."""


def busbw(algbw: float, world: int) -> float:
    """nccl-tests all-reduce bus bandwidth: algbw * 2(n-1)/n."""
    return algbw * 2 * (world - 1) / world if world > 0 else 0.0


def _analyze(logs: list[tuple[str, bytes]], expect: dict[str, Any]):
    """nccl_log.analyze_bytes with the expected topology where the installed nccl_log accepts it."""
    params = inspect.signature(analyze_bytes).parameters
    kw = {k: v for k, v in expect.items() if k in params and v is not None}
    return analyze_bytes(logs, **kw)


def summarize_sweep(outs: list[dict], world: int) -> list[dict]:
    if all(r.get("collective") for o in outs for r in o["results"]):
        return _sweep.summarize([o["results"] for o in outs], world)
    sweep = []
    for i, r0 in enumerate(outs[0]["results"]):
        t = max(o["results"][i]["time_s"] for o in outs)
        alg = r0["bytes"] / t / 1e9
        sweep.append(
            {
                "collective": "all_reduce",
                "bytes": r0["bytes"],
                "time_us": t * 1e6,
                "algbw_gbps": alg,
                "busbw_gbps": busbw(alg, world),
            }
        )
    return sweep


def _counter_witness(data: dict, sweep: list[dict], log_verdict: str):
    """The second witness: EFA counter deltas per node against the bytes the all-reduces had to move."""
    snaps = data.get("counters") or {}
    if not snaps.get("before"):
        return None
    before = {s["host"]: s.get("snapshot") for s in snaps["before"] if s}
    after = {s["host"]: s.get("snapshot") for s in snaps.get("after") or [] if s}
    deltas = {h: _counters.counter_delta(before[h] or {}, after.get(h) or {}) for h in before if h in after}
    unreadable = {
        s["host"]: s.get("unreadable") or s.get("error")
        for s in [*snaps["before"], *(snaps.get("after") or [])]
        if s and (s.get("unreadable") or s.get("error"))
    }
    iters = data.get("iters", 5) + 1  # run_sweep: one checked call + iters timed
    reduced = sum(r["bytes"] * iters for r in sweep if r.get("collective") == "all_reduce")
    expected = _counters.allreduce_bytes_per_node(reduced, data["world"], data["nodes"])
    return _counters.judge_counters(deltas, expected, log_verdict, unreadable=unreadable)


def _fmt_bytes(n: int) -> str:
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n / k:g} {unit}"
    return f"{n} B"


def wrong_results(outs: list[dict]) -> list[dict]:
    """Sweep rows whose values were wrong (``run_sweep``'s ``ok`` False): collective, bytes, dtype, source, ranks."""
    bad: dict[tuple, dict] = {}
    for o in outs:
        for r in o.get("results") or []:
            if r.get("ok") is False:
                key = (r.get("collective", "all_reduce"), r["bytes"], r.get("source", "pow2"))
                row = bad.setdefault(
                    key,
                    {
                        "collective": key[0],
                        "bytes": key[1],
                        "source": key[2],
                        "dtype": r.get("dtype", "float32"),
                        "ranks": [],
                    },
                )
                row["ranks"].append(r.get("rank", o.get("rank")))
    return [bad[k] for k in sorted(bad)]


def _storage_summary(r: dict) -> str:
    from . import storage_proof  # ships beside this module in efacheck/

    return storage_proof.summary(r)


def shape_verdict(transport: str, rep: Any, world: int) -> tuple[str, int, str]:
    """(verdict, exit code, first reason) for the non-EFA shapes, from the NCCL log report ``rep``.

    socket: NCCL's own node count (or the hosts that logged) > 1 and its network Socket -> ``socket`` (0);
    intra-node: at most one node in the log -> ``intra_node`` (0); anything else -> undetermined (2), saying why.
    """
    nodes = rep.nodes or 0
    network = rep.network or ""
    if transport == "socket":
        if nodes > 1 and "Socket" in network and "libfabric" not in network.lower():
            return (
                "socket",
                0,
                (
                    f"NCCL crossed {nodes} nodes over its Socket transport, as configured (efa: false), "
                    f"and every collective gave the right values; EFA was not exercised"
                ),
            )
        if nodes > 1:
            return (
                "undetermined",
                2,
                (
                    f"efa: false expects NCCL's Socket transport across nodes, but NCCL used "
                    f"{network or 'an unnamed network'}"
                ),
            )
        return (
            "undetermined",
            2,
            (
                "efa: false: nothing in the NCCL logs shows traffic crossed nodes over Socket "
                f"({nodes or 'no'} node(s) counted)"
            ),
        )
    if nodes <= 1:
        what = f"{world} ranks" + (f", network {network}" if network else "") if world > 1 else "one rank, no peer"
        return (
            "intra_node",
            0,
            (
                f"NCCL ran inside one node ({what}) and every collective gave the right values; "
                "EFA was not exercised: one GPU node has no peer to reach over it"
            ),
        )
    return "undetermined", 2, f"one GPU node expected, but the NCCL logs count {nodes} nodes"


def judge(
    data: dict,
    backend: str,
    min_busbw_gbps: float | None,
    expect: dict[str, Any] | None = None,
    require_counters: bool = False,
    transport: str = "efa",
) -> dict:
    """Turn gathered rank outputs into one verdict dict (never 'efa' without NCCL logs saying so).

    require_counters: EFA hardware counters that cannot be read make an efa log ``undetermined`` (the stack's
    ``efaCheckRequireCounters``); either way the first reason and ``witness`` say they were unreadable.
    transport: ``TRANSPORTS``; ``socket`` and ``intra-node`` judge by :func:`shape_verdict` and read no counters.
    """
    world = data["world"]
    outs = data["outs"]
    errors = [(o["rank"], o["error"]) for o in outs if o.get("error")]
    sweep = summarize_sweep(outs, world) if not errors else []  # a rank's error: no trustworthy timings
    logs = [(k, v) for o in outs for k, v in o["logs"].items()]
    reasons, hints = [], []
    verdict, network, provider = "undetermined", None, None
    failure = None
    witness_state = None
    if backend != "nccl":
        reasons.append(f"backend {backend}: NCCL was not used, so no NCCL logs and no EFA")
    if errors:
        failure = {"stage": "rank_error", "reason": "; ".join(f"rank {r}: {e}" for r, e in errors[:4])}
        reasons.append(failure["reason"])
        hints.append(FAILURE_HINTS["rank_error"])
    wrong = wrong_results(outs) if not errors else []
    if wrong:  # a transport that corrupts data never passes, whatever the logs say
        failure = {
            "stage": "wrong_result",
            "reason": "wrong collective results: "
            + "; ".join(
                f"{w['collective']} of {w['bytes']} bytes ({_fmt_bytes(w['bytes'])}, {w['dtype']}, {w['source']}) on "
                f"rank(s) {', '.join(str(x) for x in sorted(w['ranks']))}"
                for w in wrong[:6]
            )
            + (f" (and {len(wrong) - 6} more)" if len(wrong) > 6 else ""),
            "rows": wrong,
        }
        reasons.append(failure["reason"])
        hints.append(FAILURE_HINTS["wrong_result"])
    if not logs:
        reasons.append("no NCCL log files were written by any rank")
        hints.append(HINTS["no_net_info"])
    else:
        try:
            rep = _analyze(logs, expect or {})
            efa_gate = transport == "efa"
            witness = _counter_witness(data, sweep, rep.verdict) if backend == "nccl" and efa_gate else None
            if witness is None and require_counters and backend == "nccl" and efa_gate:
                witness = (None, ["no node reported EFA counters"])
            if witness is not None:
                rep = _counters.combine(rep, witness, require=require_counters)
            witness_state = rep.witness
            verdict, network, provider = rep.verdict, rep.network, rep.provider
            if efa_gate:
                reasons += rep.reasons
                hints += rep.hints
            else:
                verdict, _code, first = shape_verdict(transport, rep, world)
                reasons += [first] + [f"NCCL log: {x}" for x in rep.reasons]
        except UnreadableInput as e:
            reasons.append(f"NCCL logs unreadable: {e}")
            verdict = "unreadable"
    storage = data.get("storage")
    if storage:
        line = _storage_summary(storage)
        if storage.get("ok"):
            reasons.append(line)
        else:
            reasons.insert(0, line)
            hints.append(FAILURE_HINTS["storage"])
            if failure is None:
                failure = {
                    "stage": "storage",
                    "reason": line,
                    "step": storage.get("step"),
                    "error": storage.get("error"),
                    "causes": storage.get("causes"),
                }
    code = 0 if verdict in ("socket", "intra_node") else EXIT[verdict]  # EXIT holds every other verdict
    if backend != "nccl":  # no NCCL, no EFA and no other NCCL shape, whatever logs lie in the log directory
        verdict, code = "undetermined", 2
    # a rank failed or checkpoints would fail (a failed storage proof is the failure when no rank failed): never a
    # pass, and a failed run is a failure, not a shrug
    if failure and code in (0, 2):
        verdict, code = "failed", 1
    ar = [s["busbw_gbps"] for s in sweep if s["collective"] == "all_reduce"]  # both summaries name it
    peak = max(ar, default=0.0)
    if min_busbw_gbps and peak < min_busbw_gbps:
        reasons.append(f"peak all-reduce busbw {peak:.2f} GB/s is below the floor {min_busbw_gbps} GB/s")
        if code == 0:
            verdict, code = "fallback", EXIT["fallback"]
    return {
        "verdict": verdict,
        "code": code,
        "failure": failure,
        "backend": backend,
        "world": world,
        "nodes": data["nodes"],
        "network": network,
        "provider": provider,
        "sweep": sweep,
        "reasons": reasons,
        "hints": hints,
        "probes": [o["probe"] for o in outs],
        "counters": data.get("counters"),
        "witness": witness_state,
        "storage": storage,
        "transport": transport,
        "efa_exercised": transport == "efa",
    }
