"""Decide from NCCL_DEBUG=INFO output whether inter-node traffic really went over EFA.

NCCL silently falls back to TCP sockets when the aws-ofi-nccl plugin or the EFA
device is missing, so "training ran" proves nothing; only the log lines that
NCCL and aws-ofi-nccl print at init ("Using network ...", "Selected provider
is ...", "comm ... nNodes N", "Channel NN/M : a[x] -> b[y] via NET/<name>/<dev>")
do. The verdict is ``efa`` only with proof that traffic crossed nodes on the
OFI/Libfabric network with provider efa: NET connection lines over Libfabric,
NCCL's own node count > 1 with every communicator on Libfabric/efa, or two or
more distinct hosts each selecting Libfabric with provider efa, and nothing
contradicting. A Libfabric network without a ``Selected provider`` line is never
efa (the plugin, the early "AWS Libfabric" one too, also runs on tcp/sockets),
and an excerpt with no host name, node count or connection line is undetermined
whatever its line order. One host, P2P/SHM only, or no connection lines at all is
``undetermined`` (with that reason): a green gate on a run where nothing crossed
nodes is the silent failure this module exists to stop. Each verdict cites its
deciding line(s) as ``file:line: text`` (``Report.evidence``).

Formats read: NCCL 2.4 to 2.29 and aws-ofi-nccl up to 1.18 (``Ring NN :`` and
``Channel NN/M :`` lines, ``Initialized/Assigned NET plugin``, ``Bootstrap:
Using``), WARN lines in the ``file.cc:line`` and C++ signature forms with a
timestamp, and launcher prefixes (mpirun ``[1,0]<stdout>:``, srun ``0:``,
kubectl ``--prefix``, CloudWatch timestamps and ``|`` pipes, Ray worker
``(pid=..)`` prefixes and `` [repeated Nx across cluster]`` suffixes).

Speed matters (a 512-rank log is tens to hundreds of MB), so the parser never
loops over all lines in Python: one C-level scan finds the few candidate lines
(WARN lines and INFO lines that are not ``Channel NN``/``Ring NN`` connection lines;
a connection line is never an init line), the init literals are checked on those
only, and connection lines are counted by transport with one ``re.findall``.

CLI: python -m ray_efa_eks.efacheck.nccl_log [--json] [--expect-nodes N] [--expect-nics K] [--expect-gdrdma]
FILE_OR_DIR...  (one file per rank, a directory of them (its *.md, *.json... skipped), one combined log, or - for
stdin; a pipe or device given by name is refused, not read forever)
exit 0 = efa, 1 = fallback / failed / expected topology not met, 2 = undetermined,
3 = unreadable input, 64 = usage error (bad arguments), 130 = interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import bisect
import errno
import json
import os
import re
import stat
import sys
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Iterable

from .cli import EXIT_USAGE, ArgumentParser, run_cli

EXIT = {"efa": 0, "fallback": 1, "undetermined": 2, "unreadable": 3, "usage": EXIT_USAGE}
EXIT_INTERRUPTED = 130
"""Ctrl-C (128 + SIGINT)."""

# cause -> remediation hint; docs/efa-gate.md mirrors this table.
HINTS: dict[str, str] = {
    "plugin_not_found": (
        "aws-ofi-nccl was not loaded: make sure libnccl-net-ofi.so (or libnccl-net.so) is in the image, "
        "set NCCL_NET_PLUGIN=ofi (or its full path) and put its directory (e.g. /opt/amazon/ofi-nccl/lib64 in the DLC) on LD_LIBRARY_PATH"
    ),
    "ofi_init_failed": (
        "aws-ofi-nccl loaded but failed to initialize and NCCL carried on without it: the pod has no usable EFA "
        "(request vpc.amazonaws.com/efa, check /dev/infiniband/uverbs* and `fi_info -p efa` in the pod)"
    ),
    "no_efa_provider": (
        "libfabric found no efa provider: request vpc.amazonaws.com/efa in the pod resources, run the "
        "aws-efa-k8s-device-plugin DaemonSet, check /dev/infiniband/uverbs* exists in the pod and `fi_info -p efa` lists it"
    ),
    "non_efa_provider": (
        "aws-ofi-nccl picked a non-EFA libfabric provider (e.g. tcp): set FI_PROVIDER=efa and give the pod an EFA "
        "device (vpc.amazonaws.com/efa)"
    ),
    "socket_network": (
        "inter-node traffic used NCCL's TCP Socket transport: unset NCCL_NET=Socket if set, and fix the plugin/EFA "
        "causes above so NCCL selects the Libfabric network"
    ),
    "non_efa_network": (
        "inter-node traffic used a non-EFA NCCL network (e.g. IB verbs): on AWS use aws-ofi-nccl with NCCL_NET_PLUGIN=ofi"
    ),
    "net_forced": (
        "NCCL_NET forces a network other than Libfabric: unset NCCL_NET or set NCCL_NET=Libfabric (older plugins: 'AWS Libfabric')"
    ),
    "net_forced_absent": (
        "NCCL_NET names a network that is not available: unset NCCL_NET or set it to the plugin's name ('Libfabric' / 'AWS Libfabric')"
    ),
    "net_init_failed": (
        "NCCL could not initialize any network plugin and the run failed: install aws-ofi-nccl and give the pod an EFA "
        "device, or fix NCCL_NET/NCCL_NET_PLUGIN so at least Socket is allowed while debugging"
    ),
    "socket_ifname": (
        "NCCL bootstrap/socket is on the loopback interface: set NCCL_SOCKET_IFNAME to the pod's primary interface "
        "(e.g. eth0, or ^lo,docker)"
    ),
    "ofi_error": (
        "aws-ofi-nccl reported an error: check the EFA security group has a self-referencing rule allowing all "
        "traffic in and out, and that FI_EFA_USE_DEVICE_RDMA matches the instance type"
    ),
    "single_node": "only one node took part, so nothing crossed nodes: run across >= 2 nodes (one rank per GPU on each) to exercise EFA",
    "no_connections": (
        "no connection lines and no node count: NCCL connects lazily, so run at least one collective across nodes, "
        "with NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS unset (or INIT,NET), and include every rank's output"
    ),
    "no_net_info": "not enough NET lines: run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET and include every rank's output",
    "no_provider_line": (
        "no 'Selected provider' line: current aws-ofi-nccl also runs on tcp and other providers, so Libfabric alone is "
        "no proof of EFA; keep NCCL_DEBUG_SUBSYS=INIT,NET (or unset) so NET/OFI lines are logged"
    ),
    "rank_silent": (
        "a rank's log is missing or empty: check NCCL_DEBUG=INFO and NCCL_DEBUG_FILE reach every rank and that every "
        "rank's file is collected (a rank that crashed before NCCL init writes nothing)"
    ),
    "fewer_nodes": (
        "fewer nodes took part than the stack has: check every GPU node is Ready and runs a Ray worker "
        "(kubectl get nodes, ray status) and that the check places one bundle per node"
    ),
    "fewer_nics": (
        "fewer EFA interfaces in use than the instance type has: the pod must request all of them "
        "(vpc.amazonaws.com/efa: <count>) and the launch template must attach one EFA per network card"
    ),
    "no_gdrdma": (
        "NET connections without /GDRDMA where the instance supports GPUDirect RDMA: set FI_EFA_USE_DEVICE_RDMA=1, "
        "make sure the GPU driver exposes dma-buf or nvidia-peermem, and keep aws-ofi-nccl current"
    ),
    "counters_flat": (
        "EFA loaded, traffic went elsewhere: the EFA hardware counters did not move by the bytes the collectives had "
        "to send; check NCCL_NET/NCCL_NET_PLUGIN, that every rank uses the plugin, and that no proxy/TCP path is forced"
    ),
    "counters_unavailable": (
        "the EFA hardware counters could not be read (ports/1/hw_counters of the host's /sys, served by the node "
        "agent's EFA exporter on each GPU node; a pod's own /sys has none): the second witness is missing; check the "
        "exporter runs on every GPU node (kubectl -n efa-node-agent get pods -o wide), the worker pods have "
        "RAY_EFA_EKS_EFA_EXPORTER, and the nodes run an EFA driver"
    ),
}

_PREFIX_RE = re.compile(rb"([A-Za-z0-9_.\-]+):(\d+):\d+ \[\d+\] ")
# NET connection lines only (every other transport is counted with bytes.count): literal-led, so `re` uses its
# fast substring search over the whole buffer.
_NET_CHAN_RE = re.compile(rb" via NET/([^\r\n]*)")
_INTRA = (b" via P2P/", b" via SHM/")
_INTRA_LEN = max(map(len, _INTRA))
# Init/WARN lines we read one by one; pure literals found with bytes.find (far faster than one alternation).
_FACT_STARTS = (
    b"INFO Using network",
    b"INFO NET/",
    b"INFO Bootstrap",
    b"NCCL WARN ",
    b"NET plugin",
    b"INFO NCCL_NET set by",
    b" nNodes ",
)
_FACT_RE = re.compile(rb"(.*?)NCCL (INFO|WARN) (.*?)\s*$")
# Lines that can hold a _FACT_STARTS literal and match _FACT_RE: a WARN line, or an INFO line whose body is not a
# "Channel NN"/"Ring NN" connection line (the literal "NCCL " leads, so `re` uses its fast substring search).
_CANDIDATE_RE = re.compile(rb"NCCL (?:WARN |INFO (?!Channel \d|Ring \d))")
_RAY_REPEAT_RE = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
_NETDEV_RE = re.compile(r"^(.+?)/(\d+)(?:\(\d+\))?(/GDRDMA)?")
_PROVIDER_RE = re.compile(r"Selected [Pp]rovider is ([A-Za-z0-9_;\-]+)(?:,\s*fabric is ([^\s(,]+))?(?:.*?found (\d+) nics)?")
_IFACE_RE = re.compile(r"Using (?:\[\d+\])?([A-Za-z0-9_.\-]+):([0-9a-fA-F.:%]+)")
_NNODES_RE = re.compile(r"nRanks (\d+) nNodes (\d+)")
_NET_ASSIGNED_RE = re.compile(r"^(?:Using network|Assigned NET plugin) (.+?)(?: to comm.*)?$")
_LOG_LINE = re.compile(rb"NCCL (?:INFO|WARN|version)")
_CONTROL = bytes(c for c in range(32) if c < 9 or c > 13)  # control bytes that text logs do not contain


def _is_ofi(net: str) -> bool:
    return "libfabric" in net.lower() or net.lower() == "ofi"


@dataclass
class Rank:
    """What one process (host:pid) told us."""

    host: str | None
    networks: set[str] = field(default_factory=set)
    provider: str | None = None
    nics: int | None = None
    plugin: str | None = None  # "loaded" | "failed" (did not load) | "init_failed" (loaded, failed to initialize)
    loopback: bool = False

    @property
    def network(self) -> str | None:
        return ", ".join(sorted(self.networks)) or None


@dataclass
class Report:
    """The verdict, the reasons and hints, and the line(s) that decided it (``evidence``: "file:line: text")."""

    verdict: str
    network: str | None
    provider: str | None
    ranks: int
    hosts: list[str]
    reasons: list[str]
    causes: list[str]
    evidence: list[str] = field(default_factory=list)
    nodes: int | None = None
    """NCCL's own node count (largest ``nNodes`` seen), else the number of hosts seen; None if unknown."""
    nics: dict[str, int] = field(default_factory=dict)
    """EFA interfaces per host (aws-ofi-nccl's "found N nics"), where the log says."""
    silent: list[str] = field(default_factory=list)
    """Inputs that gave no NCCL line (missing, empty, binary, no NCCL output), with why."""
    witness: dict | None = None
    """The second witness's state when ``efa_counters.combine`` added it (``counters``: moved | flat | unreadable,
    ``required``, ``reasons``); None for the log alone."""

    @property
    def hints(self) -> list[str]:
        return [HINTS[c] for c in self.causes]

    @property
    def exit_code(self) -> int:
        return EXIT[self.verdict]

    def to_dict(self) -> dict:
        return {
            "verdict": self.verdict,
            "network": self.network,
            "provider": self.provider,
            "ranks": self.ranks,
            "hosts": self.hosts,
            "nodes": self.nodes,
            "nics": self.nics,
            "reasons": self.reasons,
            "evidence": self.evidence,
            "causes": self.causes,
            "hints": self.hints,
            "silent": self.silent,
            "witness": self.witness,
        }


