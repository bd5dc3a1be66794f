"""The second witness: EFA hardware counters, read from sysfs before and after the sweep.

The NCCL log says which network NCCL *chose*; the EFA device's own counters
(``<sysfs>/class/infiniband/<dev>/ports/1/hw_counters/``, one integer per file)
say how many bytes the hardware *moved*. A log that says efa while the counters
stayed flat means EFA loaded but the traffic went elsewhere (a TCP path, a
forced NCCL_NET, a rank that never used the plugin). ``efa_check`` reads the
counters on every node from one actor per node before and after the sweep and
feeds :func:`judge_counters` into :func:`combine`.

Where the counters are visible: the kernel creates the port ``hw_counters`` only
for the init network namespace's view of an RDMA device
(drivers/infiniband/core/sysfs.c ``setup_port``: ``if (port_num && is_full_dev)``;
Linux commit a1ecb30f9085 "RDMA/core: Dont expose hw_counters outside of init net
namespace"). A worker pod has its own network namespace, so its own
``/sys/class/infiniband/<dev>`` has ports but no port counters. One pod per EFA node
reads the host's view instead: the node agent's EFA exporter (components/addons/node_agent.py,
efa_exporter.py; the only pod that mounts host ``/sys``, read-only), and a pod reads its own
node's counters over HTTP through the node-local Service (``$RAY_EFA_EKS_EFA_EXPORTER``,
:func:`read_exporter`), checking that the exporter answered for its own node
(``$RAY_EFA_EKS_NODE_NAME``). :func:`read_view` tries the exporter first and the pod's own
sysfs second (right on bare metal and where the pod shares the host's network namespace;
tests and local runs pass their own sysfs roots). The device-level ``<dev>/hw_counters`` is
never read: on kernels from 5.14 until that fix, reading it from inside a namespace oopses the
node.

Pure functions over plain dicts (JSON-safe, so they cross Ray actor calls).
"""

from __future__ import annotations

import itertools
import os
import re
import stat
import time
from typing import Any

_SAMPLE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)(?:\s+\S+)?$")
_LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

SYSFS_ROOT = "/sys/class/infiniband"
"""The pod's own view: port counters exist here only in the init network namespace (hostNetwork, bare metal)."""
EXPORTER_ENV = "RAY_EFA_EKS_EFA_EXPORTER"
"""The node agent exporter's URL (``http://efa-exporter.<ns>.svc.cluster.local:9810/metrics``, node-local), set on
the EFA worker containers by components/ray/raycluster.py."""
NODE_ENV = "RAY_EFA_EKS_NODE_NAME"
"""The pod's node (downward API ``spec.nodeName``): the exporter's ``node`` label must be this."""
EXPORTER_TIMEOUT_S = 5.0
"""The exporter's answer may take this long per connect, send and receive (it answers a p5.48xlarge in ms)."""
EXPORTER_MAX_BYTES = 8 << 20
"""At most this much of the exporter's answer is read (743 series of a p5.48xlarge are ~150 KB)."""
VIEWS: tuple[tuple[str, str], ...] = (("pod", SYSFS_ROOT),)
"""(name, root) tried after the exporter named by ``$RAY_EFA_EKS_EFA_EXPORTER`` (:func:`default_views`)."""


def default_views(environ: "dict[str, str] | None" = None) -> tuple[tuple[str, str], ...]:
    """The node's exporter first (when the pod has one), then the pod's own sysfs."""
    env = os.environ if environ is None else environ
    url = env.get(EXPORTER_ENV)
    return ((("exporter", url),) if url else ()) + VIEWS


TX = ("tx_bytes",)
RX = ("rx_bytes",)
# Message/RDMA counters the EFA driver exposes where the device supports them (newer kernels / Nitro v4+).
SENT_PARTS = ("send_bytes", "rdma_write_bytes", "rdma_read_resp_bytes")
RECV_PARTS = ("recv_bytes", "rdma_read_bytes", "rdma_write_recv_bytes")
COUNTERS = TX + RX + SENT_PARTS + RECV_PARTS
REQUIRED = TX + RX

