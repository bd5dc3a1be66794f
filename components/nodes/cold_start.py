"""How long a GPU node takes from zero to a Ray worker, part by part, with where each figure comes from.

Nothing here runs on AWS: a figure is either published (the source says where) or measured on this project's CPU
rehearsal (the source says how, ``measured_here``). ``high_s`` is what the budgets add up. The model is a function of
the stack's layout (:class:`Layout`: image size, where it is pulled from, whether the fabric proof waits for the pull),
so the same parts give the table docs/gpus.md ("Cold start") shows, the one ``ray-efa-eks plan`` prints for the
chosen instance type and image size, and the gate's default wait (:func:`wait_budget_s`: ``efaCheckWaitSeconds``
when unset, :class:`~.efa_check.Deadlines`), held together by tests/components/test_cold_start.py.

The pull rate comes from one published pair of figures for a 19.3 GB DLC pulled from private ECR: 4 min 44 s with
containerd's default pull, 2 min 13 s with the SOCI snapshotter's parallel pull and unpack (AWS Machine Learning
blog, "Reducing container cold start times using SOCI index on DLAMI and DLC", 2026). nodeadm's ``FastImagePull``
turns on exactly that parallel mode (awslabs/amazon-eks-ami nodeadm/internal/containerd/snapshotter/
soci-snapshotter.config.toml: ``[pull_modes.parallel_pull_unpack] enable = true``), and ignores the gate on small
instances, so the low figure is the parallel rate and the high one the default rate. No published figure gives
public ECR's rate into a VPC, so the layout without the account's registry is modelled at the same rates: what the
account's registry changes is priced (components/nodes/cost.py), not timed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

ANCHOR_IMAGE_GIB = 19.3e9 / 2**30
"""The anchor DLC, 19.3 GB, in GiB."""
DEFAULT_PULL_S_PER_GIB = (4 * 60 + 44) / ANCHOR_IMAGE_GIB
"""containerd's default pull of the anchor DLC from private ECR, per GiB (about 15.8 s)."""
PARALLEL_PULL_S_PER_GIB = (2 * 60 + 13) / ANCHOR_IMAGE_GIB
"""The SOCI snapshotter's parallel pull and unpack of the same image, per GiB (about 7.4 s)."""
PULL_SOURCE = (
    "AWS ML blog 'Reducing container cold start times using SOCI index on DLAMI and DLC' (2026): 19.3 GB "
    "DLC from private ECR in 4 m 44 s (default pull) and 2 m 13 s (SOCI parallel pull, what nodeadm's "
    "FastImagePull turns on)"
)
AGENT_IMAGE_GIB = 0.05
"""The node agent's slim Python image, compressed (python:3.12-slim: about 45 MB, its registry listing)."""
CA_INITIAL_BACKOFF_S = 300
"""Cluster Autoscaler's ``--initial-node-group-backoff-duration`` default, 5 min: after a node group's scale-up fails
(an EC2 launch error, or no node within max-node-provision-time) it tries that group again only after this
(cluster-autoscaler FAQ "What are the parameters to CA?", which the chart's values.yaml points to for defaults;
cluster-autoscaler/config/flags: ``5*time.Minute``)."""
WAIT_ROUND_S = 60


@dataclass(frozen=True)
class Part:
    """One step between a job asking for GPUs and its Ray worker joining, in seconds."""

    name: str
    low_s: int
    high_s: int
    source: str
    measured_here: bool = False
    mixed: bool = False
    """Two overlapping parts, one cited and one measured."""

    @property
    def basis(self) -> str:
        return "cited + measured" if self.mixed else "measured" if self.measured_here else "cited"


@dataclass(frozen=True)
class Layout:
    """What the model reads of a stack (StackConfig keys in parentheses)."""

    instance_type: str = "g6.12xlarge"
    """The GPU instance type (gpuInstanceType): shown; no published figure here differs between the types."""
    image_gib: float = 20
    """The DLC's compressed size (dlcImageGiB)."""
    fast_image_pull: bool = True
    """nodeadm's FastImagePull (gpuFastImagePull): the parallel-pull rate is the low figure."""
    account_registry: bool = True
    """Pulls from the account's ECR through the pull-through cache (ecrPullThroughCache)."""
    proof_beside_pull: bool = True
    """The node agent runs from its small image and a pre-pull DaemonSet pulls the DLC while the proof runs; false:
    the agent ran from the DLC, so the proof started only after the whole pull."""