class UnreadableInput(Exception):
    """Input is missing, binary, empty or holds no complete NCCL line."""


class _Collector:
    def __init__(self) -> None:
        self.ranks: dict[str, Rank] = {}
        self.ev: dict[str, str] = {}  # first "file:line: text" per evidence kind
        self.causes: list[str] = []
        self._bufs: dict[str, bytes] = {}
        self._marks: dict[str, list[tuple[int, int]]] = {}  # source -> sorted (offset, line number there)
        self.net_chan: Counter = Counter()  # NET transport text ("Libfabric/0/GDRDMA") -> connection lines
        self._intra_bufs: list[bytes] = []  # inputs with P2P/SHM connection lines
        self.nnodes: set[int] = set()  # the nNodes values the comm lines gave
        self.net_forced: str | None = None
        self.net_init_failed = False

    def _rank(self, prefix: bytes, source: str, anon_seq: int) -> Rank:
        m = _PREFIX_RE.search(prefix)
        if m:
            host = m.group(1).decode()  # _PREFIX_RE matches ASCII only
            key = f"{host}:{m.group(2).decode()}"
        else:
            host, key = None, f"{source}#{anon_seq}"
        r = self.ranks.get(key)
        if r is None:
            r = self.ranks[key] = Rank(host=host)
        return r

    def _line_at(self, source: str, pos: int) -> str:
        buf = self._bufs[source]
        start = buf.rfind(b"\n", 0, pos) + 1
        end = buf.find(b"\n", pos)
        text = buf[start : end if end >= 0 else len(buf)].decode(errors="replace").strip()
        # Line numbers counted from the nearest line already numbered, not from the top: evidence is noted per
        # host (two per node), and counting from 0 each time made a 64-node log quadratic (12 s for 61 MB).
        marks = self._marks.setdefault(source, [(0, 1)])
        i = bisect.bisect_right(marks, (start, 1 << 62)) - 1
        line = marks[i][1] + buf.count(b"\n", marks[i][0], start)
        bisect.insort(marks, (start, line))
        return f"{source}:{line}: {text}"

    def _note(self, kind: str, source: str, pos: int) -> None:
        if kind not in self.ev:
            self.ev[kind] = self._line_at(source, pos)

    def _cause(self, c: str) -> None:
        if c not in self.causes:
            self.causes.append(c)

    def feed(self, buf: bytes, source: str) -> None:
        self._bufs[source] = buf
        starts: set[int] = set()
        # One C-level scan for the few candidate lines (every WARN line, every INFO line that is not a connection
        # line: ~1 in 60 of a 512-rank log), then the literals checked on those lines only: seven bytes.find passes
        # over the whole buffer cost twice as much. A connection line is never an init line.
        for m in _CANDIDATE_RE.finditer(buf):
            start = buf.rfind(b"\n", 0, m.start()) + 1
            end = buf.find(b"\n", m.end())
            line = buf[start : end if end >= 0 else len(buf)]
            if any(lit in line for lit in _FACT_STARTS):
                starts.add(start)
        anon = 0  # unprefixed lines: every "Using network" starts a new anonymous rank
        for start in sorted(starts):
            end = buf.find(b"\n", start)
            fm = _FACT_RE.match(buf, start, end if end >= 0 else len(buf))
            if fm:  # pragma: no branch - a candidate line holds "NCCL INFO |WARN ", which _FACT_RE always matches
                pre, kind, body_b = fm.groups()
                body = _RAY_REPEAT_RE.sub("", body_b.decode(errors="replace"))
                if body.startswith("Using network") and not _PREFIX_RE.search(pre):
                    anon += 1
                self._fact(self._rank(pre, source, anon), kind == b"WARN", body, source, start)
        # Connection lines: aggregate transports with one C-level findall; intra-node ones are only counted.
        for tr_b, n in Counter(_NET_CHAN_RE.findall(buf)).items():
            tr = _RAY_REPEAT_RE.sub("", tr_b.decode(errors="replace")).strip()
            self.net_chan[tr] += n
            m = _NETDEV_RE.match(tr)
            self._note(f"chan:{m.group(1) if m else tr}", source, buf.find(b" via NET/" + tr_b))
        first: list[int] = []  # where the first intra-node line is: the second literal is looked for only before
        end = len(buf)  # the first's hit (a log with P2P lines and no SHM line is not scanned twice to the end)
        for lit in _INTRA:
            i = buf.find(lit, 0, end)
            if i >= 0:
                first.append(i)
                end = i + _INTRA_LEN
        if first:
            self._intra_bufs.append(buf)  # counted only if a reason needs the number (single-host logs)
            self._note("intra", source, min(first))
        # Ranks that printed only connection lines (no init lines): attribute per line, slow but rare. An unprefixed
        # line goes to the file's last anonymous rank (#0 when it has none): it names no new process.
        if (self.net_chan or first) and not any(r.host for r in self.ranks.values()):
            for ln in buf.split(b"\n"):
                if b" via " in ln:
                    pre, _s, rest = ln.partition(b"NCCL INFO ")
                    if rest.startswith((b"Channel", b"Ring")):
                        self._rank(pre, source, anon)

    def _fact(self, r: Rank, warn: bool, body: str, source: str, pos: int) -> None:
        low = body.lower()
        m = _NET_ASSIGNED_RE.match(body)
        if m:
            net = m.group(1).strip()
            r.networks.add(net)
            if _is_ofi(net):
                r.plugin = "loaded"  # only a working plugin provides that network (an earlier failed try is over)
            self._note(f"network:{net}", source, pos)
            if r.host:
                self._note(f"network:{net}@{r.host}", source, pos)
            return
        if body.startswith("Initialized NET plugin"):
            name = body[len("Initialized NET plugin"):].strip()
            if _is_ofi(name):
                r.plugin = "loaded"
            return
        if "failed to initialize any net plugin" in low:
            self.net_init_failed = True
            self._cause("net_init_failed")
            self._note("net_init_failed", source, pos)
            return
        if body.startswith("NCCL_NET set by"):
            self.net_forced = body.rsplit(" ", 1)[-1].rstrip(".")
            self._note("net_forced", source, pos)
            return
        m = _NNODES_RE.search(body)
        if m and not warn:
            n = int(m.group(2))
            self.nnodes.add(n)
            self._note(f"nnodes:{n}", source, pos)
            return
        if "Selected" in body and "rovider is" in body:
            m = _PROVIDER_RE.search(body)
            if m:
                r.provider = m.group(1)
                r.nics = int(m.group(3)) if m.group(3) else r.nics
                self._note(f"provider:{r.provider}", source, pos)
                if r.host:
                    self._note(f"provider:{r.provider}@{r.host}", source, pos)
            return
        if "no eligible providers" in low:
            r.plugin = "init_failed"
            self._cause("no_efa_provider")
            self._note("ofi_failed", source, pos)
            return
        if body.startswith("NET/Plugin") and "collnet" not in low:  # CollNet symbols are optional
            if "loaded" in low:  # NCCL 2.4-2.30 says it only in "Loaded net|coll|gin plugin NAME (vN)"
                if r.plugin != "init_failed":
                    r.plugin = "loaded"  # also after "Could not find: <another candidate name>"
            elif r.plugin in ("loaded", "init_failed"):
                pass
            elif any(s in low for s in ("no plugin", "could not find", "returned", "failed", "cannot open", "internal")):
                r.plugin = "failed"
                self._note("plugin_failed", source, pos)
            return
        if body.startswith(("Bootstrap", "NET/Socket")):
            m = _IFACE_RE.search(body)
            if m and (m.group(1) == "lo" or m.group(2).startswith("127.")):
                r.loopback = True
                self._note("loopback", source, pos)
            return
        if warn:  # no INFO line with a _FACT_STARTS literal says "not found" (NCCL 2.4-2.30, aws-ofi-nccl)
            if "network" in low and "not found" in low:
                self._cause("net_forced_absent")
                self._note("net_absent", source, pos)
            elif "NET/OFI" in body:
                if "initializ" in low and "fail" in low:
                    r.plugin = "init_failed"
                    self._note("ofi_failed", source, pos)
                elif "provider" in low:
                    self._cause("no_efa_provider")
                else:
                    self._cause("ofi_error")
                self._note("ofi_warn", source, pos)

    def report(
        self, expect_nodes: int | None, expect_nics: int | None, expect_gdrdma: bool, silent: list[str],
    ) -> Report:
        ranks = list(self.ranks.values())
        hosts = sorted({r.host for r in ranks if r.host})
        silent = list(silent)
        reasons: list[str] = []
        evidence: list[str] = []
        ev = self.ev

        def cite(*kinds: str) -> str:
            """Add the first line of each kind to evidence; return them joined for a reason."""
            lines = list(dict.fromkeys(ev[k] for k in kinds if k in ev))  # two kinds can be one line: say it once
            for ln in lines:
                if ln not in evidence:
                    evidence.append(ln)
            return "; ".join(lines) or "(no line)"

        nets: Counter = Counter()
        for r in ranks:
            nets.update(r.networks)
        providers = {r.provider for r in ranks if r.provider}
        chan_nets: Counter = Counter()
        ofi_devs: set[int] = set()
        ofi_lines = ofi_gdr = 0
        for tr, n in self.net_chan.items():
            m = _NETDEV_RE.match(tr)
            name = m.group(1) if m else tr.split("/")[0]
            chan_nets[name] += n
            if _is_ofi(name):
                ofi_lines += n
                if m:
                    ofi_devs.add(int(m.group(2)))
                    ofi_gdr += n if m.group(3) else 0
        network = ", ".join(sorted(nets)) or (", ".join(sorted(chan_nets)) or None)
        provider = ", ".join(sorted(providers)) or None
        max_nodes = max(self.nnodes) if self.nnodes else None
        nodes = max_nodes if max_nodes is not None else (len(hosts) or None)
        nics_by_host: dict[str, int] = {}
        for r in ranks:
            if r.host and r.nics is not None:
                nics_by_host[r.host] = max(nics_by_host.get(r.host, 0), r.nics)
        loopback = any(r.loopback for r in ranks) and all(r.loopback for r in ranks if r.host is not None or r.loopback)
        plugin_failed = any(r.plugin in ("failed", "init_failed") for r in ranks)
        ofi_init_failed = any(r.plugin == "init_failed" for r in ranks)
        # Positive proof that only one node took part (NCCL's own count, loopback, or one host with only P2P/SHM).
        intra = bool(self._intra_bufs)
        single = (max_nodes == 1) or loopback or (len(hosts) <= 1 and intra and not chan_nets and max_nodes is None)
        multi = (max_nodes or 0) > 1 or len(hosts) > 1 or bool(chan_nets)

        def done(verdict: str) -> Report:
            return Report(verdict, network, provider, len(ranks), hosts, reasons, list(self.causes), evidence,
                          nodes, nics_by_host, silent)

        def plugin_reason() -> str:
            if ofi_init_failed:
                self._cause("ofi_init_failed")
                return f"aws-ofi-nccl loaded but failed to initialize: {cite('ofi_failed', 'ofi_warn')}"
            self._cause("plugin_not_found")
            return f"net plugin failed to load: {cite('plugin_failed')}"

        # 1. The run failed outright: no network at all.
        if self.net_init_failed:
            reasons.append(f"NCCL could not initialize any network plugin, the run failed: {cite('net_init_failed')}")
            if plugin_failed:
                reasons.append(plugin_reason())
            return done("fallback")
        # 2. Connections or communicators on a network other than OFI, with several nodes -> fallback.
        bad = False
        for n in sorted(x for x in chan_nets if not _is_ofi(x)):
            reasons.append(f"inter-node connections via NET/{n} ({chan_nets[n]} lines), first at {cite(f'chan:{n}')}")
            self._cause("socket_network" if n == "Socket" else "non_efa_network")
            bad = True
        for n in sorted(x for x in nets if not _is_ofi(x)):
            if multi and not single:
                reasons.append(f"NCCL selected network {n} with {nodes or 'several'} nodes: {cite(f'network:{n}')}")
                self._cause("socket_network" if n == "Socket" else "non_efa_network")
                bad = True
        # 3. OFI on a provider other than efa.
        for p in sorted(x for x in providers if x != "efa"):
            reasons.append(f"aws-ofi-nccl selected provider {p}, not efa: {cite(f'provider:{p}')}")
            self._cause("non_efa_provider")
            bad = True
        if self.net_forced and not _is_ofi(self.net_forced):
            self._cause("net_forced")
            if bad:
                reasons.append(f"NCCL_NET forces network {self.net_forced}: {cite('net_forced')}")
        if loopback:
            self._cause("socket_ifname")
        if bad:
            if plugin_failed:
                reasons.append(plugin_reason())
            if "ofi_warn" in ev and "ofi_failed" not in ev:
                reasons.append(f"aws-ofi-nccl warned: {cite('ofi_warn')}")
            if max_nodes and max_nodes > 1:
                reasons.append(f"NCCL counted {max_nodes} nodes: {cite(f'nnodes:{max_nodes}')}")
            return done("fallback")
        # 4. Plugin failed to load or initialize and NCCL carried on, unless only one node took part.
        if plugin_failed and not single:
            reasons.append(plugin_reason() + " and NCCL carried on with its internal networks")
            if "net_absent" in ev:
                reasons.append(cite("net_absent"))
            for n in sorted(nets):
                reasons.append(f"network {n}: {cite(f'network:{n}')}")
            return done("fallback")
        # 5. Expected topology: positive evidence of fewer nodes / NICs, or no GPUDirect RDMA -> failure.
        topo: list[str] = []
        # hosts that logged stand in for NCCL's own count only when every input spoke (a silent one may be a node)
        if expect_nodes and nodes is not None and nodes < expect_nodes and (max_nodes is not None or not silent):
            src = cite(f"nnodes:{max_nodes}") if max_nodes is not None else f"hosts {', '.join(hosts)}"
            topo.append(f"{nodes} node(s) took part, expected {expect_nodes}: {src}")
            self._cause("fewer_nodes")
        if expect_nics:
            low_hosts = {h: n for h, n in nics_by_host.items() if n < expect_nics}
            if low_hosts:
                for h, n in sorted(low_hosts.items()):
                    # nics come with a provider line, and any provider but efa was a fallback above (step 3)
                    topo.append(f"host {h}: aws-ofi-nccl found {n} EFA interface(s), expected {expect_nics}: "
                                f"{cite(f'provider:efa@{h}')}")
                self._cause("fewer_nics")
            elif not nics_by_host and ofi_devs and len(ofi_devs) < expect_nics:
                topo.append(f"NET connections use {len(ofi_devs)} EFA device(s) ({sorted(ofi_devs)}), expected "
                            f"{expect_nics}: {cite(*(f'chan:{n}' for n in sorted(chan_nets) if _is_ofi(n)))}")
                self._cause("fewer_nics")
        if expect_gdrdma and ofi_lines and ofi_gdr < ofi_lines:
            topo.append(f"{ofi_lines - ofi_gdr} of {ofi_lines} NET connection line(s) without /GDRDMA where the instance "
                        f"supports GPUDirect RDMA: {cite(*(f'chan:{n}' for n in sorted(chan_nets) if _is_ofi(n)))}")
            self._cause("no_gdrdma")
        if topo:
            reasons.extend(topo)
            if plugin_failed:
                reasons.append(plugin_reason())
            return done("fallback")
        # 6. EFA: proof that traffic crossed nodes on OFI with provider efa.
        ofi_nets = {n for n in nets if _is_ofi(n)} | {n for n in chan_nets if _is_ofi(n)}
        # NET lines from one named host with no node count prove nothing crossed nodes: NCCL also connects ranks of
        # one node over NET when P2P/SHM are off. A rank's own view of a larger job carries NCCL's nNodes.
        one_host = len(hosts) == 1 and max_nodes is None
        crossed_by_conn = bool(ofi_lines) and max_nodes != 1 and not one_host
        crossed_by_count = (max_nodes or 0) > 1 and bool(nets) and all(_is_ofi(n) for n in nets)
        # Two or more distinct hosts in one job, each with its ranks on Libfabric and provider efa: NCCL treats
        # ranks with different host hashes as different nodes and sends between them over the network it selected,
        # so the job's inter-node transport was Libfabric over EFA. Every host must say so (a host whose ranks
        # chose another network or named no provider is no proof). An excerpt with no host name, node count or
        # connection line gets no such rule: the same lines from one node read the same, in any order (NCCL prints
        # "Using network Libfabric" on single-node runs too).
        efa_hosts = {r.host for r in ranks if r.host and r.provider == "efa" and r.networks
                     and all(_is_ofi(n) for n in r.networks)}
        crossed_by_hosts = (len(hosts) >= 2 and efa_hosts == set(hosts) and max_nodes != 1
                            and all(_is_ofi(n) for n in nets))
        # The provider must be named: "AWS Libfabric" (the early plugin) also ran on the tcp and sockets providers
        # (aws-ofi-nccl v1.0 README: any provider with FI_EP_RDM; v1.1 documents OFI_NCCL_USE_IPV6_TCP).
        provider_ok = providers == {"efa"}
        # Every named host must name its provider: another host's "Selected provider is efa" says nothing of the
        # provider this host's NET lines ran on (tcp too is FI_EP_RDM).
        unproven = sorted({r.host for r in ranks if r.host} - {r.host for r in ranks if r.host and r.provider})
        provider_ok = provider_ok and not unproven
        if crossed_by_hosts and provider_ok and not (crossed_by_conn or crossed_by_count) and not plugin_failed \
                and not silent:
            for h in hosts:
                r = next(r for r in ranks if r.host == h and r.provider == "efa")
                reasons.append(f"host {h}: network {r.network} with provider efa: "
                               f"{cite(*(f'network:{n}@{h}' for n in sorted(r.networks)), f'provider:efa@{h}')}")
            reasons.append(f"{len(hosts)} distinct hosts each selected Libfabric with provider efa and nothing "
                           "contradicts it: the inter-node transport was Libfabric over EFA")
            return done("efa")
        if ofi_nets and (crossed_by_conn or crossed_by_count) and provider_ok and not plugin_failed and not silent:
            for n in sorted(nets):
                reasons.append(f"network {n} on {sum(n in r.networks for r in ranks)} rank(s): {cite(f'network:{n}')}")
            reasons.append(f"provider efa: {cite('provider:efa', *(f'provider:efa@{h}' for h in hosts))}")
            for n in sorted(x for x in chan_nets if _is_ofi(x)):
                reasons.append(f"{chan_nets[n]} inter-node connection line(s) via NET/{n}, first at {cite(f'chan:{n}')}")
            if max_nodes and max_nodes > 1:
                reasons.append(f"NCCL counted {max_nodes} nodes: {cite(f'nnodes:{max_nodes}')}")
            return done("efa")
        # 7. Undetermined, with the reason.
        if silent:
            reasons.append(f"{len(silent)} rank log(s) gave no NCCL line, so not every rank spoke: {'; '.join(silent)}")
            self._cause("rank_silent")
        if single:
            if max_nodes == 1:
                reasons.append(f"NCCL counted one node, nothing crossed nodes: {cite('nnodes:1')}")
            elif loopback:
                reasons.append(f"NCCL is bound to loopback, so only one node took part: {cite('loopback')}")
            else:
                n_intra = sum(b.count(lit) for b in self._intra_bufs for lit in _INTRA)
                reasons.append(f"one host ({hosts[0] if hosts else 'unnamed'}), only intra-node connections "
                               f"({n_intra} P2P/SHM lines), nothing crossed nodes: {cite('intra')}")
            self._cause("single_node")
        elif ofi_nets and providers == {"efa"} and unproven and (crossed_by_conn or crossed_by_count):
            reasons.append(f"no 'Selected provider' line from host(s) {', '.join(unproven)}: another host's efa "
                           f"provider says nothing of theirs: {cite('provider:efa')}")
            self._cause("no_provider_line")
        elif ofi_lines and one_host:
            reasons.append(f"NET connection lines from one host ({hosts[0]}) and no node count: NCCL also uses NET "
                           f"within a node (P2P/SHM off), so nothing shows traffic crossed nodes: "
                           f"{cite(*(f'chan:{n}' for n in sorted(chan_nets) if _is_ofi(n)))}")
            self._cause("single_node")
        elif ofi_nets and not providers and (crossed_by_conn or crossed_by_count):
            reasons.append(f"Libfabric network but no 'Selected provider' line to show efa (aws-ofi-nccl, the early "
                           f"'AWS Libfabric' plugin too, also runs on the tcp and sockets providers): "
                           f"{cite(*(k for n in sorted(ofi_nets) for k in (f'network:{n}', f'chan:{n}')))}")
            self._cause("no_provider_line")
        elif not silent and not hosts and max_nodes is None and not chan_nets:
            what = ", ".join(f"{n}" for n in sorted(nets)) or "no network"
            reasons.append(f"an unattributed excerpt: no host name, node count or connection line ({what} selected "
                           f"by {len(ranks)} rank(s)), and the same lines from one node read the same in any order, "
                           "so nothing shows traffic crossed nodes"
                           + (f": {cite(*(f'network:{n}' for n in sorted(nets)))}" if nets else ""))
            self._cause("no_connections" if nets else "no_net_info")
        elif not silent:
            what = ", ".join(f"{n}" for n in sorted(nets)) or "no network"
            reasons.append(f"no inter-node connection line and no node count > 1 ({what} selected, "
                           f"{len(hosts) or 'no'} host name(s) seen): nothing shows traffic crossed nodes"
                           + (f": {cite(*(f'network:{n}' for n in sorted(nets)))}" if nets else ""))
            self._cause("no_connections" if nets else "no_net_info")
        if "provider:efa" in ev and ofi_nets and not silent:
            cite("provider:efa")
        if plugin_failed:
            reasons.append(plugin_reason())
        return done("undetermined")


