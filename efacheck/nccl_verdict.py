"""Deciding, from the parsed facts of a job's NCCL logs (``efacheck/nccl_parse.py``), whether inter-node traffic
went over EFA: ``efa``, ``fallback`` or ``undetermined``, each with its reasons, causes and cited lines.

The rules run in order and the first that decides wins (:data:`RULES`): the run failed outright, a network or
provider other than Libfabric/efa, the plugin failed and NCCL carried on, the expected topology was not met, proof
of EFA; otherwise undetermined, with the reason. ``efa`` needs proof that traffic crossed nodes on Libfabric with
provider efa and nothing contradicting it; one host, P2P/SHM only or no connection lines is never ``efa``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable, Optional

from .nccl_parse import INTRA, NETDEV_RE, Collector, Rank, is_ofi
from .nccl_report import Report


@dataclass(frozen=True)
class Expect:
    """The topology the caller expects (``--expect-nodes``, ``--expect-nics``, ``--expect-gdrdma``)."""

    nodes: int | None = None
    """Nodes that must take part (the stack's GPU node count)."""
    nics: int | None = None
    """EFA interfaces each node must use (the catalogue's count for the instance type)."""
    gdrdma: bool = False
    """Every NET connection must be /GDRDMA (the catalogue says GPUDirect RDMA)."""


@dataclass(frozen=True)
class Facts:
    """What the collected lines add up to, before any rule judges them."""

    ranks: list[Rank]
    hosts: list[str]
    silent: list[str]
    nets: Counter
    """Networks the ranks selected ("Using network X"), by rank count."""
    providers: set[str]
    chan_nets: Counter
    """Connection lines per NET network name."""
    ofi_devs: set[int]
    ofi_lines: int
    ofi_gdr: int
    network: str | None
    provider: str | None
    max_nodes: int | None
    """NCCL's own node count (largest nNodes), if it printed one."""
    nodes: int | None
    nics_by_host: dict[str, int]
    loopback: bool
    plugin_failed: bool
    ofi_init_failed: bool
    single: bool
    """Positive proof that only one node took part (NCCL's own count, loopback, or one host with only P2P/SHM)."""
    multi: bool
    ofi_nets: set[str]
    one_host: bool
    crossed_by_conn: bool
    crossed_by_count: bool
    crossed_by_hosts: bool
    unproven: list[str]
    """Named hosts with no 'Selected provider' line."""
    provider_ok: bool


def facts(col: Collector, silent: list[str]) -> Facts:
    """The derived facts of ``col``'s lines (pure: no reason or cause is written here)."""
    ranks = list(col.ranks.values())
    hosts = sorted({r.host for r in ranks if r.host})
    nets: Counter = Counter()
    for r in ranks:
        nets.update(r.networks)
    providers = {r.provider for r in ranks if r.provider}
    chan_nets: Counter = Counter()
    ofi_devs: set[int] = set()
    ofi_lines = ofi_gdr = 0
    for tr, n in col.net_chan.items():
        m = NETDEV_RE.match(tr)
        name = m.group(1) if m else tr.split("/")[0]
        chan_nets[name] += n
        if is_ofi(name):
            ofi_lines += n
            if m:
                ofi_devs.add(int(m.group(2)))
                ofi_gdr += n if m.group(3) else 0
    max_nodes = max(col.nnodes) if col.nnodes else None
    nics_by_host: dict[str, int] = {}
    for r in ranks:
        if r.host and r.nics is not None:
            nics_by_host[r.host] = max(nics_by_host.get(r.host, 0), r.nics)
    loopback = any(r.loopback for r in ranks) and all(r.loopback for r in ranks if r.host is not None or r.loopback)
    intra = bool(col.intra_bufs)
    # NET lines from one named host with no node count prove nothing crossed nodes: NCCL also connects ranks of
    # one node over NET when P2P/SHM are off. A rank's own view of a larger job carries NCCL's nNodes.
    one_host = len(hosts) == 1 and max_nodes is None
    # Two or more distinct hosts in one job, each with its ranks on Libfabric and provider efa: NCCL treats
    # ranks with different host hashes as different nodes and sends between them over the network it selected,
    # so the job's inter-node transport was Libfabric over EFA. Every host must say so (a host whose ranks
    # chose another network or named no provider is no proof). An excerpt with no host name, node count or
    # connection line gets no such rule: the same lines from one node read the same, in any order (NCCL prints
    # "Using network Libfabric" on single-node runs too).
    efa_hosts = {
        r.host for r in ranks if r.host and r.provider == "efa" and r.networks and all(is_ofi(n) for n in r.networks)
    }
    # Every named host must name its provider: another host's "Selected provider is efa" says nothing of the
    # provider this host's NET lines ran on (tcp too is FI_EP_RDM).
    unproven = sorted({r.host for r in ranks if r.host} - {r.host for r in ranks if r.host and r.provider})
    return Facts(
        ranks=ranks,
        hosts=hosts,
        silent=list(silent),
        nets=nets,
        providers=providers,
        chan_nets=chan_nets,
        ofi_devs=ofi_devs,
        ofi_lines=ofi_lines,
        ofi_gdr=ofi_gdr,
        network=", ".join(sorted(nets)) or (", ".join(sorted(chan_nets)) or None),
        provider=", ".join(sorted(providers)) or None,
        max_nodes=max_nodes,
        nodes=max_nodes if max_nodes is not None else (len(hosts) or None),
        nics_by_host=nics_by_host,
        loopback=loopback,
        plugin_failed=any(r.plugin in ("failed", "init_failed") for r in ranks),
        ofi_init_failed=any(r.plugin == "init_failed" for r in ranks),
        single=(max_nodes == 1) or loopback or (len(hosts) <= 1 and intra and not chan_nets and max_nodes is None),
        multi=(max_nodes or 0) > 1 or len(hosts) > 1 or bool(chan_nets),
        ofi_nets={n for n in nets if is_ofi(n)} | {n for n in chan_nets if is_ofi(n)},
        one_host=one_host,
        crossed_by_conn=bool(ofi_lines) and max_nodes != 1 and not one_host,
        crossed_by_count=(max_nodes or 0) > 1 and bool(nets) and all(is_ofi(n) for n in nets),
        crossed_by_hosts=(
            len(hosts) >= 2 and efa_hosts == set(hosts) and max_nodes != 1 and all(is_ofi(n) for n in nets)
        ),
        unproven=unproven,
        # The provider must be named: "AWS Libfabric" (the early plugin) also ran on the tcp and sockets providers
        # (aws-ofi-nccl v1.0 README: any provider with FI_EP_RDM; v1.1 documents OFI_NCCL_USE_IPV6_TCP).
        provider_ok=providers == {"efa"} and not unproven,
    )


class Case:
    """The verdict being written: its reasons, the evidence lines they cite, and the causes (kept in the
    collector, in the order found)."""

    def __init__(self, col: Collector, f: Facts):
        self.col, self.f = col, f
        self.ev = col.ev
        self.reasons: list[str] = []
        self.evidence: list[str] = []
        self.cause = col.cause

    def cite(self, *kinds: str) -> str:
        """Add the first line of each kind to evidence; return them joined for a reason."""
        lines = list(dict.fromkeys(self.ev[k] for k in kinds if k in self.ev))  # two kinds can be one line: once
        for ln in lines:
            if ln not in self.evidence:
                self.evidence.append(ln)
        return "; ".join(lines) or "(no line)"

    def plugin_reason(self) -> str:
        """Why the plugin is not in use: it loaded and failed to initialize, or it never loaded."""
        if self.f.ofi_init_failed:
            self.cause("ofi_init_failed")
            return f"aws-ofi-nccl loaded but failed to initialize: {self.cite('ofi_failed', 'ofi_warn')}"
        self.cause("plugin_not_found")
        return f"net plugin failed to load: {self.cite('plugin_failed')}"

    def ofi_chan_kinds(self) -> list[str]:
        return [f"chan:{n}" for n in sorted(self.f.chan_nets) if is_ofi(n)]

    def report(self, verdict: str) -> Report:
        f = self.f
        return Report(
            verdict,
            f.network,
            f.provider,
            len(f.ranks),
            f.hosts,
            self.reasons,
            list(self.col.causes),
            self.evidence,
            f.nodes,
            f.nics_by_host,
            f.silent,
        )


Rule = Callable[[Facts, Case, Expect], Optional[str]]
"""A decision: the verdict it reaches, or None when it does not decide (the next rule judges)."""


def run_failed(f: Facts, c: Case, expect: Expect) -> Optional[str]:
    """NCCL could not initialise any network: the run failed outright (fallback)."""
    if not c.col.net_init_failed:
        return None
    c.reasons.append(f"NCCL could not initialize any network plugin, the run failed: {c.cite('net_init_failed')}")
    if f.plugin_failed:
        c.reasons.append(c.plugin_reason())
    return "fallback"


def wrong_network(f: Facts, c: Case, expect: Expect) -> Optional[str]:
    """Connections or communicators on a network other than Libfabric with several nodes, or a provider other than
    efa: fallback. Also notes a forced NCCL_NET and a loopback bootstrap as causes, whatever the verdict."""
    bad = False
    for n in sorted(x for x in f.chan_nets if not is_ofi(x)):
        c.reasons.append(f"inter-node connections via NET/{n} ({f.chan_nets[n]} lines), first at {c.cite(f'chan:{n}')}")
        c.cause("socket_network" if n == "Socket" else "non_efa_network")
        bad = True
    for n in sorted(x for x in f.nets if not is_ofi(x)):
        if f.multi and not f.single:
            c.reasons.append(f"NCCL selected network {n} with {f.nodes or 'several'} nodes: {c.cite(f'network:{n}')}")
            c.cause("socket_network" if n == "Socket" else "non_efa_network")
            bad = True
    for p in sorted(x for x in f.providers if x != "efa"):
        c.reasons.append(f"aws-ofi-nccl selected provider {p}, not efa: {c.cite(f'provider:{p}')}")
        c.cause("non_efa_provider")
        bad = True
    forced = c.col.net_forced
    if forced and not is_ofi(forced):
        c.cause("net_forced")
        if bad:
            c.reasons.append(f"NCCL_NET forces network {forced}: {c.cite('net_forced')}")
    if f.loopback:
        c.cause("socket_ifname")
    if not bad:
        return None
    if f.plugin_failed:
        c.reasons.append(c.plugin_reason())
    if "ofi_warn" in c.ev and "ofi_failed" not in c.ev:
        c.reasons.append(f"aws-ofi-nccl warned: {c.cite('ofi_warn')}")
    if f.max_nodes and f.max_nodes > 1:
        c.reasons.append(f"NCCL counted {f.max_nodes} nodes: {c.cite(f'nnodes:{f.max_nodes}')}")
    return "fallback"


def plugin_fell_back(f: Facts, c: Case, expect: Expect) -> Optional[str]:
    """The plugin failed to load or initialise and NCCL carried on (fallback), unless only one node took part."""
    if not f.plugin_failed or f.single:
        return None
    c.reasons.append(c.plugin_reason() + " and NCCL carried on with its internal networks")
    if "net_absent" in c.ev:
        c.reasons.append(c.cite("net_absent"))
    for n in sorted(f.nets):
        c.reasons.append(f"network {n}: {c.cite(f'network:{n}')}")
    return "fallback"


def topology_unmet(f: Facts, c: Case, expect: Expect) -> Optional[str]:
    """Positive evidence of fewer nodes or EFA interfaces than expected, or NET lines without GPUDirect RDMA where
    it is expected: fallback."""
    topo: list[str] = []
    # hosts that logged stand in for NCCL's own count only when every input spoke (a silent one may be a node)
    if expect.nodes and f.nodes is not None and f.nodes < expect.nodes and (f.max_nodes is not None or not f.silent):
        src = c.cite(f"nnodes:{f.max_nodes}") if f.max_nodes is not None else f"hosts {', '.join(f.hosts)}"
        topo.append(f"{f.nodes} node(s) took part, expected {expect.nodes}: {src}")
        c.cause("fewer_nodes")
    if expect.nics:
        low_hosts = {h: n for h, n in f.nics_by_host.items() if n < expect.nics}
        if low_hosts:
            for h, n in sorted(low_hosts.items()):
                # nics come with a provider line, and any provider but efa was a fallback above (wrong_network)
                topo.append(
                    f"host {h}: aws-ofi-nccl found {n} EFA interface(s), expected {expect.nics}: "
                    f"{c.cite(f'provider:efa@{h}')}"
                )
            c.cause("fewer_nics")
        elif not f.nics_by_host and f.ofi_devs and len(f.ofi_devs) < expect.nics:
            topo.append(
                f"NET connections use {len(f.ofi_devs)} EFA device(s) ({sorted(f.ofi_devs)}), expected "
                f"{expect.nics}: {c.cite(*c.ofi_chan_kinds())}"
            )
            c.cause("fewer_nics")
    if expect.gdrdma and f.ofi_lines and f.ofi_gdr < f.ofi_lines:
        topo.append(
            f"{f.ofi_lines - f.ofi_gdr} of {f.ofi_lines} NET connection line(s) without /GDRDMA where the "
            f"instance supports GPUDirect RDMA: {c.cite(*c.ofi_chan_kinds())}"
        )
        c.cause("no_gdrdma")
    if not topo:
        return None
    c.reasons.extend(topo)
    if f.plugin_failed:
        c.reasons.append(c.plugin_reason())
    return "fallback"


def efa_by_hosts(f: Facts, c: Case, expect: Expect) -> Optional[str]:
    """Two or more distinct hosts, each on Libfabric with provider efa, and nothing contradicting: efa."""
    if not (
        f.crossed_by_hosts
        and f.provider_ok
        and not (f.crossed_by_conn or f.crossed_by_count)
        and not f.plugin_failed
        and not f.silent
    ):
        return None
    for h in f.hosts:
        r = next(r for r in f.ranks if r.host == h and r.provider == "efa")
        c.reasons.append(
            f"host {h}: network {r.network} with provider efa: "
            f"{c.cite(*(f'network:{n}@{h}' for n in sorted(r.networks)), f'provider:efa@{h}')}"
        )
    c.reasons.append(
        f"{len(f.hosts)} distinct hosts each selected Libfabric with provider efa and nothing "
        "contradicts it: the inter-node transport was Libfabric over EFA"
    )
    return "efa"


def efa_by_traffic(f: Facts, c: Case, expect: Expect) -> Optional[str]:
    """Libfabric connection lines across nodes, or NCCL's node count > 1 with every communicator on Libfabric, with
    provider efa on every host and nothing contradicting: efa."""
    if not (
        f.ofi_nets
        and (f.crossed_by_conn or f.crossed_by_count)
        and f.provider_ok
        and not f.plugin_failed
        and not f.silent
    ):
        return None
    for n in sorted(f.nets):
        c.reasons.append(f"network {n} on {sum(n in r.networks for r in f.ranks)} rank(s): {c.cite(f'network:{n}')}")
    c.reasons.append(f"provider efa: {c.cite('provider:efa', *(f'provider:efa@{h}' for h in f.hosts))}")
    for n in sorted(x for x in f.chan_nets if is_ofi(x)):
        c.reasons.append(f"{f.chan_nets[n]} inter-node connection line(s) via NET/{n}, first at {c.cite(f'chan:{n}')}")
    if f.max_nodes and f.max_nodes > 1:
        c.reasons.append(f"NCCL counted {f.max_nodes} nodes: {c.cite(f'nnodes:{f.max_nodes}')}")
    return "efa"


def undetermined(f: Facts, c: Case, expect: Expect) -> Optional[str]:
    """Nothing above decided: undetermined, with the reason (a silent rank, one node, a host with no provider line,
    one host's NET lines, no provider at all, an unattributed excerpt, or no connection line)."""
    if f.silent:
        c.reasons.append(
            f"{len(f.silent)} rank log(s) gave no NCCL line, so not every rank spoke: {'; '.join(f.silent)}"
        )
        c.cause("rank_silent")

    def nets_cited() -> str:
        return f": {c.cite(*(f'network:{n}' for n in sorted(f.nets)))}" if f.nets else ""

    crossed = f.crossed_by_conn or f.crossed_by_count
    if f.single:
        if f.max_nodes == 1:
            c.reasons.append(f"NCCL counted one node, nothing crossed nodes: {c.cite('nnodes:1')}")
        elif f.loopback:
            c.reasons.append(f"NCCL is bound to loopback, so only one node took part: {c.cite('loopback')}")
        else:
            n_intra = sum(b.count(lit) for b in c.col.intra_bufs for lit in INTRA)
            c.reasons.append(
                f"one host ({f.hosts[0] if f.hosts else 'unnamed'}), only intra-node connections "
                f"({n_intra} P2P/SHM lines), nothing crossed nodes: {c.cite('intra')}"
            )
        c.cause("single_node")
    elif f.ofi_nets and f.providers == {"efa"} and f.unproven and crossed:
        c.reasons.append(
            f"no 'Selected provider' line from host(s) {', '.join(f.unproven)}: another host's efa "
            f"provider says nothing of theirs: {c.cite('provider:efa')}"
        )
        c.cause("no_provider_line")
    elif f.ofi_lines and f.one_host:
        c.reasons.append(
            f"NET connection lines from one host ({f.hosts[0]}) and no node count: NCCL also uses NET "
            f"within a node (P2P/SHM off), so nothing shows traffic crossed nodes: "
            f"{c.cite(*c.ofi_chan_kinds())}"
        )
        c.cause("single_node")
    elif f.ofi_nets and not f.providers and crossed:
        c.reasons.append(
            f"Libfabric network but no 'Selected provider' line to show efa (aws-ofi-nccl, the early "
            f"'AWS Libfabric' plugin too, also runs on the tcp and sockets providers): "
            f"{c.cite(*(k for n in sorted(f.ofi_nets) for k in (f'network:{n}', f'chan:{n}')))}"
        )
        c.cause("no_provider_line")
    elif not f.silent and not f.hosts and f.max_nodes is None and not f.chan_nets:
        what = ", ".join(f"{n}" for n in sorted(f.nets)) or "no network"
        c.reasons.append(
            f"an unattributed excerpt: no host name, node count or connection line ({what} selected "
            f"by {len(f.ranks)} rank(s)), and the same lines from one node read the same in any order, "
            "so nothing shows traffic crossed nodes" + nets_cited()
        )
        c.cause("no_connections" if f.nets else "no_net_info")
    elif not f.silent:
        what = ", ".join(f"{n}" for n in sorted(f.nets)) or "no network"
        c.reasons.append(
            f"no inter-node connection line and no node count > 1 ({what} selected, "
            f"{len(f.hosts) or 'no'} host name(s) seen): nothing shows traffic crossed nodes" + nets_cited()
        )
        c.cause("no_connections" if f.nets else "no_net_info")
    if "provider:efa" in c.ev and f.ofi_nets and not f.silent:
        c.cite("provider:efa")
    if f.plugin_failed:
        c.reasons.append(c.plugin_reason())
    return "undetermined"


RULES: tuple[Rule, ...] = (
    run_failed,
    wrong_network,
    plugin_fell_back,
    topology_unmet,
    efa_by_hosts,
    efa_by_traffic,
    undetermined,
)
"""The decisions in the order they are asked; the first verdict wins (``undetermined`` always answers)."""


def judge(col: Collector, expect: Expect, silent: list[str]) -> Report:
    """The job's verdict from the facts ``col`` collected; ``silent``: inputs that gave no NCCL line."""
    f = facts(col, silent)
    case = Case(col, f)
    # asked lazily, in order: a rule that answers stops the rest (undetermined, the last, always answers)
    return case.report(next(v for v in (rule(f, case, expect) for rule in RULES) if v is not None))
