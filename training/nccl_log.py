"""Decide from NCCL_DEBUG=INFO output whether inter-node traffic really went over EFA.

NCCL silently falls back to TCP sockets when the aws-ofi-nccl plugin or the EFA
device is missing, so "training ran" proves nothing; only the log lines that
NCCL and aws-ofi-nccl print at init ("Using network ...", "Selected provider
is ...", "Channel NN/M : a[x] -> b[y] via NET/<name>/<dev>") do.

Speed matters (a 512-rank log is hundreds of MB), so the parser never loops over
all lines in Python: it runs a few `re.findall` passes over the whole binary
buffer and counts the (prefix, transport) tuples with a Counter, then looks at
the few distinct keys.

CLI: python -m ray_efa_eks.training.nccl_log [--json] FILE_OR_DIR...
exit 0 = efa, 1 = fallback, 2 = undetermined, 3 = unreadable input.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections import Counter
from dataclasses import dataclass
from typing import Iterable

EXIT = {"efa": 0, "fallback": 1, "undetermined": 2, "unreadable": 3}

# cause -> remediation hint; README mirrors this table.
HINTS: dict[str, str] = {
    "plugin_not_found": (
        "aws-ofi-nccl was not loaded: make sure libnccl-net-ofi.so (or libnccl-net.so) is in the image, "
        "set NCCL_NET_PLUGIN=ofi (or its full path) and put its directory (e.g. /opt/amazon/ofi-nccl/lib) on LD_LIBRARY_PATH"
    ),
    "no_efa_provider": (
        "libfabric found no efa provider: request vpc.amazonaws.com/efa in the pod resources, run the "
        "aws-efa-k8s-device-plugin DaemonSet, check /dev/infiniband/uverbs* exists in the pod and `fi_info -p efa` lists it"
    ),
    "non_efa_provider": (
        "aws-ofi-nccl picked a non-EFA libfabric provider: set FI_PROVIDER=efa and give the pod an EFA device "
        "(vpc.amazonaws.com/efa)"
    ),
    "socket_network": (
        "inter-node traffic used NCCL's TCP Socket transport: unset NCCL_NET=Socket if set, and fix the plugin/EFA "
        "causes above so NCCL selects the Libfabric network"
    ),
    "non_efa_network": (
        "inter-node traffic used a non-EFA NCCL network (e.g. IB verbs): on AWS use aws-ofi-nccl with NCCL_NET_PLUGIN=ofi"
    ),
    "net_forced_absent": (
        "NCCL_NET names a network that is not available: unset NCCL_NET or set it to the plugin's name ('Libfabric' / 'AWS Libfabric')"
    ),
    "socket_ifname": (
        "NCCL bootstrap/socket is on the loopback interface: set NCCL_SOCKET_IFNAME to the pod's primary interface "
        "(e.g. eth0, or ^lo,docker)"
    ),
    "ofi_error": (
        "aws-ofi-nccl reported an error: check the EFA security group has a self-referencing rule allowing all "
        "traffic in and out, and that FI_EFA_USE_DEVICE_RDMA matches the instance type"
    ),
    "single_node": "only one node took part: run across >= 2 nodes to exercise EFA",
    "no_net_info": "not enough NET lines: run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET and include every rank's output",
}

_PREFIX_RE = re.compile(rb"([A-Za-z0-9_.\-]+):(\d+):\d+ \[\d+\] $")
# Everything else we care about, in one pass.
# Literal-led so `re` can use its fast substring search over the whole buffer.
_CHAN_RE = re.compile(rb"NCCL INFO (?:Channel|Ring) [^\n]* via ([^\r\n]*)")
# Pure literals: much faster than one alternation that stops at every "NCCL ".
_FACT_STARTS = (b"INFO Using network", b"INFO NET/", b"INFO Bootstrap", b"INFO Selected", b"NCCL WARN ")
_FACT_RE = re.compile(rb"^(.*?)NCCL (INFO|WARN) ((?:Using network|NET/|Bootstrap|Selected|.*?network ).*?)\r?$")
_NETNAME_RE = re.compile(r"^NET/(.+?)/\d")
_PROVIDER_RE = re.compile(r"Selected [Pp]rovider is ([A-Za-z0-9_;\-]+)(?:,\s*fabric is ([^\s(,]+))?(?:.*?found (\d+) nics)?")
_IFACE_RE = re.compile(r"Using (?:\[\d+\])?([A-Za-z0-9_.\-]+):([0-9a-fA-F.:%]+)")
_LOG_LINE = re.compile(rb"NCCL (?:INFO|WARN|version)")


def _is_ofi(net: str) -> bool:
    return "libfabric" in net.lower() or net.lower() == "ofi"


@dataclass
class Rank:
    """What one process (host:pid) told us."""

    key: str
    host: str | None
    network: str | None = None
    provider: str | None = None
    fabric: str | None = None
    nics: int | None = None
    plugin: str | None = None  # "loaded" | "failed"
    loopback: bool = False


@dataclass
class Report:
    """The verdict plus the lines that decided it."""

    verdict: str
    network: str | None
    provider: str | None
    ranks: int
    hosts: list[str]
    reasons: list[str]
    causes: list[str]

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
            "reasons": self.reasons,
            "causes": self.causes,
            "hints": self.hints,
        }


class UnreadableInput(Exception):
    """Input is missing, binary, empty or holds no complete NCCL line."""


class _Collector:
    def __init__(self) -> None:
        self.ranks: dict[str, Rank] = {}
        self.evidence: dict[str, str] = {}  # first "file:line: text" per evidence kind
        self.causes: list[str] = []
        self._bufs: dict[str, bytes] = {}
        self.chan: Counter = Counter()  # transport text -> connection lines

    def _rank(self, prefix: bytes, source: str, anon_seq: int = 0) -> Rank:
        m = _PREFIX_RE.search(prefix)
        if m:
            host = m.group(1).decode(errors="replace")
            key = f"{host}:{m.group(2).decode()}"
        else:
            host, key = None, f"{source}#{anon_seq}"
        r = self.ranks.get(key)
        if r is None:
            r = self.ranks[key] = Rank(key=key, host=host)
        return r

    def _where(self, source: str, needle: bytes) -> str:
        buf = self._bufs[source]
        pos = buf.find(needle)
        line = buf.count(b"\n", 0, pos) + 1 if pos >= 0 else 0
        return f"{source}:{line}: {needle.decode(errors='replace').strip()}"

    def _note(self, kind: str, source: str, line: bytes) -> None:
        if kind not in self.evidence:
            self.evidence[kind] = self._where(source, line)

    def _cause(self, c: str) -> None:
        if c not in self.causes:
            self.causes.append(c)

    def feed(self, buf: bytes, source: str) -> None:
        self._bufs[source] = buf
        # Unprefixed lines: every "Using network" starts a new anonymous rank.
        anon = 0
        facts = []
        starts: list[int] = []
        for lit in _FACT_STARTS:  # bytes.find is far faster than re's literal search
            i = buf.find(lit)
            while i >= 0:
                starts.append(i)
                i = buf.find(lit, i + 1)
        starts.sort()
        for pos in starts:
            start = buf.rfind(b"\n", 0, pos) + 1
            end = buf.find(b"\n", pos)
            fm = _FACT_RE.search(buf[start : end if end >= 0 else len(buf)])
            if fm:
                facts.append(fm.groups())
        for pre, kind, body_b in facts:
            body = body_b.decode(errors="replace")
            full = pre + b"NCCL " + kind + b" " + body_b
            if body.startswith("Using network") and not _PREFIX_RE.search(pre):
                anon += 1
            r = self._rank(pre, source, anon)
            if body.startswith("Using network"):
                r.network = body[len("Using network"):].strip()
                if _is_ofi(r.network):
                    r.plugin = "loaded"  # only the plugin provides that network
                self._note(f"network:{r.network}", source, full)
            elif "Selected" in body and "rovider is" in body:
                m = _PROVIDER_RE.search(body)
                if m:
                    r.provider = m.group(1)
                    r.fabric = m.group(2)
                    r.nics = int(m.group(3)) if m.group(3) else r.nics
                    self._note(f"provider:{r.provider}", source, full)
            elif body.startswith("NET/Plugin") and "collnet" not in body.lower():  # CollNet symbols are optional
                low = body.lower()
                if "loaded" in low and "no plugin" not in low and "failed" not in low:
                    r.plugin = "loaded"
                elif r.network and _is_ofi(r.network):
                    pass
                elif any(s in low for s in ("no plugin", "could not find", "returned", "failed", "cannot open", "internal")):
                    if r.plugin != "loaded":
                        r.plugin = "failed"
                    self._note("plugin_failed", source, full)
            elif body.startswith(("Bootstrap", "NET/Socket")):
                m = _IFACE_RE.search(body)
                if m and (m.group(1) == "lo" or m.group(2).startswith("127.")):
                    r.loopback = True
                    self._note("loopback", source, full)
            if kind == b"WARN" or "not found" in body.lower():
                low = body.lower()
                if "network" in low and "not found" in low:
                    self._cause("net_forced_absent")
                    self._note("net_absent", source, full)
                elif "NET/OFI" in body and "provider" in low:
                    self._cause("no_efa_provider")
                    self._note("ofi_warn", source, full)
                elif "NET/OFI" in body:
                    self._cause("ofi_error")
                    self._note("ofi_warn", source, full)
        # Connection lines: aggregate transports with one C-level findall.
        counts = Counter(_CHAN_RE.findall(buf))
        for tr_b, n in counts.items():
            tr = tr_b.decode(errors="replace").strip()
            self.chan[tr] += n
            kind = _transport_kind(tr)
            if kind.startswith("net:"):
                self._note(f"chan:{kind}", source, b" via " + tr_b)
        # Ranks that printed only connection lines (no INIT lines): attribute per line, slow but rare.
        if counts and not any(r.host for r in self.ranks.values()):
            for ln in buf.split(b"\n"):
                if b" via " in ln:
                    pre, _s, rest = ln.partition(b"NCCL INFO ")
                    if rest.startswith((b"Channel", b"Ring")):
                        self._rank(pre, source)

    def report(self) -> Report:
        ranks = list(self.ranks.values())
        hosts = sorted({r.host for r in ranks if r.host})
        reasons: list[str] = []
        ev = self.evidence
        nets = {r.network for r in ranks if r.network}
        providers = {r.provider for r in ranks if r.provider}
        chan_nets: Counter = Counter()
        intra = 0
        for tr, n in self.chan.items():
            k = _transport_kind(tr)
            if k.startswith("net:"):
                chan_nets[k[4:]] += n
            else:
                intra += n
        network = next(iter(nets)) if len(nets) == 1 else (", ".join(sorted(nets)) or None)
        provider = next(iter(providers)) if len(providers) == 1 else (", ".join(sorted(providers)) or None)
        multi_host = len(hosts) > 1
        loopback_only = bool(ranks) and all(r.loopback for r in ranks if r.host is not None or r.loopback) and any(
            r.loopback for r in ranks
        )
        plugin_failed = any(r.plugin == "failed" for r in ranks)

        def done(verdict: str) -> Report:
            return Report(verdict, network, provider, len(ranks), hosts, reasons, list(self.causes))

        # 1. any inter-node connection over a non-EFA network -> fallback
        bad_chan = {n for n in chan_nets if not _is_ofi(n)}
        if bad_chan:
            for n in sorted(bad_chan):
                reasons.append(f"inter-node connections via NET/{n} ({chan_nets[n]} lines), first at {ev.get(f'chan:net:{n}')}")
                self._cause("socket_network" if n == "Socket" else "non_efa_network")
        # 2. a non-EFA network selected while several hosts take part -> fallback
        bad_nets = {n for n in nets if not _is_ofi(n)}
        if bad_nets and (multi_host or chan_nets):
            for n in sorted(bad_nets):
                reasons.append(f"NCCL selected network {n} with {len(hosts) or 'several'} hosts: {ev.get(f'network:{n}')}")
                self._cause("socket_network" if n == "Socket" else "non_efa_network")
        # 3. OFI with a provider other than efa
        bad_prov = {p for p in providers if p != "efa"}
        if bad_prov:
            for p in sorted(bad_prov):
                reasons.append(f"aws-ofi-nccl selected provider {p}, not efa: {ev.get(f'provider:{p}')}")
            self._cause("non_efa_provider")
        if plugin_failed:
            self._cause("plugin_not_found")
        if loopback_only:
            self._cause("socket_ifname")
        if reasons:
            if plugin_failed:
                reasons.append(f"net plugin failed to load: {ev['plugin_failed']}")
            return done("fallback")
        # 4. plugin failed to load and NCCL carried on with its internal networks
        if plugin_failed and not loopback_only and not (intra and not chan_nets and not multi_host):
            reasons.append(f"net plugin failed to load and NCCL used its internal implementation: {ev['plugin_failed']}")
            if "net_absent" in ev:
                reasons.append(ev["net_absent"])
            return done("fallback")
        # 5. EFA: OFI network / NET channels, provider efa, nothing contradicting
        ofi_used = any(_is_ofi(n) for n in nets) or any(_is_ofi(n) for n in chan_nets)
        if ofi_used and (providers == {"efa"} or (not providers and chan_nets)):
            for n in sorted(nets):
                reasons.append(f"network {n} selected by {sum(r.network == n for r in ranks)} rank(s): {ev.get(f'network:{n}')}")
            if "provider:efa" in ev:
                reasons.append(f"provider efa: {ev['provider:efa']}")
            elif chan_nets:
                reasons.append("no 'Selected provider' line; early aws-ofi-nccl only supports efa")
            for n, c in sorted(chan_nets.items()):
                reasons.append(f"{c} inter-node connection line(s) via NET/{n}, first at {ev.get(f'chan:net:{n}')}")
            return done("efa")
        # 6. undetermined
        if loopback_only:
            reasons.append(f"NCCL is bound to loopback, so only one node took part: {ev['loopback']}")
            self._cause("single_node")
        elif intra and not chan_nets:
            reasons.append(f"only intra-node connections ({intra} P2P/SHM lines), no inter-node traffic")
            self._cause("single_node")
        elif ofi_used and not providers:
            reasons.append("Libfabric network selected but no 'Selected provider' line to confirm efa")
            self._cause("no_net_info")
        elif nets:
            reasons.append(f"network {network} selected but no second host or inter-node connection seen: "
                           f"{ev.get('network:' + next(iter(sorted(nets))))}")
            self._cause("no_net_info")
        else:
            reasons.append("no 'Using network' or inter-node connection lines found")
            self._cause("no_net_info")
        if plugin_failed:
            reasons.append(f"net plugin not loaded: {ev['plugin_failed']}")
        return done("undetermined")


def _transport_kind(tr: str) -> str:
    if tr.startswith("NET/"):
        m = _NETNAME_RE.match(tr)
        return "net:" + (m.group(1) if m else tr[4:].split("/")[0])
    return "intra:" + tr.split("/")[0]


def _check_text(buf: bytes, source: str) -> None:
    if re.search(rb"\S", buf) is None:
        raise UnreadableInput(f"{source}: empty input")
    head = buf[:65536]
    if b"\x00" in head or sum(c < 9 or 13 < c < 32 for c in head) > len(head) // 20:
        raise UnreadableInput(f"{source}: binary data, not a text NCCL log")


def _iter_files(paths: Iterable[str]) -> list[str]:
    out: list[str] = []
    for p in paths:
        if os.path.isdir(p):
            for root, _dirs, files in os.walk(p):
                out.extend(os.path.join(root, f) for f in sorted(files))
        elif os.path.isfile(p):
            out.append(p)
        else:
            raise UnreadableInput(f"{p}: no such file or directory")
    return out


def _finish(col: _Collector) -> Report:
    if not any(_LOG_LINE.search(b) for b in col._bufs.values()):
        raise UnreadableInput("no complete NCCL log line found (truncated or not NCCL_DEBUG=INFO output)")
    return col.report()


def analyze_bytes(items: Iterable[tuple[str, bytes]]) -> Report:
    """Judge several (source, content) pairs as one job."""
    col = _Collector()
    for source, buf in items:
        _check_text(buf, source)
        col.feed(buf, source)
    return _finish(col)


def analyze_text(text: str, source: str = "<text>") -> Report:
    return analyze_bytes([(source, text.encode())])


def analyze_paths(paths: Iterable[str]) -> Report:
    files = _iter_files(paths)
    if not files:
        raise UnreadableInput("no input files")
    items = []
    for f in files:
        try:
            with open(f, "rb") as fh:
                items.append((f, fh.read()))
        except OSError as e:
            raise UnreadableInput(f"{f}: {e.strerror}") from None
    return analyze_bytes(items)


def format_report(rep: Report) -> str:
    lines = [f"verdict: {rep.verdict}  network: {rep.network}  provider: {rep.provider}  ranks: {rep.ranks}  hosts: {len(rep.hosts)}"]
    lines += [f"  reason: {r}" for r in rep.reasons]
    lines += [f"  hint [{c}]: {HINTS[c]}" for c in rep.causes]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ray_efa_eks.training.nccl_log", description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("paths", nargs="+", metavar="FILE_OR_DIR")
    a = ap.parse_args(argv)
    try:
        rep = analyze_paths(a.paths)
    except UnreadableInput as e:
        print(f"nccl_log: unreadable input: {e}", file=sys.stderr)
        return EXIT["unreadable"]
    try:
        print(json.dumps(rep.to_dict(), indent=2) if a.json else format_report(rep))
    except BrokenPipeError:  # e.g. piped into head
        pass
    return rep.exit_code


if __name__ == "__main__":
    sys.exit(main())