TOLERANCE = 0.5
"""A node passes when the larger of its sent/received EFA bytes is >= TOLERANCE x the inter-node bytes the
collectives had to move per node. Why half: the expected figure is the ring all-reduce's 2(n-1)/n x size per node
(n = ranks); NCCL may pick tree (or PAT) instead, which moves 1 x size across nodes per node and direction (each of
the two trees carries half), i.e. n/(2(n-1)) of the ring figure: 8/15 = 0.533 on 2 nodes x 8 GPUs, 4/7 = 0.571 on
2 x 4, falling towards 0.5 as n grows (:func:`tree_share`); everything else the counters see (packet headers, retransmits, bootstrap, warm-up iterations, other
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


def tree_share(world: int) -> float:
    """Tree all-reduce's inter-node bytes per node as a share of the ring's: size / (2(world-1)/world x size)."""
    return world / (2 * (world - 1)) if world > 1 else 0.0


# -- reading a node's sysfs without trusting it ---------------------------------------------------------------------
# The node agent reads the host's ``/sys`` on every scrape, and a host tree can hold anything a kernel bug, a driver or
# a person put there. So a counter file is stat'ed first and opened only when it is a regular file (a FIFO would block
# ``open`` for ever and a device such as ``/dev/zero`` never ends), opened with ``O_NONBLOCK`` and checked again with
# ``fstat`` (a swap between the two is caught), and read for at most :data:`MAX_FILE_BYTES`; its value must be the
# decimal form of an unsigned 64-bit integer (what ``hw_counters`` show: drivers/infiniband/core/sysfs.c
# ``hw_stat_port_show`` prints a ``u64`` with ``%llu``). A directory is listed for at most ``limit`` entries, and only
# names a kernel gives RDMA devices, ports and counters are read (:data:`NAME`). Every refusal is an ``OSError`` or a
# :class:`NotACounter` (a ``ValueError``) saying why, so a caller skips that one file and reads the rest.

MAX_FILE_BYTES = 64
"""A counter file holds at most 20 digits and a newline; anything longer is not a counter (only this much is read)."""
COUNTER_MAX = 2**64 - 1
"""The kernel's counters are ``u64``."""
NAME = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
"""Device (``rdmap16s0``, IB_DEVICE_NAME_MAX 64), port (``1``) and counter file (``tx_bytes``) names: anything else
(a newline, a quote, bytes that are not UTF-8) is not read."""
_DIGITS = re.compile(rb"[0-9]{1,20}")
_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)


class NotACounter(ValueError):
    """The file exists but does not hold one unsigned 64-bit integer (or is not a regular file)."""