def _is_binary(head: bytes) -> bool:
    """A NUL, or more than 1 in 20 control characters: no log."""
    return b"\x00" in head or len(head) - len(head.translate(None, _CONTROL)) > len(head) // 20


def _check_text(buf: bytes, source: str) -> str | None:
    """Why ``buf`` is no NCCL text (empty / binary / no NCCL line), or None if it is."""
    if re.search(rb"\S", buf) is None:
        return f"{source}: empty input"
    if _is_binary(buf[:65536]):
        return f"{source}: binary data, not a text NCCL log"
    if not _LOG_LINE.search(buf):
        return f"{source}: no complete NCCL log line (truncated, or not NCCL_DEBUG=INFO output)"
    return None


NOT_LOGS = (".md", ".json", ".png", ".yaml", ".yml", ".html", ".py")
"""Files a directory of logs holds beside them (its README, a saved verdict, a report): never read as a rank's log."""


MAX_FILES = 10_000
"""Files a directory walk may hold: a job's logs are one per rank (a 512-rank job: 512); more means a wrong path."""
MAX_LOG_BYTES = 1 << 30
"""Largest single input read (1 GiB; a 512-rank NCCL_DEBUG=INFO log is ~60 MB)."""
HEAD_BYTES = 1 << 16
"""What :func:`_read_input` reads before deciding an input is binary (``_check_text`` judges the same 64 KiB)."""
CHUNK_BYTES = 1 << 20
"""The rest is read in chunks of this size, so a limit is enforced as it is crossed (stdin has no size)."""


