"""The EFA check's options as one typed request: the gate (components/addons/efa_check.py) builds a
:class:`CheckRequest` and renders it as the check's command line (:meth:`CheckRequest.argv`); the check
(efacheck/check_args.py) parses that command line back into the same class, so both sides read one list of fields.

A stdlib-only leaf: the gate's payload ships it beside efacheck (the pod has no Pulumi), and efacheck may import it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class CheckRequest:
    """One EFA check as its command line asks for it. Defaults are the parser's (``--image-digest``'s is read from
    $RAY_EFA_EKS_IMAGE_DIGEST by the parser); each field is the option ``--<name with dashes>``, a bool a flag. The
    fields stand in the order the gate writes them."""

    json: bool = False
    """Print one JSON object."""
    address: str = "auto"
    """The Ray address (auto inside a Ray job)."""
    expect_nodes: int = 2
    """GPU nodes the stack declares."""
    wait_s: float = 900.0
    """Deadline for the declared topology (s)."""
    timeout_s: float = 600.0
    """Deadline for the collective sweep, NCCL init included (s)."""
    expect_transport: str = "efa"
    """efa, socket or intra-node (verdict.TRANSPORTS)."""
    expect_gpus_per_node: int = 0
    """GPUs per node the stack declares (> 0 means NCCL, never gloo)."""
    expect_nics: int | None = None
    """EFA interfaces per node, for the NCCL log verdict."""
    expect_gdrdma: bool = False
    """The instance type supports GPUDirect RDMA."""
    efa_gbps: float | None = None
    """EFA line rate per node (Gbit/s), for the fraction."""
    image: str | None = None
    """Image reference, to pick a known manifest (None: $RAY_EFA_EKS_IMAGE)."""
    spec_hash: str | None = None
    """RayCluster spec hash every Ray pod's $RAY_EFA_EKS_SPEC_HASH must equal."""
    min_busbw_gbps: float | None = None
    """Fail below this peak all-reduce busbw (GB/s)."""
    min_busbw_fraction: float | None = None
    """Fail when large-message busbw of any collective is below this fraction of ``efa_gbps``."""
    compare_socket: bool = False
    """Run the sweep again over NCCL_NET=Socket and report EFA/Socket busbw ratios."""
    strict_versions: bool = False
    """A version that differs from the manifest fails."""
    require_counters: bool = False
    """Unreadable EFA hardware counters make an efa verdict undetermined."""
    storage_proof: bool = False
    """Write, list, read back and delete an object under the checkpoint prefix from a GPU worker pod."""
    local: bool = False
    """Start a local 2-worker-node Ray cluster."""
    backend: str = "auto"
    """auto, nccl or gloo (auto: nccl when GPU nodes are expected or present)."""
    preset: str | None = None
    """Also time the FSDP shard sizes of this model preset."""
    min_bytes: int | None = None
    """Smallest message size of the sweep (None: the sweep's default)."""
    max_bytes: int | None = None
    """Largest message size of the sweep (None: the sweep's default)."""
    iters: int = 5
    """Timed calls per message size."""
    storage_path: str | None = None
    """Checkpoint prefix for the storage proof (None: the worker pod's $RAY_EFA_EKS_STORAGE_PATH)."""
    manifest: str | None = None
    """The image's version manifest as JSON, or a file holding it."""
    image_digest: str | None = None
    """The digest every Ray pod runs (the parser's default: $RAY_EFA_EKS_IMAGE_DIGEST)."""
    report: str | None = None
    """Directory for report.md and busbw.png."""

    @classmethod
    def from_namespace(cls, ns: object) -> "CheckRequest":
        """The request a parsed command line holds (an ``argparse.Namespace``: the parser's only hand-over); a field
        the parser lacks is an AttributeError naming it."""
        return cls(**{f.name: getattr(ns, f.name) for f in fields(cls)})

    def argv(self, always: Iterable[str] = ()) -> list[str]:
        """The command line that asks for this request, in field order: a field whose value differs from its
        default, and each field named in ``always`` (written even at its default, so the gate's command says it),
        as ``--name value``; a true bool as its flag; None and false bools are left out (the parser's default).
        A value is written as ``str(value)``, which reads back to the same value."""
        always = set(always)
        unknown = always - {f.name for f in fields(self)}
        if unknown:
            raise ValueError(f"CheckRequest has no field {', '.join(sorted(unknown))}")
        out: list[str] = []
        for f in fields(self):
            value, flag = getattr(self, f.name), "--" + f.name.replace("_", "-")
            if isinstance(value, bool):
                out += [flag] if value else []
            elif value is not None and (value != f.default or f.name in always):
                out += [flag, str(value)]
        return out
