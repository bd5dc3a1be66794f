"""The second witness: EFA hardware counters, read from sysfs before and after the sweep.

The NCCL log says which network NCCL *chose*; the EFA device's own counters
(``/sys/class/infiniband/<dev>/ports/1/hw_counters/``, one integer per file)
say how many bytes the hardware *moved*. A log that says efa while the counters
stayed flat means EFA loaded but the traffic went elsewhere (a TCP path, a
forced NCCL_NET, a rank that never used the plugin). ``efa_check`` reads the
counters on every node from one actor per node before and after the sweep and
feeds :func:`judge_counters` into :func:`combine`.

Pure functions over plain dicts (JSON-safe, so they cross Ray actor calls).
"""

from __future__ import annotations

import os
from typing import Any

SYSFS_ROOT = "/sys/class/infiniband"

TX = ("tx_bytes",)
RX = ("rx_bytes",)
# Message/RDMA counters the EFA driver exposes where the device supports them (newer kernels / Nitro v4+).
SENT_PARTS = ("send_bytes", "rdma_write_bytes", "rdma_read_resp_bytes")
RECV_PARTS = ("recv_bytes", "rdma_read_bytes", "rdma_write_recv_bytes")
COUNTERS = TX + RX + SENT_PARTS + RECV_PARTS
REQUIRED = TX + RX

TOLERANCE = 0.5
"""A node passes when the larger of its sent/received EFA bytes is >= TOLERANCE x the inter-node bytes the
collectives had to move per node. Why half: the expected figure is the ring all-reduce's 2(n-1)/n x size per node;
NCCL may pick tree (or PAT) instead, which moves ~1 x size across nodes per node, i.e. ~0.57x the ring figure for
2 nodes; everything else the counters see (packet headers, retransmits, bootstrap, warm-up iterations, other
processes on the NIC) only adds bytes. So a real EFA run lands at >= ~0.57x, and a share below one half means
part of the traffic went another way. Per direction, the larger of tx/rx_bytes and the sum of the message and RDMA
parts is used (which of them count RDMA traffic depends on the device generation and driver, and the RDMA ones
exist only on newer ones), and per node the larger direction: traffic that did not use EFA moves neither."""

FLAT = 0.01
"""Below 1% of the expected bytes the counters count as "did not move" (only bootstrap/keep-alive traffic)."""


def allreduce_bytes_per_node(bytes_reduced: float, world: int, nodes: int) -> float:
    """Inter-node bytes each node must send for all-reduces of ``bytes_reduced`` in total (sum of sizes x iterations).

    Ring all-reduce over ``world`` ranks: every ring crosses each node boundary once per direction and carries
    2(world-1)/world x size on each link, so each node sends 2(world-1)/world x size across nodes, however many GPUs
    it has. One node (or one rank) sends nothing across nodes.
    """
    if nodes < 2 or world < 2:
        return 0.0
    return 2 * (world - 1) / world * bytes_reduced


def _read_int(path: str) -> int:
    with open(path, encoding="ascii") as f:
        return int(f.read().strip())


def read_counters(root: str = SYSFS_ROOT) -> dict[str, dict[str, Any]]:
    """Per EFA device: the byte counters of port 1 that exist, plus ``errors`` {file: why} for unreadable ones.

    No devices (or no ``root``) gives ``{}``. tx_bytes and rx_bytes are expected on every EFA device; their
    absence is an error too.
    """
    try:
        devices = sorted(os.listdir(root))
    except OSError:
        return {}
    out: dict[str, dict[str, Any]] = {}
    for dev in devices:
        hw = os.path.join(root, dev, "ports", "1", "hw_counters")
        entry: dict[str, Any] = {"errors": {}}
        if not os.path.isdir(hw):
            entry["errors"]["hw_counters"] = f"{hw}: no such directory"
            out[dev] = entry
            continue
        for name in COUNTERS:
            path = os.path.join(hw, name)
            if not os.path.exists(path):
                if name in REQUIRED:
                    entry["errors"][name] = f"{path}: missing"
                continue
            try:
                entry[name] = _read_int(path)
            except (OSError, ValueError, UnicodeDecodeError) as e:
                entry["errors"][name] = f"{path}: {getattr(e, 'strerror', None) or e}"
        out[dev] = entry
    return out