def _iter_files(paths: Iterable[str]) -> list[str]:
    out: list[str] = []
    for p in paths:
        if p != "-" and os.path.isdir(p):
            for root, dirs, files in os.walk(p):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                out.extend(os.path.join(root, f) for f in sorted(files)
                           if not f.startswith(".") and not f.lower().endswith(NOT_LOGS))
                if len(out) > MAX_FILES:
                    raise UnreadableInput(f"{p}: more than {MAX_FILES} files under it; name the directory that holds "
                                          "the job's logs (one file per rank)")
        else:
            out.append(p)  # a missing file is reported by analyze_paths, not fatal among many
    return out


def _read_input(path: str) -> bytes:
    """A log's bytes: ``-`` is stdin; only regular files (a FIFO or a device would block or never end).

    Read in bounded chunks: the first 64 KiB decide "binary" before anything more is read (a multi-GB core dump or
    image is refused after its first chunk, its head returned for ``_check_text`` to name), and reading stops with
    EFBIG as soon as :data:`MAX_LOG_BYTES` is crossed, for stdin too.
    """
    if path == "-":
        return _read_bounded(sys.stdin.buffer)
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise OSError(errno.EINVAL, "not a regular file (a pipe, socket or device); pass a log file, or - for stdin")
    if st.st_size > MAX_LOG_BYTES:
        raise OSError(errno.EFBIG, f"{st.st_size} bytes, more than {MAX_LOG_BYTES >> 30} GiB: not one rank's log")
    with open(path, "rb") as fh:
        return _read_bounded(fh, st.st_size)