BEFORE = Layout(account_registry=False, proof_beside_pull=False)
"""The default stack before the account's registry and the proof beside the pull."""

RAY_SEES = Part(
    "Ray autoscaler v2 sees the demand, KubeRay creates the worker pod",
    1,
    10,
    "Ray 2.58 autoscaler loop every AUTOSCALER_UPDATE_INTERVAL_S = 5 s (ray/autoscaler/_private/constants.py)",
)
CA_SEES = Part(
    "Cluster Autoscaler sees the pending pod and raises the node group",
    1,
    20,
    "scan-interval 10 s (cluster-autoscaler chart 9.59.0 values.yaml; Cluster Autoscaler FAQ)",
)
LAUNCH = Part(
    "EC2 launch, boot, nodeadm and EKS join (node Ready)",
    120,
    300,
    "KubeRay issue 4226: GPU nodes took 4-5 minutes; the Cluster Autoscaler gives up on a node after "
    "max-node-provision-time 15 min (chart values.yaml)",
)
PLUGINS_AND_PROOF = Part(
    "device plugins advertise GPUs and EFA; the node agent starts and proves the fabric",
    10,
    60,
    "measured here (benchmarks/worker_start.py, 5 runs at load 15-17 on the shared 2-core "
    "machine): the shipped agent starts (a fresh python -I importing node_check and "
    "efa_exporter) in 0.2-0.8 s and decides in 17-86 ms on a p5.48xlarge-shaped tree of 32 "
    "devices; the device plugin pods' start is not measured here (no cluster)",
    measured_here=True,
)
WORKER_START = Part(
    "Ray worker start (raylet joins the head)",
    2,
    15,
    "measured here (benchmarks/worker_start.py): a worker node joins a running local head in 2.2-4.3 "
    "s, the ray CLI starts in 0.6-3.2 s, on the shared 2-core machine at load 4-6 (5.2-5.4 s and "
    "4.4-5.5 s at load 15-17)",
    measured_here=True,
)
JOB_START = Part(
    "the job's own start (driver, runtime env, Ray Train workers, model) to its first step",
    10,
    30,
    "measured here: benchmarks/train_job (local main job, 36.7 s for the whole job) and "
    "benchmarks/gate_latency (10.7 s from Job start to verdict)",
    measured_here=True,
)
"""After the workers are up: what a submitted job adds before its first training step."""


def pull_part(gib: float, fast_image_pull: bool = True, name: str = "DLC image pull and unpack") -> Part:
    """Pulling ``gib`` GiB at the anchor's rates (low: parallel pull with FastImagePull, high: default pull)."""
    low = gib * (PARALLEL_PULL_S_PER_GIB if fast_image_pull else DEFAULT_PULL_S_PER_GIB)
    return Part(f"{name} ({gib:g} GiB)", math.floor(low), math.ceil(gib * DEFAULT_PULL_S_PER_GIB), PULL_SOURCE)


def overlap(a: Part, b: Part) -> Part:
    """Two parts that run at the same time: the longer of each figure."""
    return Part(
        f"{a.name}, while: {b.name}",
        max(a.low_s, b.low_s),
        max(a.high_s, b.high_s),
        f"{a.source}; {b.source}",
        a.measured_here and b.measured_here,
        mixed=a.measured_here != b.measured_here or a.mixed or b.mixed,
    )


def parts(layout: Layout = Layout()) -> tuple[Part, ...]:
    """From the job's request to its GPU worker in Ray, in order, for ``layout``."""
    dlc = pull_part(layout.image_gib, layout.fast_image_pull)
    if not layout.proof_beside_pull:  # the agent's pod waited for the DLC, then proved the node
        return RAY_SEES, CA_SEES, LAUNCH, dlc, PLUGINS_AND_PROOF, WORKER_START
    agent = pull_part(AGENT_IMAGE_GIB, layout.fast_image_pull, "node agent image pull")
    proof = Part(
        f"{agent.name}; then {PLUGINS_AND_PROOF.name}",
        agent.low_s + PLUGINS_AND_PROOF.low_s,
        agent.high_s + PLUGINS_AND_PROOF.high_s,
        PLUGINS_AND_PROOF.source,
        measured_here=True,
    )
    return RAY_SEES, CA_SEES, LAUNCH, overlap(dlc, proof), WORKER_START


