"""The EFA check's command line: its parser, the check it asks for (:class:`CheckRequest`, what the decision code
takes), and the arguments that cannot make a check, refused before Ray starts (a bad argument must not cost a
cluster start-up)."""

from __future__ import annotations

import os

from ..components.gate_request import CheckRequest
from . import fsdp_shapes
from . import stack_probe as _probe
from .storage_uri import uri_problem
from .cli import ArgumentParser
from .verdict import TRANSPORTS

DESCRIPTION = "In-cluster proof that NCCL traffic between nodes goes over EFA, not TCP."
"""The first line of efa_check's docstring: ``--help``'s description."""

MIN_SWEEP_BYTES = 4
"""One float32 element: the smallest message a collective of the sweep can move."""
MAX_SWEEP_BYTES = 16 << 30
"""16 GiB, the largest message the sweep allocates (twice, per rank); nccl-tests' own sweeps stop at 8-16 GiB."""


def parse(argv: list[str] | None = None, prog: str | None = None) -> CheckRequest:
    """The command line as a :class:`CheckRequest`; a usage error exits 64 (the parser's) before Ray starts."""
    ap = parser(prog)
    req = CheckRequest.from_namespace(ap.parse_args(argv))
    problem = usage_problem(req)
    if problem:
        ap.error(problem)
    if req.expect_transport == "intra-node" and req.expect_nodes != 1:
        ap.error(f"--expect-transport intra-node checks one node: --expect-nodes must be 1, not {req.expect_nodes}")
    if req.expect_transport != "intra-node" and req.expect_nodes < 2:
        ap.error(
            f"--expect-transport {req.expect_transport} needs >= 2 nodes (--expect-nodes "
            f"{req.expect_nodes}); one GPU node: --expect-transport intra-node"
        )
    return req


def parser(prog: str | None = None) -> ArgumentParser:
    ap = ArgumentParser(
        prog=prog or "python -m ray_efa_eks.efacheck.efa_check", description=DESCRIPTION, exit_codes="efa-check"
    )
    ap.add_argument("--address", default="auto", help="Ray address (auto inside a Ray job)")
    ap.add_argument("--local", action="store_true", help="start a local 2-worker-node Ray cluster")
    ap.add_argument(
        "--backend",
        choices=("auto", "nccl", "gloo"),
        default="auto",
        help="auto: nccl when the cluster has (or is expected to have) GPU nodes, else gloo",
    )
    ap.add_argument("--expect-nodes", type=int, default=2, help="GPU nodes the stack declares (default 2)")
    ap.add_argument(
        "--expect-gpus-per-node",
        type=int,
        default=0,
        help="GPUs per node the stack declares (catalogue); > 0 means NCCL, never gloo",
    )
    ap.add_argument("--expect-nics", type=int, help="EFA interfaces per node (catalogue), for the NCCL log verdict")
    ap.add_argument("--expect-gdrdma", action="store_true", help="the type supports GPUDirect RDMA (catalogue)")
    ap.add_argument(
        "--wait-s",
        type=float,
        default=900.0,
        help="deadline for the declared topology (s, default 900); rank start-up then gets 150 s",
    )
    ap.add_argument(
        "--timeout-s",
        type=float,
        default=600.0,
        help="deadline for the collective sweep, NCCL init included (s, default 600)",
    )
    ap.add_argument("--preset", help="also time the FSDP shard sizes of this model preset")
    ap.add_argument("--min-bytes", type=int, help="smallest message size of the sweep, bytes (default: the sweep's)")
    ap.add_argument("--max-bytes", type=int, help="largest message size of the sweep, bytes (default: the sweep's)")
    ap.add_argument("--iters", type=int, default=5, help="timed calls per message size (default 5)")
    ap.add_argument("--min-busbw-gbps", type=float, help="fail below this peak all-reduce busbw (GB/s)")
    ap.add_argument("--efa-gbps", type=float, help="EFA line rate per node, Gbit/s (catalogue), for the fraction")
    ap.add_argument(
        "--min-busbw-fraction",
        type=float,
        help="fail when large-message busbw of any collective is below this fraction of --efa-gbps",
    )
    ap.add_argument(
        "--expect-transport",
        choices=TRANSPORTS,
        default="efa",
        help="efa (default): prove EFA across nodes; socket (efa: false): NCCL across nodes over Socket; "
        "intra-node (one GPU node): NCCL inside the node; the last two say EFA was not exercised",
    )
    ap.add_argument(
        "--require-counters",
        action="store_true",
        help="EFA hardware counters that cannot be read make an efa verdict undetermined (exit 2)",
    )
    ap.add_argument(
        "--storage-proof",
        action="store_true",
        help="from a GPU worker pod, write, list, read back and delete an object under the checkpoint "
        "prefix through pyarrow.fs as Ray Train does (failure: exit 1, stage storage)",
    )
    ap.add_argument(
        "--storage-path",
        help="checkpoint prefix for --storage-proof (default: the worker pod's $RAY_EFA_EKS_STORAGE_PATH)",
    )
    ap.add_argument(
        "--compare-socket",
        action="store_true",
        help="run the sweep again in fresh ranks with NCCL_NET=Socket and report EFA/Socket busbw ratios",
    )
    ap.add_argument("--manifest", help="the image's version manifest as JSON (stack config), or a file holding it")
    ap.add_argument("--image", help="image reference, to pick a known manifest (default $RAY_EFA_EKS_IMAGE)")
    ap.add_argument(
        "--spec-hash",
        help="RayCluster spec hash the gate was rendered for: every Ray pod's "
        "$RAY_EFA_EKS_SPEC_HASH must equal it (else stage stale); --image likewise $RAY_EFA_EKS_IMAGE",
    )
    ap.add_argument(
        "--image-digest",
        default=os.environ.get("RAY_EFA_EKS_IMAGE_DIGEST") or None,
        help="the digest every Ray pod runs (the gate's image audit read it from the pods' "
        "status.containerStatuses[].imageID; default $RAY_EFA_EKS_IMAGE_DIGEST): recorded in the result "
        "and the report",
    )
    ap.add_argument("--strict-versions", action="store_true", help="a version that differs from the manifest fails")
    ap.add_argument("--report", metavar="DIR", help="write report.md and busbw.png there (text also to stderr)")
    ap.add_argument("--json", action="store_true", help="print one JSON object (last stdout line block)")
    return ap