def _read_bounded(fh: Any, size_hint: int = 0) -> bytes:
    """``size_hint``: a regular file's size; past its head such a file is read again from the start in one call,
    so a 60 MB log is one buffer, not 60 chunks joined (a fifth of its reading time); one still growing is read on
    in chunks, the limit checked as it is crossed."""
    head = fh.read(HEAD_BYTES)
    if _is_binary(head):
        return head  # judged binary on its head (_check_text says so); the rest is never read
    if size_hint > len(head):
        fh.seek(0)
        parts, size, want = [], 0, size_hint + CHUNK_BYTES
    else:
        parts, size, want = [head], len(head), CHUNK_BYTES
    while True:
        chunk = fh.read(want)
        want = CHUNK_BYTES
        if not chunk:
            return parts[0] if len(parts) == 1 else b"".join(parts)
        size += len(chunk)
        if size > MAX_LOG_BYTES:
            raise OSError(errno.EFBIG, f"more than {MAX_LOG_BYTES >> 30} GiB: not one rank's log")
        parts.append(chunk)


def analyze_bytes(
    items: Iterable[tuple[str, bytes | None]], expect_nodes: int | None = None, expect_nics: int | None = None,
    expect_gdrdma: bool = False, _why_missing: dict[str, str] | None = None,
) -> Report:
    """Judge several (source, content) pairs as one job; content None = the rank's log is missing.

    expect_nodes: nodes that must take part (the stack's GPU node count).
    expect_nics: EFA interfaces each node must use (the catalogue's count for the instance type).
    expect_gdrdma: every NET connection must be /GDRDMA (the catalogue says GPUDirect RDMA).
    An input that gives no NCCL line is reported in ``Report.silent`` and makes an otherwise-EFA verdict
    undetermined; only when no input has an NCCL line is the whole set unreadable.
    """
    col = _Collector()
    silent: list[str] = []
    for source, buf in items:
        why = (_why_missing or {}).get(source, f"{source}: missing") if buf is None else _check_text(buf, source)
        if why:
            silent.append(why)
        else:
            col.feed(buf, source)
    if not col._bufs:
        raise UnreadableInput("; ".join(silent) or "no input")
    return col.report(expect_nodes, expect_nics, expect_gdrdma, silent)