def budget_s(path: tuple[Part, ...] | None = None) -> tuple[int, int]:
    """(sum of the low figures, sum of the high figures): a node from zero to a Ray worker."""
    path = parts() if path is None else path
    return sum(p.low_s for p in path), sum(p.high_s for p in path)


def first_step_s(layout: Layout = Layout()) -> tuple[int, int]:
    """From a job's request on an idle cluster (no GPU node) to its first training step."""
    low, high = budget_s(parts(layout))
    return low + JOB_START.low_s, high + JOB_START.high_s


def wait_budget_s(layout: Layout = Layout()) -> int:
    """The gate's wait for its GPU workers: the whole path at its high figures, plus one failed launch the Cluster
    Autoscaler retries after its backoff (the backoff, then its scan and the launch again), rounded up to a minute."""
    _, high = budget_s(parts(layout))
    retry = CA_INITIAL_BACKOFF_S + CA_SEES.high_s + LAUNCH.high_s
    return WAIT_ROUND_S * math.ceil((high + retry) / WAIT_ROUND_S)


def markdown_table(layout: Layout = Layout()) -> str:
    """The table docs/gpus.md shows for ``layout`` (a test holds the page to it)."""
    rows = ["| step | seconds | measured or cited | source |", "|---|---|---|---|"]
    rows += [f"| {p.name} | {p.low_s}-{p.high_s} | {p.basis} | {p.source} |" for p in parts(layout) + (JOB_START,)]
    return "\n".join(rows)


def summary_rows(
    instance_types: tuple[str, ...] = ("g6.12xlarge", "p5.48xlarge"),
    image_gib: float = 20,
    fast_image_pull: bool = True,
) -> list[tuple[str, str, tuple[int, int], int]]:
    """(instance type, "before"/"after", request to first step (low, high), the gate's wait) for each type."""
    now = Layout(image_gib=image_gib, fast_image_pull=fast_image_pull)
    then = replace(BEFORE, image_gib=image_gib, fast_image_pull=fast_image_pull)
    return [
        (t, label, first_step_s(replace(lay, instance_type=t)), wait_budget_s(replace(lay, instance_type=t)))
        for t in instance_types
        for label, lay in (("before", then), ("after", now))
    ]


def summary_table(**kw) -> str:
    """Request to first step, before and after the proof beside the pull, per instance type (docs/gpus.md)."""
    rows = ["| instance type | layout | request to first step | the model's wait budget |", "|---|---|---|---|"]
    rows += [
        f"| {t} | {label} | {lo}-{hi} s ({lo / 60:.1f}-{hi / 60:.1f} min) | {wait} s |"
        for t, label, (lo, hi), wait in summary_rows(**kw)
    ]
    return "\n".join(rows)


def plan_lines(layout: Layout, wait_s: int | None = None) -> list[str]:
    """What ``ray-efa-eks plan`` prints: each part of ``layout``'s path, its sum and the gate's wait (``wait_s``: the
    stack's efaCheckWaitSeconds; None: the model's budget)."""
    lo, hi = budget_s(parts(layout))
    first = first_step_s(layout)
    out = [
        f"cold start of a {layout.instance_type} from zero ({layout.image_gib:g} GiB DLC, "
        f"{'account ECR' if layout.account_registry else 'as given'}, FastImagePull "
        f"{'on' if layout.fast_image_pull else 'off'}): {lo}-{hi} s to a Ray worker, {first[0]}-{first[1]} s to "
        f"the first step; the gate waits "
        + (
            f"{wait_s} s (efaCheckWaitSeconds)"
            if wait_s is not None
            else f"{wait_budget_s(layout)} s (the model's budget)"
        )
    ]
    out += [f"  {p.low_s:>4}-{p.high_s:<4} s  {p.basis:<16}  {p.name}" for p in parts(layout) + (JOB_START,)]
    return out