def read_small(path: str, limit: int = MAX_FILE_BYTES) -> bytes:
    """At most ``limit`` bytes of regular file ``path``; :class:`NotACounter` for any other kind of file or a longer
    one, :class:`OSError` when it cannot be read (missing, a symlink loop, no permission)."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise NotACounter(f"not a regular file ({_kind(os.stat(path).st_mode)}): not opened")
    fd = os.open(path, _FLAGS)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):  # replaced between the stat and the open
            raise NotACounter(f"not a regular file ({_kind(mode)})")
        data = os.read(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise NotACounter(f"longer than {limit} bytes: not a counter")
    return data


def read_counter(path: str) -> int:
    """The unsigned 64-bit integer in counter file ``path`` (:func:`read_small`, then the value's form and range)."""
    data = read_small(path)
    text = data.strip(b" \t\n")
    if not _DIGITS.fullmatch(text):
        raise NotACounter(f"not an unsigned integer ({data[:24]!r})")
    value = int(text)
    if value > COUNTER_MAX:
        raise NotACounter(f"{value} is past a 64-bit counter's range")
    return value


def list_names(path: str, limit: int) -> tuple[list[str], list[str]]:
    """(names to read, sorted; problems): at most ``limit`` entries of directory ``path`` are looked at, and only
    those that match :data:`NAME`; :class:`OSError` when it cannot be listed (not a directory, a loop...)."""
    with os.scandir(path) as it:
        seen = [e.name for e in itertools.islice(it, limit + 1)]
    problems = [f"more than {limit} entries: only {limit} read"] if len(seen) > limit else []
    seen = seen[:limit]
    odd = [n for n in seen if not NAME.fullmatch(n)]
    if odd:
        problems.append(
            f"{len(odd)} entr{'y' if len(odd) == 1 else 'ies'} with a name no kernel gives "
            f"(e.g. {_shown(odd[0])}): not read"
        )
    return sorted(n for n in seen if NAME.fullmatch(n)), problems


def _shown(name: str) -> str:
    return ascii(name)[:40]


def _kind(mode: int) -> str:
    for test, what in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(mode):
            return what
    return "not a file"


MAX_DEVICES = 64
"""RDMA devices read per node (a p5.48xlarge has 32 EFA devices)."""
MAX_PORTS = 4
"""Ports read per device (an EFA device has one)."""
MAX_FILES_PER_PORT = 128
"""Files read per port ``hw_counters`` (the EFA driver has 22 counters and ``lifespan``)."""
BUDGET = "time budget"
"""The key :func:`read_ports` puts in ``problems`` when it stopped at its deadline."""


def read_counters(root: str = SYSFS_ROOT) -> dict[str, dict[str, Any]]:
    """Per EFA device: the byte counters of port 1 that exist, plus ``errors`` {file: why} for unreadable ones.

    No devices (or no ``root``) gives ``{}``. tx_bytes and rx_bytes are expected on every EFA device; their
    absence is an error too. Only the port's ``ports/1/hw_counters`` is read, never the device-level
    ``<dev>/hw_counters`` (see the module docstring: reading that inside a namespace oopses kernels 5.14..fix).
    Files are read as :func:`read_counter` reads them (bounded, regular files only).
    """
    try:
        devices, _ = list_names(root, MAX_DEVICES)
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
            try:
                entry[name] = read_counter(path)
            except FileNotFoundError:
                if name in REQUIRED:
                    entry["errors"][name] = f"{path}: missing"
            except (OSError, ValueError) as e:
                entry["errors"][name] = f"{path}: {_why(e)}"
        out[dev] = entry
    return out


def _why(e: BaseException) -> str:
    return getattr(e, "strerror", None) or str(e)


def is_efa(root: str, dev: str) -> bool:
    """False only when the device's driver link names another driver (``<dev>/device/driver`` -> ``.../efa``).

    The link is read, not followed (its target ``../../../bus/pci/drivers/efa`` is outside the mounted trees); a
    device whose link cannot be read is kept (an EFA node has no other RDMA devices)."""
    try:
        return os.path.basename(os.readlink(os.path.join(root, dev, "device", "driver"))) == "efa"
    except OSError:
        return True


def read_ports(
    root: str = SYSFS_ROOT, deadline: float | None = None, problems: dict[str, str] | None = None
) -> dict[str, dict[str, Any]]:
    """Every file of every port's ``hw_counters`` of every EFA device under ``root`` (the node agent's exporter).

    {dev: {"ports": {port: {file: int}}, "errors": {path: why}}}; no devices (or no ``root``) gives ``{}``. Like
    :func:`read_counters` it never reads the device-level ``<dev>/hw_counters`` (module docstring), and it follows
    the class entries' symlinks, so ``root`` must show the ``/sys/devices`` tree they point into. Bounded: at most
    :data:`MAX_DEVICES` x :data:`MAX_PORTS` x :data:`MAX_FILES_PER_PORT` files, each read by :func:`read_counter`;
    past ``deadline`` (``time.monotonic()``) it reads no more files and puts :data:`BUDGET` in ``problems`` (the
    devices and ports are still listed), which also gets
    what was wrong with ``root`` itself (an entry with an odd name, too many entries).
    """
    problems = {} if problems is None else problems
    try:
        devices, odd = list_names(root, MAX_DEVICES)
    except OSError:
        return {}
    if odd:
        problems[root] = "; ".join(odd)
    out: dict[str, dict[str, Any]] = {}

    def spent(where: str) -> bool:
        if deadline is not None and time.monotonic() > deadline:
            problems[BUDGET] = f"stopped at {where}: the time budget was spent"
            return True
        return False

    for dev in devices:  # every device and port is listed (bounded); past the deadline no more files are read
        if not is_efa(root, dev):
            continue
        entry: dict[str, Any] = {"ports": {}, "errors": {}}
        out[dev] = entry
        ports_dir = os.path.join(root, dev, "ports")
        try:
            ports, odd = list_names(ports_dir, MAX_PORTS)
        except OSError as e:
            entry["errors"][ports_dir] = _why(e)
            continue
        if odd:
            entry["errors"][ports_dir] = "; ".join(odd)
        for port in sorted(ports, key=lambda p: (len(p), p)):
            hw = os.path.join(ports_dir, port, "hw_counters")
            try:
                names, odd = list_names(hw, MAX_FILES_PER_PORT)
            except OSError as e:
                entry["errors"][hw] = _why(e)
                continue
            if odd:
                entry["errors"][hw] = "; ".join(odd)
            values: dict[str, int] = {}
            for name in names:
                path = os.path.join(hw, name)
                if spent(path):
                    break
                try:
                    values[name] = read_counter(path)
                except (OSError, ValueError) as e:
                    entry["errors"][path] = _why(e)
            entry["ports"][port] = values
    return out


def _readable(snapshot: dict[str, dict[str, Any]]) -> bool:
    return any(isinstance(e.get(k), int) for e in snapshot.values() for k in REQUIRED)


def _exposition(text: str) -> dict[str, list[tuple[dict[str, str], str]]]:
    """{metric: [(labels, value text)]} of a Prometheus text exposition (comments skipped)."""
    out: dict[str, list[tuple[dict[str, str], str]]] = {}
    for line in text.splitlines():
        m = _SAMPLE_RE.match(line)
        if m:
            labels = {
                k: re.sub(r"\\(.)", lambda x: "\n" if x.group(1) == "n" else x.group(1), v)
                for k, v in _LABEL_RE.findall(m.group(2) or "")
            }
            out.setdefault(m.group(1), []).append((labels, m.group(3)))
    return out


def _number(text: str) -> int:
    """An exposition value as an exact int (the exporter writes integers; a float form is rounded)."""
    try:
        return int(text)
    except ValueError:
        return int(float(text))


def read_exporter(
    url: str, node: str | None = None, timeout: float = EXPORTER_TIMEOUT_S
) -> tuple[dict[str, dict[str, Any]], str | None]:
    """The node agent exporter's port-1 counters, in :func:`read_counters`' shape, and why not (None when read).

    ``node``: the node this pod runs on; an exporter that answers for another node is refused (the Service must keep
    the traffic on the node: ``internalTrafficPolicy: Local``), as is one that serves devices but no counters.
    """
    import urllib.error
    import urllib.request

    where = (
        f"(the node agent's efa-exporter pod on this node: kubectl -n efa-node-agent get pods -o wide"
        f"{' --field-selector spec.nodeName=' + node if node else ''})"
    )
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            body = r.read(EXPORTER_MAX_BYTES + 1)
        if len(body) > EXPORTER_MAX_BYTES:
            return {}, f"it answered more than {EXPORTER_MAX_BYTES} bytes: not the node agent's exporter {where}"
        text = body.decode("utf-8", errors="replace")
    except (urllib.error.URLError, OSError, ValueError) as e:
        why = getattr(e, "reason", None) or getattr(e, "strerror", None) or e
        return {}, f"no answer ({why}) {where}"
    samples = _exposition(text)
    nodes = sorted({labels.get("node", "") for series in samples.values() for labels, _ in series} - {""})
    if node and nodes and nodes != [node]:
        return {}, (
            f"it answered for node {', '.join(nodes)}, this pod runs on {node}: the Service must keep "
            "traffic on the node (internalTrafficPolicy: Local)"
        )
    out: dict[str, dict[str, Any]] = {}
    for name in COUNTERS:
        for labels, value in samples.get(f"efa_{name}_total", []):
            if labels.get("port") == "1" and labels.get("device"):
                try:
                    out.setdefault(labels["device"], {"errors": {}})[name] = _number(value)
                except ValueError:
                    out.setdefault(labels["device"], {"errors": {}})["errors"][name] = f"{url}: value {value!r}"
    for dev, entry in out.items():
        for name in REQUIRED:
            if name not in entry and name not in entry["errors"]:  # a value that was served but bad says so
                entry["errors"][name] = f"{url}: efa_{name}_total not served for {dev}"
    devices = sum(_number(v) for _, v in samples.get("efa_devices", []))
    if not out and devices:
        errors = sum(_number(v) for _, v in samples.get("efa_exporter_scrape_errors", []))
        return {}, (
            f"{devices} EFA device(s), no readable port counter ({errors} read error(s) on the node; "
            f"the exporter needs the host's /sys/class/infiniband and /sys/devices) {where}"
        )
    if not out:
        return {}, f"no EFA device on node {', '.join(nodes) or '?'}"
    return out, None


def read_view(views: tuple[tuple[str, str], ...] | None = None) -> dict[str, Any]:
    """The counters from the first view that has readable port counters: the node's exporter, then the pod's sysfs.

    ``views``: (name, root) pairs, a root being a sysfs ``class/infiniband`` directory or an exporter URL
    (``http://...``); default :func:`default_views`. Returns ``view`` (the name, or None), ``root``, ``snapshot``
    (:func:`read_counters` of that root, or of the first root with devices when none is readable) and ``unreadable``
    (None, or why no view had counters, naming each root tried).
    """
    tried: list[str] = []
    fallback: tuple[str | None, dict[str, dict[str, Any]]] = (None, {})
    for name, root in default_views() if views is None else views:
        if root.startswith(("http://", "https://")):
            snap, why = read_exporter(root, os.environ.get(NODE_ENV) or None)
            if why is None and _readable(snap):
                return {"view": name, "root": root, "snapshot": snap, "unreadable": None}
            tried.append(f"{name} {root}: {why or 'no readable port counter'}")
            continue
        snap = read_counters(root)
        if _readable(snap):
            return {"view": name, "root": root, "snapshot": snap, "unreadable": None}
        if not snap:
            tried.append(f"{name} view {root}: no EFA device")
            continue
        if fallback[0] is None:
            fallback = (root, snap)
        why = "; ".join(sorted({w for e in snap.values() for w in e.get("errors", {}).values()}))
        extra = (
            (
                " (a pod's network namespace gets no port counters: the node agent's EFA exporter reads them, "
                f"reached through ${EXPORTER_ENV})"
            )
            if name == "pod"
            else ""
        )
        tried.append(f"{name} view {root}: {len(snap)} device(s), no readable port counter ({why}){extra}")
    return {"view": None, "root": fallback[0], "snapshot": fallback[1], "unreadable": "; ".join(tried)}


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
    deltas_by_node: dict[str, dict[str, dict[str, Any]]],
    expected_bytes_per_node: float,
    log_verdict: str,
    unreadable: dict[str, str] | None = None,
) -> tuple[bool | None, list[str]]:
    """Did the EFA hardware move the inter-node bytes the collectives had to send, on every node?

    deltas_by_node: {node: counter_delta(...)}; expected_bytes_per_node: inter-node bytes each node had to send in
    the sweep (e.g. ring all-reduce: sum over sizes x iterations of 2(n-1)/n x size); log_verdict: the NCCL log's
    verdict, to say which witness disagrees. Returns (True: every node moved >= TOLERANCE x expected; False: some
    node moved less, "EFA loaded, traffic went elsewhere" when the log says efa; None: cannot tell, e.g. no EFA
    device or no readable counter on a node) and the reasons, with bytes per device and node. ``unreadable``:
    {node: why} from :func:`read_view`, quoted for a node without a readable counter.
    """
    unreadable = unreadable or {}
    reasons: list[str] = []
    if not deltas_by_node:
        return None, ["no node reported EFA counters"]
    if not expected_bytes_per_node or expected_bytes_per_node <= 0:
        return None, [f"expected bytes per node is {expected_bytes_per_node!r}: nothing to compare the counters with"]
    verdicts: list[bool | None] = []
    for node in sorted(deltas_by_node):
        deltas = deltas_by_node[node]
        if not deltas:
            reasons.append(f"node {node}: no EFA device ({unreadable.get(node) or f'under {SYSFS_ROOT}'})")
            verdicts.append(None)
            continue
        per_dev = node_bytes(deltas)
        errs = [f"{dev} {k}: {v}" for dev, e in deltas.items() for k, v in e.get("errors", {}).items()]
        sent = [v["sent"] for v in per_dev.values() if v["sent"] is not None]
        recv = [v["received"] for v in per_dev.values() if v["received"] is not None]
        devs = ", ".join(
            f"{dev} sent {_gb(v['sent']) if v['sent'] is not None else '?'} received "
            f"{_gb(v['received']) if v['received'] is not None else '?'}"
            for dev, v in sorted(per_dev.items())
        )
        if not sent and not recv:
            reasons.append(
                f"node {node}: no readable EFA counter ({unreadable.get(node) or '; '.join(errs) or 'none'})"
            )
            verdicts.append(None)
            continue
        moved = max(sum(sent), sum(recv))
        share = moved / expected_bytes_per_node
        head = (
            f"node {node}: EFA moved {_gb(moved)} = {share:.0%} of the {_gb(expected_bytes_per_node)} the "
            f"collectives had to send across nodes ({devs})"
        )
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
    move while the log says efa turn it into ``fallback`` (cause ``counters_flat``). Unreadable counters are said
    in the first reason and in ``witness`` (``counters: "unreadable"``); they keep the log's efa verdict, or make
    it ``undetermined`` when ``require`` is set (the stack's ``efaCheckRequireCounters``). The returned report's
    ``witness`` is {"counters": "moved" | "flat" | "unreadable", "required": require, "reasons": [...]}.
    """
    from dataclasses import replace

    from .nccl_log import with_verdict

    ok, reasons = counter_judgement
    text = "EFA counters: " + " | ".join(reasons)
    state = "moved" if ok is True else "flat" if ok is False else "unreadable"
    witness = {"counters": state, "required": require, "reasons": list(reasons)}
    if log_report.verdict == "efa" and ok is False:
        rep = with_verdict(log_report, "fallback", text, "counters_flat")
    elif ok is None:
        verdict = "undetermined" if require and log_report.verdict == "efa" else log_report.verdict
        rep = with_verdict(log_report, verdict, "", "counters_unavailable" if log_report.verdict == "efa" else None)
        first = (
            "the EFA hardware counters could not be read, so the second witness is missing"
            + (" and efaCheckRequireCounters makes the verdict undetermined" if verdict != log_report.verdict else "")
            + f": {' | '.join(reasons)}"
        )
        rep = replace(rep, reasons=[first] + [r for r in rep.reasons if r])
    else:
        rep = with_verdict(log_report, log_report.verdict, text)
    try:
        return replace(rep, witness=witness)
    except TypeError:  # an nccl_log without the witness field
        return rep