def analyze_text(text: str, source: str = "<text>", **expect) -> Report:
    """Judge one log given as text; ``expect`` as for :func:`analyze_bytes`."""
    return analyze_bytes([(source, text.encode())], **expect)


def analyze_paths(paths: Iterable[str], **expect) -> Report:
    """Judge files and directories of files (every file one rank's or one host's log) as one job."""
    files = _iter_files(paths)
    if not files:
        raise UnreadableInput(f"no log files in {', '.join(paths)} (a directory's {', '.join(NOT_LOGS)} files "
                              "are not logs)")
    items: list[tuple[str, bytes | None]] = []
    errors: dict[str, str] = {}
    for f in files:
        try:
            items.append((f, _read_input(f)))
        except OSError as e:
            errors[f] = f"{f}: {'no such file or directory' if isinstance(e, FileNotFoundError) else e.strerror}"
            items.append((f, None))
    if len(errors) == len(items):
        raise UnreadableInput("; ".join(errors.values()))
    return analyze_bytes(items, **expect, _why_missing=errors)


def format_report(rep: Report) -> str:
    lines = [f"verdict: {rep.verdict}  network: {rep.network}  provider: {rep.provider}  ranks: {rep.ranks}  "
             f"hosts: {len(rep.hosts)}  nodes: {rep.nodes if rep.nodes is not None else '?'}"]
    lines += [f"  reason: {r}" for r in rep.reasons]
    lines += [f"  evidence: {e}" for e in rep.evidence]
    lines += [f"  not read: {s}" for s in rep.silent]
    lines += [f"  hint [{c}]: {HINTS[c]}" for c in rep.causes]
    return "\n".join(lines)