def usage_problem(a: CheckRequest) -> str | None:
    """The first argument that cannot make a check, as ``--flag VALUE: why; fix`` (None when all can).

    Checked before Ray starts: a bad argument must not cost a cluster start-up (or a ZeroDivisionError after one).
    """
    import math

    if a.expect_nodes < 1:
        return f"--expect-nodes {a.expect_nodes}: must be >= 1 (the GPU nodes the stack declares, e.g. 2)"
    if a.expect_gpus_per_node < 0:
        return f"--expect-gpus-per-node {a.expect_gpus_per_node}: must be >= 0 (0: no GPUs expected)"
    if a.expect_nics is not None and a.expect_nics < 1:
        return f"--expect-nics {a.expect_nics}: must be >= 1 (EFA interfaces per node, e.g. 32 on p5.48xlarge)"
    for flag, value in (("--wait-s", a.wait_s), ("--timeout-s", a.timeout_s)):
        if not (math.isfinite(value) and value > 0):
            return f"{flag} {value}: must be a number of seconds > 0, e.g. 600"
    if a.iters < 1:
        return f"--iters {a.iters}: must be >= 1 (timed calls per message size, default 5)"
    for flag, value in (("--min-bytes", a.min_bytes), ("--max-bytes", a.max_bytes)):
        if value is not None and not MIN_SWEEP_BYTES <= value <= MAX_SWEEP_BYTES:
            return (
                f"{flag} {value}: must be {MIN_SWEEP_BYTES}..{MAX_SWEEP_BYTES} bytes (one float32 up to 16 GiB), "
                "e.g. 1048576"
            )
    if a.min_bytes is not None and a.max_bytes is not None and a.min_bytes > a.max_bytes:
        return f"--min-bytes {a.min_bytes} is above --max-bytes {a.max_bytes}: swap them"
    for flag, value in (("--min-busbw-gbps", a.min_busbw_gbps), ("--efa-gbps", a.efa_gbps)):
        if value is not None and not (math.isfinite(value) and value >= 0):
            return f"{flag} {value}: must be a finite number >= 0, e.g. 40"
    if a.min_busbw_fraction is not None and not (
        math.isfinite(a.min_busbw_fraction) and 0 <= a.min_busbw_fraction <= 1
    ):
        return f"--min-busbw-fraction {a.min_busbw_fraction}: a fraction of the line rate, 0 to 1, e.g. 0.5"
    if a.preset is not None:
        if a.preset not in fsdp_shapes.PRESETS:
            return f"--preset {a.preset!r}: unknown model preset; choose from {', '.join(sorted(fsdp_shapes.PRESETS))}"
    if a.storage_path is not None and uri_problem(a.storage_path, "--storage-path"):
        return uri_problem(a.storage_path, "--storage-path")
    if a.report is not None and os.path.exists(a.report) and not os.path.isdir(a.report):
        return f"--report {a.report}: exists and is not a directory; name a directory (it is created if missing)"
    if a.manifest is not None and not a.manifest.lstrip().startswith("{"):
        if not os.path.isfile(a.manifest):
            return (
                f"--manifest {a.manifest!r}: neither JSON text nor a file; pass the image manifest as JSON, "
                "e.g. '{\"ray\": \"2.58.0\"}', or the path of a file holding it"
            )
    if a.manifest is not None and _probe is not None:
        try:
            _probe.parse_manifest(manifest_text(a.manifest))
        except (ValueError, OSError) as e:
            return str(e)
    return None


def manifest_text(value: str) -> str:
    """``--manifest`` is JSON text, or a file holding it."""
    if value.lstrip().startswith("{") or not os.path.isfile(value):
        return value
    with open(value, "rb") as f:
        return f.read().decode("utf-8", errors="replace")
