"""How long a GPU node takes from zero to a Ray worker, part by part, with where each figure comes from.

The deploy gate waits ``efaCheckWaitSeconds`` (default 1200 s) for ``gpuNodeCount`` GPU workers to join Ray, and
Ray's autoscaler gives a worker pod ``ALLOCATE_TIMEOUT_S`` (1800 s, components/ray_autoscaler.py) before it replaces
it; both must cover a node's whole path from zero. Nothing here runs on AWS: a figure is either published (the
source says where) or measured on this project's CPU rehearsal (the source says how). ``high_s`` is the figure the
budget adds up; docs/gpus.md ("Cold start") shows the same table, held to it by tests/components/test_cold_start.py.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Part:
    """One step between a job asking for GPUs and its Ray worker joining, in seconds."""

    name: str
    low_s: int
    high_s: int
    source: str
    measured_here: bool = False


PARTS: tuple[Part, ...] = (
    Part("Ray autoscaler v2 sees the demand, KubeRay creates the worker pod", 1, 10,
         "Ray 2.58 autoscaler loop every AUTOSCALER_UPDATE_INTERVAL_S = 5 s (ray/autoscaler/_private/constants.py)"),
    Part("Cluster Autoscaler sees the pending pod and raises the node group", 1, 20,
         "scan-interval 10 s (cluster-autoscaler chart 9.59.0 values.yaml; Cluster Autoscaler FAQ)"),
    Part("EC2 launch, boot, nodeadm and EKS join (node Ready)", 120, 300,
         "KubeRay issue 4226: GPU nodes took 4-5 minutes; the Cluster Autoscaler gives up on a node after "
         "max-node-provision-time 15 min (chart values.yaml)"),
    Part("device plugins advertise GPUs and EFA; the node proves its fabric", 10, 60,
         "the proof's decisions take 10-40 ms on a p5.48xlarge-shaped tree of 32 devices (efacheck/node_check.py "
         "decide, benchmarks/worker_start.py); the device plugin pods' start is not measured here (no cluster)"),
    Part("DLC image pull and unpack (tens of GB)", 60, 360,
         "AWS Machine Learning blog, 'Reducing container cold start times using SOCI index on DLAMI and DLC' "
         "(2026): standard pulls of 15-20 GB take 4-6 minutes per instance; FastImagePull and the 1000 MiB/s root "
         "volume aim below that (not measured: no AWS here)"),
    Part("Ray worker start (raylet joins the head)", 2, 15,
         "measured here (benchmarks/worker_start.py): a worker node joins a running local head in 2.2-4.3 s, the "
         "ray CLI starts in 0.6-3.2 s, on the shared 2-core machine at load 4-6", measured_here=True),
)
"""From the job's request to its GPU worker in Ray, in order (the gate's wait and Ray's allocate timeout)."""

JOB_START = Part("the job's own start (driver, runtime env, Ray Train workers, model) to its first step", 10, 30,
                 "measured here: benchmarks/train_job (local main job, 36.7 s for the whole job, 2026-12-05 09:57) and "
                 "benchmarks/gate_latency (10.7 s from Job start to verdict)", measured_here=True)
"""After the workers are up: what a submitted job adds before its first training step."""


def budget_s(parts: tuple[Part, ...] = PARTS) -> tuple[int, int]:
    """(sum of the low figures, sum of the high figures): a node from zero to a Ray worker."""
    return sum(p.low_s for p in parts), sum(p.high_s for p in parts)


def markdown_table(parts: tuple[Part, ...] = PARTS + (JOB_START,)) -> str:
    """The table docs/gpus.md shows (a test holds the page to it)."""
    rows = ["| step | seconds | source |", "|---|---|---|"]
    rows += [f"| {p.name} | {p.low_s}-{p.high_s} | {p.source} |" for p in parts]
    return "\n".join(rows)
