"""What the NCCL verdict says: the report (verdict, reasons, evidence, causes), each cause's remediation hint and
the exit code of each verdict; rendered as text or JSON by the CLI (``efacheck/nccl_log.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from .cli import EXIT_USAGE

EXIT = {"efa": 0, "fallback": 1, "undetermined": 2, "unreadable": 3, "usage": EXIT_USAGE}


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


def format_report(rep: Report) -> str:
    lines = [
        f"verdict: {rep.verdict}  network: {rep.network}  provider: {rep.provider}  ranks: {rep.ranks}  "
        f"hosts: {len(rep.hosts)}  nodes: {rep.nodes if rep.nodes is not None else '?'}"
    ]
    lines += [f"  reason: {r}" for r in rep.reasons]
    lines += [f"  evidence: {e}" for e in rep.evidence]
    lines += [f"  not read: {s}" for s in rep.silent]
    lines += [f"  hint [{c}]: {HINTS[c]}" for c in rep.causes]
    return "\n".join(lines)


def with_verdict(rep: Report, verdict: str, reason: str, cause: str | None = None) -> Report:
    """A copy of ``rep`` with another verdict and one more reason (and cause); for combining witnesses."""
    causes = list(rep.causes) + ([cause] if cause and cause not in rep.causes else [])
    return replace(rep, verdict=verdict, reasons=list(rep.reasons) + [reason], causes=causes)