def _positive(s: str) -> int:
    n = int(s)
    if n < 1:
        raise ValueError(s)
    return n


_positive.__name__ = "positive integer"


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    ap = ArgumentParser(
        prog=prog or "python -m ray_efa_eks.efacheck.nccl_log",
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="A FILE of - reads stdin.", exit_codes="nccl-verdict",
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--expect-nodes", type=_positive, metavar="N", help="nodes that must take part (fewer: exit 1)")
    ap.add_argument("--expect-nics", type=_positive, metavar="K",
                    help="EFA interfaces each node must use, e.g. 32 on p5.48xlarge (fewer: exit 1)")
    ap.add_argument("--expect-gdrdma", action="store_true",
                    help="every NET connection must be /GDRDMA (instance types with GPUDirect RDMA)")
    ap.add_argument("paths", nargs="+", metavar="FILE_OR_DIR")
    a = ap.parse_args(argv)
    try:
        return _main(a)
    except KeyboardInterrupt:
        print("nccl_log: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _main(a: argparse.Namespace) -> int:
    try:
        rep = analyze_paths(a.paths, expect_nodes=a.expect_nodes, expect_nics=a.expect_nics,
                            expect_gdrdma=a.expect_gdrdma)
    except UnreadableInput as e:
        print(f"nccl_log: unreadable input: {e}", file=sys.stderr)
        return EXIT["unreadable"]
    try:
        print(json.dumps(rep.to_dict(), indent=2) if a.json else format_report(rep))
    except BrokenPipeError:  # e.g. piped into head
        pass
    return rep.exit_code


def with_verdict(rep: Report, verdict: str, reason: str, cause: str | None = None) -> Report:
    """A copy of ``rep`` with another verdict and one more reason (and cause); for combining witnesses."""
    causes = list(rep.causes) + ([cause] if cause and cause not in rep.causes else [])
    return replace(rep, verdict=verdict, reasons=list(rep.reasons) + [reason], causes=causes)


if __name__ == "__main__":
    sys.exit(run_cli(main, None, "python -m ray_efa_eks.efacheck.nccl_log"))
