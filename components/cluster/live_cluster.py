"""The EKS cluster as EKS describes it now: what ``pulumi up`` changes *from* (reads only, before any resource).

A stack config says where the cluster should go; EKS says where it is. Two of EKS's rules depend on the difference,
so the program reads the live cluster during preview and update (ListClusters, then DescribeCluster and
DescribeNodegroup of the clusters and node groups that exist):

- a Kubernetes upgrade moves one minor version at a time and never down (EKS user guide, "Update existing cluster to
  new Kubernetes version": "you can update only one minor version at a time", "you can't downgrade");
- a cluster created with ``bootstrapClusterCreatorAdminPermissions`` holds an access entry for its creator that the
  stack did not make (EKS API reference, CreateAccessConfigRequest), so a second one for that principal is refused.

Reading the live cluster rather than a stack output or the caller: it is right whoever runs ``pulumi up``, after a
change made outside Pulumi, and on the first ``up`` after an upgrade of this library (the stack's old outputs hold
no version). A cluster that does not exist yet reads as None (nothing to compare with: a first deployment).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

UPDATE_CLUSTER_DOC = (
    "EKS user guide: Update existing cluster to new Kubernetes version",
    "https://docs.aws.amazon.com/eks/latest/userguide/update-cluster.html",
)
UPDATE_NODE_GROUP_DOC = (
    "EKS user guide: Update a managed node group for your cluster",
    "https://docs.aws.amazon.com/eks/latest/userguide/update-managed-node-group.html",
)


@dataclass(frozen=True)
class LiveCluster:
    """What DescribeCluster (and DescribeNodegroup per node group) answer for an existing cluster."""

    name: str
    version: str
    """The control plane's Kubernetes MAJOR.MINOR."""
    bootstrap_creator_admin: bool
    """``accessConfig.bootstrapClusterCreatorAdminPermissions`` at creation: EKS holds an admin entry for the
    principal that created the cluster (create-only: it never changes afterwards)."""
    node_group_versions: dict[str, str] = field(default_factory=dict)
    """EKS node group name -> its Kubernetes MAJOR.MINOR."""


def _minor(version: Any) -> str:
    parts = str(version or "").split(".")
    return ".".join(parts[:2])


def read_live_cluster(name: str) -> LiveCluster | None:
    """The cluster ``name`` as EKS describes it in the provider's account and region; None when it does not exist."""
    import pulumi_aws as aws

    if name not in (aws.eks.get_clusters().names or []):
        return None
    described = aws.eks.get_cluster(name=name)
    access = (described.access_configs or [None])[0]
    bootstrap = bool(access.bootstrap_cluster_creator_admin_permissions) if access is not None else True
    versions = {}
    for ng in sorted(aws.eks.get_node_groups(cluster_name=name).names or []):
        versions[ng] = _minor(aws.eks.get_node_group(cluster_name=name, node_group_name=ng).version)
    return LiveCluster(name, _minor(described.version), bootstrap, versions)


def _key(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def upgrade_problem(current: str, wanted: str) -> str | None:
    """Why EKS refuses to move a control plane from ``current`` to ``wanted`` (the order to follow), else None."""
    a, b = _key(current), _key(wanted)
    if b < a:
        return (
            f"the cluster runs Kubernetes {current}: EKS cannot downgrade a cluster ({UPDATE_CLUSTER_DOC[0]}, "
            f"{UPDATE_CLUSTER_DOC[1]}); set kubernetesVersion back to {current}"
        )
    if b[0] != a[0] or b[1] > a[1] + 1:
        steps = [f"{a[0]}.{m}" for m in range(a[1] + 1, b[1] + 1)] if b[0] == a[0] else [wanted]
        order = ", then ".join(f"set {s} and pulumi up" for s in steps)
        return (
            f"the cluster runs Kubernetes {current}: EKS updates one minor version at a time "
            f"({UPDATE_CLUSTER_DOC[0]}, {UPDATE_CLUSTER_DOC[1]}); {order} (each update moves the control "
            "plane, then the node groups)"
        )
    return None


def lagging_node_groups(live: LiveCluster) -> dict[str, str]:
    """Node groups on an older minor than the control plane (name -> version)."""
    return {ng: v for ng, v in live.node_group_versions.items() if v and _key(v) < _key(live.version)}


def lagging_warning(live: LiveCluster, wanted: str) -> str | None:
    """The warning for a control-plane upgrade while node groups still run an older minor (None when none do).

    A warning, not a refusal: the user guide says the managed nodes "must" be on the control plane's minor before
    it is updated, and in the same section that with kubelet 1.25 or newer the cluster can go up to three versions
    ahead of it; which one EKS enforces is not documented, so this stack does not refuse it.
    """
    behind = lagging_node_groups(live)
    if not behind or _key(wanted) <= _key(live.version):
        return None
    names = ", ".join(f"{ng} ({v})" for ng, v in sorted(behind.items()))
    return (
        f"kubernetesVersion {wanted}: node group(s) {names} still run an older minor than the control plane "
        f"{live.version}; EKS asks for the managed nodes on the control plane's minor before its next update "
        f"({UPDATE_CLUSTER_DOC[1]}). This update moves them to {wanted} after the control plane"
    )