def counter_delta(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per device, how much each counter grew; a device seen once or a counter that went backwards is an error."""
    out: dict[str, dict[str, Any]] = {}
    for dev in sorted(set(before) | set(after)):
        b, a = before.get(dev), after.get(dev)
        errors: dict[str, str] = {}
        entry: dict[str, Any] = {"errors": errors}
        if b is None or a is None:
            errors["device"] = "appeared during the sweep" if b is None else "disappeared during the sweep"
            out[dev] = entry
            continue
        for side in (b, a):
            errors.update(side.get("errors", {}))
        for name in COUNTERS:
            if isinstance(b.get(name), int) and isinstance(a.get(name), int):
                d = a[name] - b[name]
                if d < 0:
                    errors[name] = f"went backwards by {-d} (counter reset?)"
                else:
                    entry[name] = d
        out[dev] = entry
    return out


def _moved(entry: dict[str, Any]) -> tuple[int | None, int | None]:
    """(sent, received) bytes of one device delta: the larger of tx/rx_bytes and the sum of the message/RDMA parts."""
    def side(total: tuple[str, ...], parts: tuple[str, ...]) -> int | None:
        vals = [entry[k] for k in total if isinstance(entry.get(k), int)]
        part = [entry[k] for k in parts if isinstance(entry.get(k), int)]
        if not vals and not part:
            return None
        return max(vals + ([sum(part)] if part else []))
    return side(TX, SENT_PARTS), side(RX, RECV_PARTS)


def _gb(n: float) -> str:
    return f"{n / 1e9:.3f} GB"


def node_bytes(deltas: dict[str, dict[str, Any]]) -> dict[str, dict[str, int | None]]:
    """Bytes per device of one node's delta: {device: {"sent": n, "received": n}} (None where unreadable)."""
    return {dev: dict(zip(("sent", "received"), _moved(e))) for dev, e in deltas.items()}


def judge_counters(
    deltas_by_node: dict[str, dict[str, dict[str, Any]]], expected_bytes_per_node: float, log_verdict: str
) -> tuple[bool | None, list[str]]:
    """Did the EFA hardware move the inter-node bytes the collectives had to send, on every node?

    deltas_by_node: {node: counter_delta(...)}; expected_bytes_per_node: inter-node bytes each node had to send in
    the sweep (e.g. ring all-reduce: sum over sizes x iterations of 2(n-1)/n x size); log_verdict: the NCCL log's
    verdict, to say which witness disagrees. Returns (True: every node moved >= TOLERANCE x expected; False: some
    node moved less, "EFA loaded, traffic went elsewhere" when the log says efa; None: cannot tell, e.g. no EFA
    device or no readable counter on a node) and the reasons, with bytes per device and node.
    """
    reasons: list[str] = []
    if not deltas_by_node:
        return None, ["no node reported EFA counters"]
    if not expected_bytes_per_node or expected_bytes_per_node <= 0:
        return None, [f"expected bytes per node is {expected_bytes_per_node!r}: nothing to compare the counters with"]
    verdicts: list[bool | None] = []
    for node in sorted(deltas_by_node):
        deltas = deltas_by_node[node]
        if not deltas:
            reasons.append(f"node {node}: no EFA device under {SYSFS_ROOT}")
            verdicts.append(None)
            continue
        per_dev = node_bytes(deltas)
        errs = [f"{dev} {k}: {v}" for dev, e in deltas.items() for k, v in e.get("errors", {}).items()]
        sent = [v["sent"] for v in per_dev.values() if v["sent"] is not None]
        recv = [v["received"] for v in per_dev.values() if v["received"] is not None]
        devs = ", ".join(
            f"{dev} sent {_gb(v['sent']) if v['sent'] is not None else '?'} received "
            f"{_gb(v['received']) if v['received'] is not None else '?'}" for dev, v in sorted(per_dev.items()))
        if not sent and not recv:
            reasons.append(f"node {node}: no readable EFA counter ({'; '.join(errs) or 'none'})")
            verdicts.append(None)
            continue
        moved = max(sum(sent), sum(recv))
        share = moved / expected_bytes_per_node
        head = (f"node {node}: EFA moved {_gb(moved)} = {share:.0%} of the {_gb(expected_bytes_per_node)} the "
                f"collectives had to send across nodes ({devs})")
        if errs:
            head += f"; unreadable: {'; '.join(errs)}"
        if share >= TOLERANCE:
            reasons.append(head + f" >= {TOLERANCE:.0%}")
            verdicts.append(True)
        elif share < FLAT:
            what = "EFA loaded, traffic went elsewhere" if log_verdict == "efa" else "EFA counters did not move"
            reasons.append(f"{what}: {head}")
            verdicts.append(False)
        else:
            reasons.append(f"only part of the traffic used EFA: {head} < {TOLERANCE:.0%}")
            verdicts.append(False)
    if any(v is False for v in verdicts):
        ok: bool | None = False
    elif all(v is True for v in verdicts):
        ok = True
        if log_verdict != "efa":
            reasons.append(f"the EFA counters moved although the NCCL log says {log_verdict}")
    else:
        ok = None
    return ok, reasons


def combine(log_report: Any, counter_judgement: tuple[bool | None, list[str]], require: bool = False) -> Any:
    """The final verdict from both witnesses: efa only when the log says efa and the counters do not contradict it.

    log_report: a ``nccl_log.Report``; counter_judgement: :func:`judge_counters`'s result. Counters that did not
    move while the log says efa turn it into ``fallback`` (cause ``counters_flat``). Unreadable counters keep the
    log's verdict with a reason, or make it ``undetermined`` when ``require`` is set.
    """
    from .nccl_log import with_verdict

    ok, reasons = counter_judgement
    text = "EFA counters: " + " | ".join(reasons)
    if log_report.verdict == "efa" and ok is False:
        return with_verdict(log_report, "fallback", text, "counters_flat")
    if log_report.verdict == "efa" and ok is None:
        return with_verdict(log_report, "undetermined" if require else "efa", text, "counters_unavailable")
    return with_verdict(log_report, log_report.verdict, text)
