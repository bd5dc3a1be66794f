"""Reading NCCL_DEBUG=INFO output into facts: each rank's network, provider, plugin state and interfaces, the
connection lines by transport, NCCL's node counts, and the first line of each kind of evidence.

Speed matters (a 512-rank log is tens to hundreds of MB), so the parser never
loops over all lines in Python: one C-level scan finds the few candidate lines
(WARN lines and INFO lines that are not ``Channel NN``/``Ring NN`` connection lines;
a connection line is never an init line), the init literals are checked on those
only, and connection lines are counted by transport with one ``re.findall``.
What the facts prove is decided in ``efacheck/nccl_verdict.py``.
"""

from __future__ import annotations

import bisect
import re
from collections import Counter
from dataclasses import dataclass, field

_PREFIX_RE = re.compile(rb"([A-Za-z0-9_.\-]+):(\d+):\d+ \[\d+\] ")
# NET connection lines only (every other transport is counted with bytes.count): literal-led, so `re` uses its
# fast substring search over the whole buffer.
_NET_CHAN_RE = re.compile(rb" via NET/([^\r\n]*)")
INTRA = (b" via P2P/", b" via SHM/")
"""How NCCL names an intra-node connection (CUDA P2P or shared memory): never the network."""
_INTRA_LEN = max(map(len, INTRA))
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
NETDEV_RE = re.compile(r"^(.+?)/(\d+)(?:\(\d+\))?(/GDRDMA)?")
"""A NET transport's ``name/device[(port)][/GDRDMA]``, as NCCL prints it in a connection line."""
_PROVIDER_RE = re.compile(
    r"Selected [Pp]rovider is ([A-Za-z0-9_;\-]+)(?:,\s*fabric is ([^\s(,]+))?(?:.*?found (\d+) nics)?"
)
_IFACE_RE = re.compile(r"Using (?:\[\d+\])?([A-Za-z0-9_.\-]+):([0-9a-fA-F.:%]+)")
_NNODES_RE = re.compile(r"nRanks (\d+) nNodes (\d+)")
_NET_ASSIGNED_RE = re.compile(r"^(?:Using network|Assigned NET plugin) (.+?)(?: to comm.*)?$")


def is_ofi(net: str) -> bool:
    """The aws-ofi-nccl plugin, by either name NCCL gives it (``Libfabric``, ``OFI``)."""
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


class Collector:
    """The facts of one job's logs, fed one input at a time (:meth:`feed`)."""

    def __init__(self) -> None:
        self.ranks: dict[str, Rank] = {}
        self.ev: dict[str, str] = {}  # first "file:line: text" per evidence kind
        self.causes: list[str] = []
        self.bufs: dict[str, bytes] = {}
        self._marks: dict[str, list[tuple[int, int]]] = {}  # source -> sorted (offset, line number there)
        self.net_chan: Counter = Counter()  # NET transport text ("Libfabric/0/GDRDMA") -> connection lines
        self.intra_bufs: list[bytes] = []  # inputs with P2P/SHM connection lines
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
        buf = self.bufs[source]
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

    def cause(self, c: str) -> None:
        if c not in self.causes:
            self.causes.append(c)

    def feed(self, buf: bytes, source: str) -> None:
        self.bufs[source] = buf
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
            m = NETDEV_RE.match(tr)
            self._note(f"chan:{m.group(1) if m else tr}", source, buf.find(b" via NET/" + tr_b))
        first: list[int] = []  # where the first intra-node line is: the second literal is looked for only before
        end = len(buf)  # the first's hit (a log with P2P lines and no SHM line is not scanned twice to the end)
        for lit in INTRA:
            i = buf.find(lit, 0, end)
            if i >= 0:
                first.append(i)
                end = i + _INTRA_LEN
        if first:
            self.intra_bufs.append(buf)  # counted only if a reason needs the number (single-host logs)
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
            if is_ofi(net):
                r.plugin = "loaded"  # only a working plugin provides that network (an earlier failed try is over)
            self._note(f"network:{net}", source, pos)
            if r.host:
                self._note(f"network:{net}@{r.host}", source, pos)
            return
        if body.startswith("Initialized NET plugin"):
            name = body[len("Initialized NET plugin") :].strip()
            if is_ofi(name):
                r.plugin = "loaded"
            return
        if "failed to initialize any net plugin" in low:
            self.net_init_failed = True
            self.cause("net_init_failed")
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
            self.cause("no_efa_provider")
            self._note("ofi_failed", source, pos)
            return
        if body.startswith("NET/Plugin") and "collnet" not in low:  # CollNet symbols are optional
            if "loaded" in low:  # NCCL 2.4-2.30 says it only in "Loaded net|coll|gin plugin NAME (vN)"
                if r.plugin != "init_failed":
                    r.plugin = "loaded"  # also after "Could not find: <another candidate name>"
            elif r.plugin in ("loaded", "init_failed"):
                pass
            elif any(
                s in low for s in ("no plugin", "could not find", "returned", "failed", "cannot open", "internal")
            ):
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
                self.cause("net_forced_absent")
                self._note("net_absent", source, pos)
            elif "NET/OFI" in body:
                if "initializ" in low and "fail" in low:
                    r.plugin = "init_failed"
                    self._note("ofi_failed", source, pos)
                elif "provider" in low:
                    self.cause("no_efa_provider")
                else:
                    self.cause("ofi_error")
                self._note("ofi_warn", source, pos)
