"""The collectives FSDP really issues, timed the way nccl-tests times them.

FSDP2 (``fully_shard`` per block + root, as ``train_func`` does) sends one all-gather of the unit's parameters in
``param_dtype`` before each forward/backward and one reduce-scatter of its gradients in ``reduce_dtype`` after the
backward; all-reduce is the DDP/HSDP case and the classic nccl-tests headline. The sweep times all three over
powers of two AND over the model's own per-unit message sizes (``fsdp_units``), so the figure answers "what does
my training step see", not only "what does the link do at 1 GiB".

Bus bandwidth (nccl-tests, doc/PERFORMANCE.md): algbw = bytes / time, with bytes = the whole array (all-gather:
the gathered output; reduce-scatter: the input); busbw = algbw * 2(n-1)/n for all-reduce, algbw * (n-1)/n for
all-gather and reduce-scatter. busbw is comparable across collectives and world sizes, and on multi-node runs
approaches the per-node network rate, hence ``line_rate``: busbw GB/s * 8 / the node's EFA Gbit/s.

Everything here is pure (data in, data out) except ``run_sweep``, which runs inside an initialised
torch.distributed process group; the Ray actors of ``efa_check`` call it and hand the results to ``summarize``.
Units: ``*_gbps`` fields are GB/s (1e9 bytes/s), as nccl-tests prints them; line rates are Gbit/s.
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Any, Callable, Iterable

from . import fsdp_shapes

COLLECTIVES = ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor")
"""Row names: nccl-tests' operations under torch's established names (torch 2.13 also calls the latter two
``all_gather_single`` / ``reduce_scatter_single``, which FSDP2 uses; same op)."""

SOCKET_ENV = {"NCCL_NET": "Socket"}
"""Env that forces NCCL onto its built-in Socket transport (NCCL reads it at communicator init, so the
comparison sweep needs fresh processes: e.g. Ray actors with ``runtime_env={"env_vars": SOCKET_ENV}``)."""

TRANSPORT_ENV_KEYS = ("NCCL_NET", "NCCL_NET_PLUGIN", "FI_PROVIDER", "NCCL_SOCKET_IFNAME", "NCCL_IB_DISABLE")
"""Env each rank records next to its timings, so a report can show which transport a sweep was asked for."""

LARGE_BYTES = 64 << 20
"""Messages at least this big count as "large" for the headline figures (bandwidth-bound on every EFA type)."""

_ELEM = {"float32": 4, "bfloat16": 2, "float16": 2}


def bus_factor(collective: str, world: int) -> float:
    """busbw / algbw for ``collective`` on ``world`` ranks (nccl-tests' factor)."""
    if collective not in COLLECTIVES:
        raise ValueError(f"collective {collective!r}: unknown; choose from {', '.join(COLLECTIVES)}")
    if world < 1:
        raise ValueError(f"world {world}: needs at least one rank")
    return (2 if collective == "all_reduce" else 1) * (world - 1) / world


def pow2_sizes(min_bytes: int, max_bytes: int) -> list[int]:
    """Powers of two from the first >= ``min_bytes`` (at least 4) up to ``max_bytes``."""
    if min_bytes > max_bytes:
        raise ValueError(f"min_bytes {min_bytes} > max_bytes {max_bytes}: swap them")
    s = 1 << max(2, math.ceil(math.log2(max(4, min_bytes))))
    out = []
    while s <= max_bytes:
        out.append(s)
        s <<= 1
    return out


def _padded_numel(shape: Iterable[int], world: int) -> int:
    """FSDP2 pads dim 0 to a multiple of the world (``torch.chunk`` then pad): the numel it really sends."""
    shape = list(shape)
    if not shape:
        return world  # a scalar is sharded as a 1-element dim 0
    rest = math.prod(shape[1:])
    return math.ceil(shape[0] / world) * world * rest


def fsdp_units(preset: str, world: int) -> list[dict[str, Any]]:
    """One entry per FSDP unit of the training model for ``preset``, as ``train_func`` shards it (each block, then
    the root with the remaining parameters): ``unit``, ``params`` (numel) and ``numel`` (padded, what goes on the
    wire). From :mod:`.fsdp_shapes` (the model's parameter shapes as data): no model is built, no torch needed."""
    return [
        {
            "unit": unit,
            "params": sum(math.prod(s) for s in shapes),
            "numel": sum(_padded_numel(s, world) for s in shapes),
        }
        for unit, shapes in fsdp_shapes.units(preset)
    ]


def fsdp_message_sizes(
    preset: str, world: int, param_dtype: str = "bfloat16", reduce_dtype: str = "float32"
) -> dict[str, list[int]]:
    """Distinct message sizes (bytes, whole array) FSDP2 sends per step for ``preset`` on ``world`` ranks:
    all-gather in ``param_dtype``, reduce-scatter in ``reduce_dtype`` (train_func's MixedPrecisionPolicy on GPU:
    bf16 / fp32), all-reduce in ``reduce_dtype`` (what HSDP's replica all-reduce would send)."""
    numels = sorted({u["numel"] for u in fsdp_units(preset, world)})
    return {
        "all_reduce": [n * _ELEM[reduce_dtype] for n in numels],
        "all_gather_into_tensor": [n * _ELEM[param_dtype] for n in numels],
        "reduce_scatter_tensor": [n * _ELEM[reduce_dtype] for n in numels],
    }


def plan(
    min_bytes: int, max_bytes: int, world: int, preset: str | None = None, collectives: Iterable[str] = COLLECTIVES
) -> list[dict[str, Any]]:
    """What to time: per collective, powers of two (float32) plus ``preset``'s FSDP sizes (their own dtype).

    Each entry: ``collective``, ``bytes`` (whole array, rounded down to a multiple of world * element so every
    rank gets an equal chunk), ``dtype``, ``source`` ("pow2" or "fsdp:<preset>")."""
    fsdp = fsdp_message_sizes(preset, world) if preset else {}
    dtypes = {"all_reduce": "float32", "all_gather_into_tensor": "bfloat16", "reduce_scatter_tensor": "float32"}
    out, seen = [], set()
    for c in collectives:
        bus_factor(c, world)  # validates the name
        entries = [(b, "float32", "pow2") for b in pow2_sizes(min_bytes, max_bytes)]
        entries += [(b, dtypes[c], f"fsdp:{preset}") for b in fsdp.get(c, [])]
        for b, dt, src in sorted(entries):
            unit = _ELEM[dt] * (world if c != "all_reduce" else 1)
            b = b // unit * unit
            if b and (c, b, src) not in seen:  # a collective named twice is still timed once per size
                seen.add((c, b, src))
                out.append({"collective": c, "bytes": b, "dtype": dt, "source": src})
    return out


def run_sweep(
    entries: list[dict[str, Any]],
    device: Any,
    iters: int = 5,
    warmup: int = 1,
    sync: Callable[[], None] | None = None,
    group: Any = None,
) -> list[dict[str, Any]]:
    """Time each ``plan`` entry on this rank inside an initialised process group; returns this rank's rows
    (the entry + ``time_s`` per iteration and ``ok``: the warm-up result had the right values).

    ``sync`` waits for the device (``torch.cuda.synchronize`` for NCCL; None on the CPU)."""
    import os

    import torch
    import torch.distributed as dist

    ag = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    rs = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    sync = sync or (lambda: None)
    rows = []
    for e in entries:
        dt = getattr(torch, e["dtype"])
        n = e["bytes"] // _ELEM[e["dtype"]]
        c = e["collective"]
        if c == "all_reduce":
            buf = torch.ones(n, dtype=dt, device=device)

            def op(buf=buf):
                dist.all_reduce(buf, group=group)

            def check(buf=buf):
                return bool((buf == world).all())
        elif c == "all_gather_into_tensor":
            inp = torch.full((n // world,), float(rank % 64), dtype=dt, device=device)  # exact in bf16
            out = torch.empty(n, dtype=dt, device=device)

            def op(inp=inp, out=out):
                ag(out, inp, group=group)

            def check(out=out):  # chunk r holds rank r's values; broadcast compare, no n-sized index tensor
                want = (torch.arange(world, device=device) % 64).to(dt).unsqueeze(1)
                return bool((out.view(world, -1) == want).all())
        else:
            inp = torch.ones(n, dtype=dt, device=device)
            out = torch.empty(n // world, dtype=dt, device=device)

            def op(inp=inp, out=out):
                rs(out, inp, group=group)

            def check(out=out):
                return bool((out == world).all())

        op()  # first call: connection setup, and the values are checked once
        sync()
        ok = check()
        if c == "all_reduce":
            buf.fill_(1)  # in place: keep values bounded
        for _ in range(warmup - 1):
            op()
        dist.barrier(group=group)
        sync()
        t0 = time.perf_counter()
        for _ in range(iters):
            op()
        sync()
        rows.append({**e, "time_s": (time.perf_counter() - t0) / iters, "ok": ok})
    return [{**r, "rank": rank, "env": {k: os.environ.get(k) for k in TRANSPORT_ENV_KEYS}} for r in rows]


def summarize(per_rank_timings: list[list[dict[str, Any]]], world: int) -> list[dict[str, Any]]:
    """One row per (collective, bytes, source) from every rank's ``run_sweep`` rows: ``time_us`` is the mean over
    ranks (nccl-tests' default ``-a 1``), ``time_us_max`` the slowest rank; algbw/busbw from the mean."""
    if not per_rank_timings:
        return []
    keyed: dict[tuple, list[dict]] = {}
    for rank_rows in per_rank_timings:
        for r in rank_rows:
            keyed.setdefault((r["collective"], r["bytes"], r.get("source", "pow2")), []).append(r)
    order = {c: i for i, c in enumerate(COLLECTIVES)}
    out = []
    for (c, b, src), rs in sorted(keyed.items(), key=lambda kv: (order.get(kv[0][0], 99), kv[0][1], kv[0][2])):
        t = statistics.fmean(r["time_s"] for r in rs)
        alg = b / t / 1e9 if t > 0 else 0.0
        out.append(
            {
                "collective": c,
                "bytes": b,
                "source": src,
                "dtype": rs[0].get("dtype", "float32"),
                "time_us": t * 1e6,
                "time_us_max": max(r["time_s"] for r in rs) * 1e6,
                "algbw_gbps": alg,
                "busbw_gbps": alg * bus_factor(c, world),
                "ok": all(r.get("ok", True) for r in rs),
                "ranks": len(rs),
            }
        )
    return out


def _large(rows: list[dict[str, Any]], collective: str) -> dict[str, Any] | None:
    """The row at the largest power-of-two size of ``collective``."""
    cand = [r for r in rows if r["collective"] == collective and r.get("source", "pow2") == "pow2"]
    return max(cand, key=lambda r: r["bytes"], default=None)


def compare(efa_rows: list[dict[str, Any]], socket_rows: list[dict[str, Any]]) -> dict[str, Any]:
    """EFA/Socket busbw ratio per (collective, bytes, source) both sweeps ran; per collective the median ratio over
    the large power-of-two sizes both ran (>= LARGE_BYTES, or the largest one when the sweep stops below it: the
    bandwidth-bound end); and the headline: the geometric mean of those over the collectives."""
    sock = {(r["collective"], r["bytes"], r.get("source", "pow2")): r for r in socket_rows}
    rows = []
    for r in efa_rows:
        s = sock.get((r["collective"], r["bytes"], r.get("source", "pow2")))
        if s is None:
            continue
        ratio = r["busbw_gbps"] / s["busbw_gbps"] if s["busbw_gbps"] > 0 else None
        rows.append(
            {
                "collective": r["collective"],
                "bytes": r["bytes"],
                "source": r.get("source", "pow2"),
                "efa_busbw_gbps": r["busbw_gbps"],
                "socket_busbw_gbps": s["busbw_gbps"],
                "ratio": ratio,
            }
        )
    per: dict[str, dict[str, Any]] = {}
    for c in COLLECTIVES:
        common = [x for x in rows if x["collective"] == c and x["source"] == "pow2" and x["ratio"]]
        if not common:
            continue
        floor = min(LARGE_BYTES, max(x["bytes"] for x in common))
        large = [x for x in common if x["bytes"] >= floor]  # median over the large sizes: one noisy size can't swing it
        per[c] = {
            "bytes": min(x["bytes"] for x in large),
            "ratio": statistics.median(x["ratio"] for x in large),
            "sizes": len(large),
        }
    headline = math.exp(statistics.fmean(math.log(v["ratio"]) for v in per.values())) if per else None
    return {
        "rows": rows,
        "large": per,
        "headline_ratio": headline,
        "headline_bytes": min((v["bytes"] for v in per.values()), default=None),
    }


def line_rate(rows: list[dict[str, Any]], efa_gbps: float | None) -> dict[str, Any] | None:
    """Large-message busbw as a fraction of the node's EFA line rate (catalogue ``efa_gbps``, Gbit/s), per
    collective, and ``fraction``: the lowest of them (every collective FSDP uses must reach a floor)."""
    if not efa_gbps:
        return None
    per = {}
    for c in COLLECTIVES:
        big = _large(rows, c)
        if big:
            per[c] = {
                "bytes": big["bytes"],
                "busbw_gbps": big["busbw_gbps"],
                "fraction": big["busbw_gbps"] * 8 / efa_gbps,
            }
    return {"efa_gbps": efa_gbps, "large": per, "fraction": min((v["fraction"] for v in per.values()), default=None)}


def below_floor(rate: dict[str, Any] | None, min_fraction: float | None) -> str | None:
    """The reason to fail ``--min-busbw-fraction``, or None when met (or not asked)."""
    if min_fraction is None:
        return None
    if not rate or rate["fraction"] is None:
        return f"--min-busbw-fraction {min_fraction}: no line rate known for this instance type (pass --efa-gbps)"
    if rate["fraction"] >= min_fraction:
        return None
    worst = min(rate["large"].items(), key=lambda kv: kv[1]["fraction"])
    return (
        f"large-message busbw of {worst[0]} is {worst[1]['busbw_gbps']:.2f} GB/s at {worst[1]['bytes']} B = "
        f"{worst[1]['fraction']:.1%} of the {rate['efa_gbps']:g} Gbit/s EFA line rate, below the floor "
        f"{min_fraction:.0%}"
    )
