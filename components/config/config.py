"""Typed stack configuration: every key, its default and its validation.

All checks run in :meth:`StackConfig.validate`, before any resource is
registered, so a bad ``Pulumi.<stack>.yaml`` fails ``pulumi preview`` with a
message that names the key, the bad value and the fix.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import MISSING, dataclass, fields
from typing import Any

from ..nodes import cold_start
from . import values as v
from ..nodes.capacity import CAPACITY_BLOCK, CAPACITY_MODES, ON_DEMAND, config_problem
from .config_fields import key, live
from ..cluster.eks_versions import DEFAULT_VERSION, version_problem
from .errors import ArgError
from ..nodes.instances import CATALOGUE, REFUSED, InstanceType
from ..ray.kuberay_versions import chart_version_problem
from ..nodes.ebs_limits import (
    GP3_API_DOC,
    GP3_BASELINE_IOPS,
    GP3_BASELINE_THROUGHPUT,
    GP3_DOC,
    GP3_IOPS_PER_GIB,
    GP3_MAX_GIB,
    GP3_MAX_IOPS,
    GP3_MAX_THROUGHPUT,
    gp3_problem,
)
from ..storage.storage_rules import ENCRYPTIONS
from ..queues.team_queues import FORMAT as TEAM_FORMAT, TeamQueueText, parse_team, teams_problem
from .values import REGION as REGION_RE, image_reference_problem, image_tag  # noqa: F401 (their old home)

NAMESPACE = "ray-efa-eks"
SYSTEM_TYPES = tuple(n for n, t in CATALOGUE.items() if not t.gpus)
"""The catalogue's GPU-less types: what systemInstanceType takes."""
DEFAULT_DLC_IMAGE = "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1"
DEFAULT_RAY_VERSION = "2.58.0"
DEFAULT_NODE_AGENT_IMAGE = (
    "public.ecr.aws/docker/library/python:3.12.7-slim-bookworm"
    "@sha256:032c52613401895aa3d418a4c563d2d05f993bc3ecc065c8f4e2280978acd249"
)
"""The Docker official python image (ECR Public mirrors Docker Hub's ``library`` images), pinned by the digest
Renovate recorded for docker.io/library/python:3.12.7-slim-bookworm (github.com/nalabelle/build,
images/digests.Dockerfile). Not pulled from here: a registry that serves other bytes for the tag fails the pull on
the digest instead of running them; set nodeAgentImage to a digest you checked (docs/gpus.md, "Cold start")."""
DEFAULT_DLC_IMAGE_GIB = 20
"""The default DLC's size for the cold-start model (a Ray training DLC: 15-20 GB, AWS ML blog; docs/gpus.md)."""
DEFAULT_KUBERNETES_VERSION = DEFAULT_VERSION
"""The newest EKS version in components/cluster/eks_versions.py (standard support; the AL2023 NVIDIA AMI is built for it)."""


class ConfigError(ValueError):
    """A stack config value that cannot produce a working cluster."""

    def __init__(self, key: str, value: Any, fix: str):
        self.key = key
        self.value = value
        self.fix = fix
        name = key if ":" in key else f"{NAMESPACE}:{key}"
        if value is None:
            super().__init__(f"{name} is not set: {fix}")
        else:
            super().__init__(f"{name} = {value!r} is invalid: {fix}")


STACK_KEYS = {
    "mode": "gpuCapacity",
    "reservation": "gpuCapacityReservationId",
    "placement_group": "gpuPlacementGroupName",
    "instance_type": "gpuInstanceType",
    "availability_zone": "availabilityZone",
    "gpu_az": "availabilityZone",
    "node_count": "gpuNodeCount",
    "creator_arn": "clusterCreatorArn",
    "viewer_arns": "clusterViewerArns",
    "admin_arns": "clusterAdminArns",
}
"""The stack key behind each component argument an :class:`~.errors.ArgError` names (capacity, placement, cluster
access, the GPU node group): components speak in their own arguments, the stack in these keys."""


def stack_error(e: ArgError) -> ConfigError:
    """A component's ArgError in stack keys: the key of its argument, and a fix naming keys, not arguments."""
    named = e.renamed(STACK_KEYS)
    return ConfigError(named.name(e.arg), e.value, named.fix)


GPU_TEMPLATE_NOTE = (
    "a new launch template version; in a reservation or Capacity Block, park first ([Getting GPUs](gpus.md))"
)
"""The live-change note of every key that only changes the GPU launch template (root volume size, IOPS, throughput)."""


@dataclass
class StackConfig:
    """Stack settings under the ``ray-efa-eks:`` namespace; defaults = the reference layout."""

    region: str = "us-east-1"
    """AWS region of the stack (the `aws:region` config; default us-east-1)."""
    gpuInstanceType: str = key(
        "g6.12xlarge",
        allowed="a GPU type in [Supported instance types](instance-types.md)",
        live=live(
            "gpu-nodes",
            "ray-pods",
            "gate",
            "in-place",
            note="a node group's instance types cannot change in place: EKS replaces the group; the EFA "
            "device plugin's allow-list follows. In a reservation or Capacity Block, park first "
            "([Getting GPUs](gpus.md))",
        ),
    )
    """GPU worker instance type; must be in the catalogue (components/nodes/instances.py)."""
    gpuNodeCount: int = key(
        2,
        allowed="0 to 450 (an EKS managed node group's maximum); 1 with efa needs allowSingleEfaNode",
        live=live("scale", "gate", note="0 parks the GPU nodes and stops their cost; scaling rolls no node"),
    )
    """GPU nodes (one Ray worker pod each). 0 parks the GPU node group and stops its cost."""
    gpuWorkersToDelete: list[str] = key(
        factory=list,
        allowed="Ray worker pod names (kubectl -n ray get pods)",
        live=live(
            "none",
            note="alone it changes nothing (the rehearsal registers no change); lowering gpuNodeCount N -> M > 0 "
            "needs N - M names here (docs/upgrades.md: scaling the GPU "
            "fleet down); KubeRay deletes them and mutes the field in its recreate hash",
        ),
    )
    """Fixed GPU fleet (gpuScaleToZero false), lowering gpuNodeCount N -> M > 0: the N-M Ray worker pods KubeRay deletes (its workersToDelete), after their nodes were drained and terminated (docs/upgrades.md: scaling the GPU fleet down)."""
    systemInstanceType: str = key(
        "m7i.2xlarge",
        allowed=SYSTEM_TYPES,
        live=live("system-node", note="a node group's instance types cannot change in place: EKS replaces the group"),
    )
    """Node for the KubeRay operator and the GPU-less Ray head."""
    availabilityZone: str | None = key(
        None,
        allowed="an AZ of the region (REGIONa, REGIONb, ...); the reservation's or block's own AZ",
        live=live(
            "network",
            "gpu-nodes",
            "system-node",
            "in-place",
            note="moves the GPU subnet: AWS replaces a subnet whose AZ or CIDR changes, and EKS the node groups"
            " on it (every node), with the NAT gateway",
        ),
    )
    """GPU AZ. Unset: the first AZ of the region that offers gpuInstanceType."""
    kubernetesVersion: str = key(
        DEFAULT_KUBERNETES_VERSION,
        allowed="MAJOR.MINOR of a version EKS still supports (components/cluster/eks_versions.py)",
        live=live(
            "cluster",
            "system-node",
            "gpu-nodes",
            "gate",
            note="one minor version at a time and never down (refused before any change otherwise): EKS "
            "updates the control plane, then both node groups follow it and EKS replaces every node "
            "([Upgrades](upgrades.md))",
        ),
    )
    """EKS Kubernetes version (MAJOR.MINOR); one in extended support costs $0.60/h instead of $0.10/h (a warning), one past it is refused."""
    vpcCidr: str = key(
        "10.0.0.0/16",
        allowed="an IPv4 CIDR from /16 to /20",
        live=live(
            "network",
            "in-place",
            note="a VPC's primary CIDR cannot change, so the VPC and its subnets are replaced, and an EKS "
            "cluster cannot move to another VPC: deploy a new stack instead",
        ),
    )
    """VPC CIDR (a /20 or larger: four subnets are carved from it)."""
    efa: bool = key(
        True,
        live=live(
            "gpu-nodes",
            "ray-pods",
            "gate",
            "in-place",
            note="the GPU launch template gains or loses its EFA interfaces; the placement group, the EFA "
            "security-group rule, the EFA device plugin and the node agent (EFA exporter) follow; with "
            "false the gate checks NCCL over "
            "Socket ([The EFA gate](efa-gate.md))",
        ),
    )
    """Attach EFA interfaces and wire NCCL to the OFI plugin; false = plain TCP (for types without EFA)."""
    allowSingleEfaNode: bool = key(False, live=live("none", note="only lets gpuNodeCount 1 with efa pass validation"))
    """EFA on a single node has no peer to talk to; set true to allow it anyway."""
    dlcImage: str = key(
        DEFAULT_DLC_IMAGE,
        allowed="an image reference with a tag other than latest, or a digest",
        live=live(
            "ray-pods",
            "gate",
            "in-place",
            note="the re-run gate checks that every Ray pod runs the new image ([Upgrades](upgrades.md)); the "
            "node agent's EFA exporter DaemonSet rolls to it, one node at a time",
        ),
    )
    """The one image for head and workers: an explicit tag other than latest, or (recommended) a digest, repo@sha256:<64 hex>, so every node runs the bits the gate checked."""
    rayVersion: str = key(
        DEFAULT_RAY_VERSION,
        allowed="MAJOR.MINOR.PATCH of the Ray in dlcImage (>= 2.52 with rayTokenAuth)",
        live=live("ray-pods", "gate"),
    )
    """Ray version in the image (the RayCluster's rayVersion)."""
    endpointPublicAccessCidrs: list[str] = key(
        factory=lambda: ["0.0.0.0/0"],
        allowed="1 to 40 IPv4 CIDRs (the EKS quota; an IPv4 cluster takes no IPv6), e.g. 203.0.113.0/24",
        live=live("in-place", note="EKS updates the cluster's endpoint access in place"),
    )
    """Who may reach the EKS API endpoint; narrow this to your office/VPN ranges."""
    gpuRootVolumeGiB: int = key(200, allowed="100 to 65536", live=live("gpu-nodes", "gate", note=GPU_TEMPLATE_NOTE))
    """Root volume of the GPU nodes: the DLC image alone is tens of GB."""
    gpuRootVolumeIops: int = key(
        16000,
        allowed="3000 to 80000, at most 500 per GiB of gpuRootVolumeGiB (EBS gp3)",
        live=live("gpu-nodes", "gate", note=GPU_TEMPLATE_NOTE),
    )
    """Provisioned IOPS of the GPU nodes' gp3 root volume (3000 is the free baseline): a node from zero unpacks the tens-of-GB image onto it ([Cold start](gpus.md#cold-start))."""
    gpuRootVolumeThroughputMiBps: int = key(
        1000,
        allowed="125 to 2000, at most 0.25 per gpuRootVolumeIops (EBS gp3)",
        live=live("gpu-nodes", "gate", note=GPU_TEMPLATE_NOTE),
    )
    """Provisioned throughput (MiB/s) of the GPU nodes' gp3 root volume (125 is the free baseline); FastImagePull wants at least 600 ([Cold start](gpus.md#cold-start))."""
    gpuFastImagePull: bool = key(
        True,
        live=live(
            "gpu-nodes",
            "gate",
            note="the GPU launch template's user data changes: a new template version; in a reservation or "
            "Capacity Block, park first ([Getting GPUs](gpus.md))",
        ),
    )
    """nodeadm's FastImagePull feature gate on the GPU nodes (AL2023 EKS AMI, experimental): containerd pulls and unpacks the image's layers in parallel through the SOCI snapshotter ([Cold start](gpus.md#cold-start))."""
    ecrPullThroughCache: bool = key(
        True,
        live=live(
            "ray-pods",
            "gate",
            "in-place",
            note="adds or removes the ECR interface endpoints and the pull-through cache rule; every pod "
            "running a public.ecr.aws image is recreated from the other reference",
        ),
    )
    """Pull public.ecr.aws images (the DLC, the node agent) through the account's own ECR: a pull-through cache rule, ECR interface endpoints in the private subnets, and pod references rewritten to <account>.dkr.ecr.<region>.amazonaws.com/<stack>-ecr-public/...; images from any other registry are used as given ([Cold start](gpus.md#cold-start))."""
    nodeAgentImage: str = key(
        DEFAULT_NODE_AGENT_IMAGE,
        allowed="an image reference with Python 3.9 or newer as `python`, pinned by digest",
        live=live("in-place", note="the node agent DaemonSet rolls to it, one node at a time"),
    )
    """The node agent's image (EFA exporter and fabric proof, stdlib Python only): a small public slim Python image pinned by digest, so a joining node proves its fabric while the DLC is still being pulled ([Cold start](gpus.md#cold-start))."""
    dlcImageGiB: int = key(
        DEFAULT_DLC_IMAGE_GIB,
        allowed="1 to 200",
        live=live(
            "gate",
            note="the gate's default wait follows it (efaCheckWaitSeconds unset); nothing else but the cost notes",
        ),
    )
    """Compressed size of dlcImage in GiB, for the cold-start model (plan's table, the gate's default wait) and the per-pull cost notes."""
    systemRootVolumeGiB: int = key(
        100,
        allowed="100 to 65536",
        live=live("system-node", "gate", note="a new launch template version: the Ray head restarts with its node"),
    )
    """Root volume of the system node (>= 100): the Ray head and the EFA check Job pull the DLC image there (tens of GB, compressed layers plus the unpacked copy)."""
    ncclDebug: str = key("WARN", allowed=("VERSION", "WARN", "INFO", "ABORT", "TRACE"), live=live("ray-pods", "gate"))
    """NCCL_DEBUG for training pods (the EFA check always uses INFO; a training run's fabric capture replaces it with INFO, or TRACE, and a per-rank file: docs/training.md)."""
    kuberayChartVersion: str = key(
        "1.7.0",
        allowed="a kuberay-operator chart version MAJOR.MINOR.PATCH, 1.6.0 or newer (1.7.0 is the one tested)",
        live=live(
            "in-place",
            note="Helm upgrades the operator and the stack applies the version's CRDs first; KubeRay recreates "
            "no Ray pod for an operator version change (raycluster_controller.go "
            "shouldRecreatePodsForUpgrade), so bump it alone, not with a RayCluster change (refused)",
        ),
    )
    """KubeRay operator Helm chart version (>= 1.6.0: its RayCluster CRD has upgradeStrategy); its CRDs are applied with it (docs/upgrades.md)."""
    efaCheck: bool = key(
        True, live=live("gate", note="false deletes the gate Job: nothing proves EFA after `pulumi up`")
    )
    """Create the post-deploy EFA check Job."""
    efaCheckBlocking: bool = key(
        True, live=live("in-place", note="the gate Job's await annotation only; the gate does not run again")
    )
    """Make ``pulumi up`` wait for (and fail on) the EFA check Job."""
    efaCheckMinBusbwGbps: float = key(0.0, allowed=">= 0", live=live("gate"))
    """Fail the EFA check below this all-reduce bus bandwidth (GB/s); 0 = verdict only."""
    efaCheckMinBusbwFraction: float = key(0.0, allowed="0 to 1", live=live("gate"))
    """Fail the EFA check when large-message busbw is below this fraction of the type's EFA line rate; 0 = off."""
    efaCheckCompareSocket: bool = key(
        False, live=live("gate", note="the gate's deadlines grow with the second sweep ([The EFA gate](efa-gate.md))")
    )
    """Also sweep with NCCL forced onto TCP sockets and report the EFA/Socket ratio (doubles the sweep time)."""
    efaCheckStrictVersions: bool = key(False, live=live("gate"))
    """Fail the EFA check when a rank's torch/CUDA/NCCL/OFI/Ray version differs from the image manifest."""
    efaCheckWaitSeconds: int | None = key(
        None, allowed="60 to 86400 (a day); unset: the cold-start model's budget", live=live("gate")
    )
    """How long the EFA check waits for every GPU node to join Ray (boot, proof, image pull) before it fails. Unset: the cold-start model's budget for the stack's gpuInstanceType, dlcImageGiB, gpuFastImagePull and ecrPullThroughCache: the path from zero at its high figures plus one failed launch the Cluster Autoscaler retries after its 5-minute backoff (1320 s for the default stack, [Cold start](gpus.md#cold-start))."""
    efaCheckRequireCounters: bool = key(True, live=live("gate"))
    """With EFA: EFA hardware counters the check cannot read (host /sys view) make its verdict undetermined, not a quiet pass."""

    # -- GPU capacity (components/nodes/capacity.py) ------------------------------------------
    gpuCapacity: str = key(
        "on-demand",
        allowed=CAPACITY_MODES,
        live=live(
            "gpu-nodes",
            "scale",
            "ray-pods",
            "gate",
            "in-place",
            note="a new launch template version and placement: park the GPU nodes first ([Getting "
            "GPUs](gpus.md)); with gpuScaleToZero unset its default follows (on demand: true), so the "
            "node group's scaling and the Ray pods change and the gate re-runs too",
        ),
    )
    """on-demand | reservation (an ODCR) | capacity-block (Capacity Block for ML); the last two need availabilityZone."""
    gpuCapacityReservationId: str | None = key(
        None,
        allowed="cr- and 8 or 17 hex digits, or (reservation) a resource group ARN",
        live=live(
            "gpu-nodes",
            "gate",
            note="a new launch template version: park the GPU nodes first ([Getting GPUs](gpus.md))",
        ),
    )
    """reservation: the ODCR id (cr-...) or its resource group ARN; capacity-block: the block's id (cr-...)."""
    gpuPlacementGroupName: str | None = key(
        None,
        allowed="a placement group name (reservation only)",
        live=live(
            "gpu-nodes",
            "gate",
            note="a new launch template version: park the GPU nodes first ([Getting GPUs](gpus.md))",
        ),
    )
    """reservation only: the cluster placement group the ODCR was created in; unset: no placement group."""

    gpuScaleToZero: bool | None = key(
        None,
        allowed="true or false; unset: true with gpuCapacity on-demand, false with reservation; refused with "
        "capacity-block",
        live=live(
            "scale",
            "gpu-nodes",
            "ray-pods",
            "gate",
            "in-place",
            note="the GPU node group's own inputs change only by pulumi-eks ignoreScalingChanges (a Pulumi "
            "ignoreChanges on desiredSize, no node roll); true: the GPU node group runs 0..gpuNodeCount nodes (the Cluster Autoscaler sets its size) "
            "and Ray's autoscaler (v2) adds GPU workers when jobs ask and removes them when idle; false: "
            "gpuNodeCount nodes and workers run until parked. The RayCluster's worker group changes, so "
            "KubeRay recreates the Ray pods ([GPU nodes from zero](gpus.md))",
        ),
    )
    """GPU nodes follow the jobs: 0 when idle, up to gpuNodeCount when Ray asks (Cluster Autoscaler + Ray autoscaler v2); each node proves its EFA path before Ray may use it. Unset: true on demand, false with a reservation."""
    gpuIdleTimeoutSeconds: int = key(
        1200,
        allowed="60 to 86400 (a day)",
        live=live(
            "ray-pods",
            "gate",
            note="Ray's autoscaler removes a GPU worker idle this long (KubeRay idleTimeoutSeconds); the "
            "Cluster Autoscaler then removes its empty node ([GPU nodes from zero](gpus.md))",
        ),
    )
    """With gpuScaleToZero: seconds a GPU worker may sit idle before Ray's autoscaler removes it (then its node goes); long enough that back-to-back jobs reuse warm nodes."""

    # -- checkpoint storage and identity --------------------------------------------
    checkpointBucket: bool = key(
        True,
        live=live(
            "ray-pods",
            "gate",
            "in-place",
            note="false removes the bucket, its key and the pods' role from the stack; the bucket and key stay "
            "in AWS while checkpointRetainOnDelete is true",
        ),
    )
    """Create the S3 checkpoint bucket + pod identity role; false = pods get no storage (pass --storage-path)."""
    checkpointPrefix: str = key(
        "ray-train",
        allowed="S3 key segments of letters, digits and ! - _ . ' ( ) without a leading or trailing /, no . or .. segment, at most 512 bytes",
        live=live(
            "ray-pods",
            "gate",
            "in-place",
            note="the pods' role and storage path move to the new prefix; the re-run gate's storage proof tries it",
        ),
    )
    """Key prefix in the bucket; the pods' role may use this prefix only."""
    checkpointEncryption: str = key(
        "kms",
        allowed=ENCRYPTIONS,
        live=live(
            "in-place",
            note="new objects only: S3 does not re-encrypt existing checkpoints; kms to s3 removes the key from"
            " the stack (kept in AWS while checkpointRetainOnDelete is true)",
        ),
    )
    """kms: SSE-KMS with a dedicated key; s3: SSE-S3 (AES256)."""
    checkpointRetainOnDelete: bool = key(
        True,
        live=live(
            "in-place",
            note="takes effect only once a `pulumi up` recorded it, before `pulumi destroy` ([Deploy and "
            "teardown](deploy.md#teardown))",
        ),
    )
    """Keep the bucket, its key and its protection on `pulumi destroy`; false deletes them with every checkpoint (pulumi up after changing it, then destroy)."""
    checkpointNoncurrentVersionDays: int = key(30, allowed=">= 1", live=live("in-place"))
    """Expire overwritten/deleted checkpoint object versions after this many days."""

    # -- hardening (each a default with an escape hatch) ------------------------------
    endpointPublicAccess: bool = key(
        True, live=live("in-place", note="after false, Pulumi too must run from inside the VPC")
    )
    """false: private API endpoint only (run Pulumi from inside the VPC)."""
    imdsHopLimit: int = key(
        1,
        allowed="1 to 64",
        live=live("gpu-nodes", "system-node", "gate", note="both launch templates change: every node is replaced"),
    )
    """IMDSv2 hop limit on every node; 1 keeps pods away from the node role (they use Pod Identity)."""
    encryptRootVolumes: bool = key(
        True,
        live=live(
            "gpu-nodes",
            "system-node",
            "gate",
            note="both launch templates change: every node is replaced; volumes already created keep their encryption",
        ),
    )
    """Encrypt node root volumes (EBS, aws/ebs key)."""
    encryptSecrets: bool = key(
        True,
        live=live(
            "cluster",
            note="EKS cannot turn secrets encryption off once on (EKS user guide, \"Encrypt Kubernetes secrets "
            "with KMS on existing clusters\"): true to false needs a new cluster; false to true is done on "
            "the live cluster",
        ),
    )
    """Envelope-encrypt Kubernetes secrets with a KMS key."""
    networkPolicy: bool = key(True, live=live("in-place"))
    """NetworkPolicies on every pod of the Ray namespace: Ray pods reach each other, the gate the head's Jobs API, namespace monitoring the metrics ports; the rest is refused (VPC CNI enforcement on)."""
    rayTokenAuth: bool = key(
        True,
        live=live(
            "ray-pods",
            "gate",
            note="the token Secret stays; the pods and the gate's client switch mode together "
            "([Upgrades](upgrades.md))",
        ),
    )
    """Ray token auth (KubeRay authOptions, Ray >= 2.52): Jobs API, dashboard and GCS need the stack's token (output rayAuthToken)."""

    # -- observability (components/observability/observability.py) ------------------------------------
    observability: bool = key(
        True,
        live=live(
            "in-place",
            note="installs or removes the metrics stack (namespaces monitoring and gpu-metrics); false deletes "
            "Prometheus' local history ([Observability](observability.md))",
        ),
    )
    """Prometheus + Grafana (kube-prometheus-stack), DCGM exporter, scrape of the EFA exporter and Ray, fabric alert rules and dashboard."""
    metricsRetention: str = key(
        "15d",
        allowed="a Prometheus duration above zero (15d, 12h, 1w3d)",
        live=live(
            "in-place",
            note="Prometheus restarts; its TSDB is an emptyDir on the system node, capped at 8GB whatever the "
            "retention",
        ),
    )
    """How long Prometheus keeps samples locally."""
    metricsRemoteWriteUrl: str | None = key(
        None,
        allowed="an http(s) URL with a host (Amazon Managed Service for Prometheus: its workspace's remote_write URL)",
        live=live(
            "in-place",
            note="an aps-workspaces URL is signed with SigV4, for the region its host names, as the Prometheus "
            "service account: give it "
            "aps:RemoteWrite through a Pod Identity association ([Observability](observability.md#keeping-"
            "metrics-outside-the-cluster))",
        ),
    )
    """Also send every sample to this Prometheus remote-write endpoint (e.g. Amazon Managed Service for Prometheus)."""

    # -- access and egress (components/cluster/cluster.py, components/network/network.py) ----------------
    clusterAdminArns: list[str] = key(
        factory=list,
        allowed="IAM role or user ARNs",
        live=live(
            "in-place",
            note="adds or removes EKS access entries, the same whoever runs pulumi up; on a cluster created "
            "with EKS's creator entry, clusterCreatorArn first ([Upgrades](upgrades.md))",
        ),
    )
    """IAM role/user ARNs given EKS access entries with AmazonEKSClusterAdminPolicy (kubectl, port-forward to Ray)."""
    clusterViewerArns: list[str] = key(
        factory=list,
        allowed="IAM role or user ARNs, none also in clusterAdminArns",
        live=live("in-place", note="adds or removes EKS access entries"),
    )
    """IAM role/user ARNs given EKS access entries with AmazonEKSAdminViewPolicy (read-only kubectl, no port-forward)."""
    clusterCreatorArn: str | None = key(
        None,
        allowed="an IAM role or user ARN",
        live=live(
            "none",
            note="names the principal EKS already holds an admin entry for on a cluster created with it (a stack "
            "created with the creator entry, or with no admins listed), so the stack makes none for it "
            "([Upgrades](upgrades.md))",
        ),
    )
    """Only for a cluster created with EKS's creator admin entry (bootstrapClusterCreatorAdminPermissions): the IAM principal that created it; the stack makes no entry for it (docs/upgrades.md)."""
    s3GatewayEndpoint: bool = key(
        True,
        live=live(
            "in-place",
            note="false sends checkpoint and image traffic through the NAT gateway, billed per GB ([Cost](cost.md))",
        ),
    )
    """S3 gateway VPC endpoint on the private route tables: checkpoints and image layers skip the NAT's per-GB fee."""

    # -- team job queues (components/queues/job_queues.py, docs/team-jobs.md) -------------------
    jobQueues: list[str] = key(
        factory=list,
        allowed=f"teams, each {TEAM_FORMAT}",
        live=live(
            "in-place",
            note="installs or removes Kueue, the teams' namespaces, queues and roles; the KubeRay operator "
            "is upgraded in place to watch the team namespaces (no Ray pod is recreated). Emptying it "
            "uninstalls Kueue with its CRDs: queued RayJobs lose their queue ([Team jobs](team-jobs.md))",
        ),
    )
    """Team job queues (Kueue): each team gets a namespace, a LocalQueue and a ClusterQueue with a GPU quota in nodes or GPUs (`:borrow`: may use other teams' idle quota), and a role that reaches only its checkpoint prefix; empty: no Kueue, today's stack ([Team jobs](team-jobs.md))."""

    # -- construction ---------------------------------------------------------------

    @classmethod
    def from_mapping(cls, values: dict[str, Any], region: str = "us-east-1") -> "StackConfig":
        """Build from plain key -> value (strings as in Pulumi YAML are coerced)."""
        known = {f.name: f for f in fields(cls)}
        kwargs: dict[str, Any] = {"region": region}
        for key, raw in values.items():  # noqa: F402 (key(), the field helper, is used in the class body only)
            if key not in known or key == "region":
                valid = sorted(k for k in known if k != "region")
                near = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
                fix = f"unknown key; did you mean {near[0]}?" if near else "unknown key"
                raise ConfigError(key, raw, f"{fix} (known keys: {', '.join(valid)})")
            try:
                kwargs[key] = grammar(key).coerce(raw)
            except v.ValueProblem as p:
                raise ConfigError(key, raw if p.value is None else p.value, p.fix) from None
        cfg = cls(**kwargs)
        cfg.validate()
        return cfg

    @classmethod
    def from_pulumi(cls) -> "StackConfig":
        """Read the stack's config through the Pulumi SDK (``pulumi.Config``)."""
        import pulumi

        from pulumi.runtime.config import CONFIG, get_config_env

        region = pulumi.Config("aws").get("region") or "us-east-1"
        # Every key the stack sets in our namespace, so that a typo is refused instead of silently ignored.
        prefix = f"{NAMESPACE}:"
        every = {**get_config_env(), **CONFIG.get()}
        for key, why in unread_keys(every):  # noqa: F402 - another namespace: Pulumi accepts it (a warning)
            pulumi.log.warn(f"config {key} is never read by this program: {why}")
        values = {k[len(prefix) :]: v for k, v in every.items() if k.startswith(prefix)}
        return cls.from_mapping(values, region=region)

    # -- derived ----------------------------------------------------------------

    @property
    def scale_to_zero(self) -> bool:
        """gpuScaleToZero as set, else its default for gpuCapacity (on demand: true; reservation, block: false)."""
        if self.gpuScaleToZero is not None:
            return self.gpuScaleToZero
        return self.gpuCapacity == ON_DEMAND

    @property
    def cold_start_layout(self) -> cold_start.Layout:
        """What the cold-start model reads of this stack (components/nodes/cold_start.py)."""
        return cold_start.Layout(
            instance_type=self.gpuInstanceType,
            image_gib=self.dlcImageGiB,
            fast_image_pull=self.gpuFastImagePull,
            account_registry=self.ecrPullThroughCache,
        )

    @property
    def efa_check_wait_s(self) -> int:
        """efaCheckWaitSeconds, or the cold-start model's budget when unset."""
        if self.efaCheckWaitSeconds is not None:
            return self.efaCheckWaitSeconds
        return cold_start.wait_budget_s(self.cold_start_layout)

    @property
    def job_queues(self) -> list:
        """jobQueues parsed: one TeamQueue per team."""
        return [parse_team(t) for t in self.jobQueues]

    @property
    def gpu_type(self) -> InstanceType:
        return CATALOGUE[self.gpuInstanceType]

    @property
    def system_type(self) -> InstanceType:
        return CATALOGUE[self.systemInstanceType]

    # -- validation -------------------------------------------------------------

    def validate(self) -> None:
        """Raise ConfigError for the first setting that cannot work."""
        try:
            v.Region().check(self.region)
        except v.ValueProblem:
            raise ConfigError(
                "aws:region",
                self.region,
                "is not an AWS region name; set aws:region to one such as "
                "us-east-1 or eu-west-1 (aws ec2 describe-regions lists yours)",
            ) from None
        # Each value against its own grammar (components/config/values.py, GRAMMARS below), then the rules between keys.
        for f in fields(self):
            if f.name == "region":
                continue
            try:
                grammar(f.name).check(getattr(self, f.name))
            except v.ValueProblem as p:
                raise ConfigError(f.name, getattr(self, f.name) if p.value is None else p.value, p.fix) from None
        gpu = CATALOGUE.get(self.gpuInstanceType)
        if gpu is None:
            if self.gpuInstanceType in REFUSED:
                raise ConfigError(
                    "gpuInstanceType",
                    self.gpuInstanceType,
                    f"not supported: {REFUSED[self.gpuInstanceType]}; pick a supported type (docs/instance-types.md)",
                )
            raise ConfigError(
                "gpuInstanceType",
                self.gpuInstanceType,
                f"unknown instance type; supported: {', '.join(sorted(CATALOGUE))}",
            )
        if gpu.gpus == 0:
            gpu_types = sorted(n for n, t in CATALOGUE.items() if t.gpus)
            raise ConfigError(
                "gpuInstanceType", self.gpuInstanceType, f"has no GPU; pick one of {', '.join(gpu_types)}"
            )
        if self.efa and not gpu.efa_supported:
            raise ConfigError(
                "gpuInstanceType", self.gpuInstanceType, "does not support EFA; pick an EFA type or set efa: false"
            )
        if "@sha256:" not in self.nodeAgentImage:
            raise ConfigError(
                "nodeAgentImage",
                self.nodeAgentImage,
                "pin it by digest (IMAGE@sha256:<64 hex>): the agent removes the startup taint, so "
                "every node must run the bits that were checked",
            )
        if self.systemInstanceType not in CATALOGUE:
            raise ConfigError(
                "systemInstanceType",
                self.systemInstanceType,
                f"unknown instance type; supported: {', '.join(sorted(CATALOGUE))}",
            )
        if self.gpuWorkersToDelete and self.scale_to_zero:
            raise ConfigError(
                "gpuWorkersToDelete",
                self.gpuWorkersToDelete,
                "is for the fixed GPU fleet; with gpuScaleToZero Ray's autoscaler removes idle workers "
                "itself (it owns workersToDelete): remove it, or set gpuScaleToZero: false",
            )
        chart = chart_version_problem(self.kuberayChartVersion)
        if chart:
            raise ConfigError("kuberayChartVersion", self.kuberayChartVersion, chart)
        if self.efa and self.gpuNodeCount == 1 and not self.allowSingleEfaNode:
            raise ConfigError(
                "gpuNodeCount", 1, "EFA with one node has no peer; use >= 2, 0 to park, or set allowSingleEfaNode: true"
            )
        if self.availabilityZone is not None:
            if not re.fullmatch(rf"{re.escape(self.region)}[a-z]", self.availabilityZone):
                raise ConfigError(
                    "availabilityZone",
                    self.availabilityZone,
                    f"is not an AZ of region {self.region} (expected {self.region}a, {self.region}b, ...)",
                )
        capacity = config_problem(
            self.gpuCapacity,
            self.gpuCapacityReservationId,
            gpu,
            self.availabilityZone,
            self.region,
            self.gpuPlacementGroupName,
        )
        if capacity:
            raise stack_error(capacity)
        if self.gpuScaleToZero and self.gpuCapacity == CAPACITY_BLOCK:
            raise ConfigError(
                "gpuScaleToZero",
                True,
                "a Capacity Block is paid up front and its nodes stay fixed "
                "(EC2 holds the instances for the block); remove gpuScaleToZero or set it false",
            )
        version = re.fullmatch(r"(\d+)\.(\d+)", str(self.kubernetesVersion))
        if not version:
            raise ConfigError(
                "kubernetesVersion", self.kubernetesVersion, f"must be MAJOR.MINOR, e.g. {DEFAULT_VERSION}"
            )
        if version.group(1) == "1" and len(version.group(2)) == 1:
            # EKS never offered 1.0-1.9 (its first version was 1.10: docs.aws.amazon.com/eks/latest/userguide/
            # kubernetes-versions.html); "1.3" is what YAML makes of an unquoted 1.30 (a float, trailing 0 lost).
            raise ConfigError(
                "kubernetesVersion",
                self.kubernetesVersion,
                f"EKS has no Kubernetes {self.kubernetesVersion}; YAML reads an unquoted "
                f"{self.kubernetesVersion}0 as the number {self.kubernetesVersion}: quote it, "
                f'kubernetesVersion: "{self.kubernetesVersion}0"',
            )
        ended = version_problem(self.kubernetesVersion)
        if ended:
            raise ConfigError("kubernetesVersion", self.kubernetesVersion, ended)
        if self.rayTokenAuth:
            ray_minor = tuple(int(p) for p in self.rayVersion.split(".")[:2])
            if ray_minor < (2, 52):
                raise ConfigError(
                    "rayTokenAuth",
                    True,
                    f"needs Ray >= 2.52 (rayVersion is {self.rayVersion}); use a "
                    "newer dlcImage/rayVersion or set rayTokenAuth: false",
                )
        both = sorted(set(self.clusterAdminArns) & set(self.clusterViewerArns))
        if both:
            raise ConfigError(
                "clusterViewerArns",
                both[0],
                "is also in clusterAdminArns (one access entry per "
                "principal; admin already includes view): list it in one of the two",
            )
        gp3 = gp3_problem(self.gpuRootVolumeGiB, self.gpuRootVolumeIops, self.gpuRootVolumeThroughputMiBps)
        if gp3 and self.gpuRootVolumeIops > GP3_IOPS_PER_GIB * self.gpuRootVolumeGiB:
            raise ConfigError(
                "gpuRootVolumeIops",
                self.gpuRootVolumeIops,
                f"EC2 refuses {gp3} ({GP3_DOC}); lower gpuRootVolumeIops or raise gpuRootVolumeGiB to "
                f"at least {-(-self.gpuRootVolumeIops // GP3_IOPS_PER_GIB)}",
            )
        if gp3:
            raise ConfigError(
                "gpuRootVolumeThroughputMiBps",
                self.gpuRootVolumeThroughputMiBps,
                f"EC2 refuses {gp3} ({GP3_DOC}); lower gpuRootVolumeThroughputMiBps or raise "
                f"gpuRootVolumeIops to at least {self.gpuRootVolumeThroughputMiBps * 4}",
            )
        if self.jobQueues:
            queues = teams_problem(self.job_queues, gpu.gpus)
            if queues:
                raise ConfigError("jobQueues", *queues)
            if not self.checkpointBucket:
                raise ConfigError(
                    "jobQueues",
                    self.jobQueues,
                    "each team's jobs checkpoint under the team's own prefix "
                    "of the stack's bucket: set checkpointBucket: true, or remove jobQueues",
                )
        if self.endpointPublicAccess and not self.endpointPublicAccessCidrs:
            raise ConfigError(
                "endpointPublicAccessCidrs",
                self.endpointPublicAccessCidrs,
                "is empty while endpointPublicAccess is true; list CIDRs or set endpointPublicAccess: false",
            )


MAX_NODES_PER_NODE_GROUP = 450
"""EKS service quota 'Nodes per managed node group' (docs.aws.amazon.com/eks/latest/userguide/service-quotas.html)."""
LARGE_NODE_COUNT = 16
"""Above this many GPU nodes the stack warns with the hourly cost (a typo like 200 for 20 is expensive)."""


KEYS = frozenset(f.name for f in fields(StackConfig))
"""Every stack key (the component's inputs)."""
EKS_QUOTAS = "docs.aws.amazon.com/eks/latest/userguide/service-quotas.html"
PUBLIC_ACCESS_CIDRS_MAX = 40
"""EKS service quota 'Public endpoint access CIDR ranges per cluster' (EKS_QUOTAS; config-cluster-endpoint.html)."""
WAIT_MAX_S = 86400
"""efaCheckWaitSeconds ceiling: a day. The gate holds every GPU node and `pulumi up` waits the whole time; the wait
also lands in the Job's activeDeadlineSeconds and Pulumi's customTimeouts (a Go duration, 2^63 ns: ~292 years)."""
_INSTANCE_TYPE = v.Text(
    pattern=r"[a-z0-9-]+\.[a-z0-9-]+",
    max_len=64,
    fix="must be an EC2 instance type such as g6.12xlarge (family.size, lowercase)",
)

GRAMMARS: dict[str, v.Grammar] = {
    "region": v.Region(),
    "gpuInstanceType": _INSTANCE_TYPE,
    "gpuNodeCount": v.Int(
        0,
        MAX_NODES_PER_NODE_GROUP,
        example=2,
        below="must be >= 0 (0 parks the GPU nodes)",
        above=f"an EKS managed node group holds at most {MAX_NODES_PER_NODE_GROUP} nodes (EKS "
        "service quotas: 'Nodes per managed node group'); use fewer nodes",
    ),
    "systemInstanceType": _INSTANCE_TYPE,
    "availabilityZone": v.OrUnset(
        inner=v.Text(pattern=r"[a-z]{2}(-[a-z]+)+-\d+[a-z]", max_len=32, fix="must be an AZ name such as us-east-1a")
    ),
    "kubernetesVersion": v.Text(max_len=16, fix=f"must be MAJOR.MINOR, e.g. {DEFAULT_VERSION}"),
    "vpcCidr": v.Cidr(
        family=4,
        min_prefix=16,
        max_prefix=20,
        example="10.0.0.0/16",
        wrong_family="AWS VPCs take an IPv4 block from /16 (largest) to /28 (smallest), and this stack "
        "carves four subnets from it: use /16 to /20, e.g. 10.0.0.0/16",
        out_of_range="AWS VPCs take an IPv4 block from /16 (largest) to /28 (smallest) (VPC User Guide, "
        "'IPv4 VPC CIDR blocks'), and this stack carves four /22+ subnets from it: use /16 "
        "to /20, e.g. 10.0.0.0/16",
        source="docs.aws.amazon.com/vpc/latest/userguide/vpc-cidr-blocks.html",
    ),
    "efa": v.Bool(),
    "allowSingleEfaNode": v.Bool(),
    "dlcImage": v.ImageReference(),
    "rayVersion": v.Text(
        pattern=r"\d+\.\d+\.\d+(?:(?:a|b|rc)\d+|\.dev\d+|\.post\d+)?",
        max_len=32,
        fix="must be a Ray release version MAJOR.MINOR.PATCH (PEP 440, as ray.__version__), e.g. 2.58.0",
    ),
    "endpointPublicAccessCidrs": v.ListOf(
        item=v.Cidr(
            family=4,
            wrong_family="is IPv6: EKS takes no IPv6 CIDR blocks for the public endpoint of an IPv4 "
            "cluster (EKS API VpcConfigRequest.publicAccessCidrs), and this cluster is "
            "IPv4; list IPv4 CIDRs such as 203.0.113.0/24",
        ),
        max_items=PUBLIC_ACCESS_CIDRS_MAX,
        unique=True,
        max_reason=f"EKS quota 'Public endpoint access CIDR ranges per cluster', {EKS_QUOTAS}; merge ranges",
    ),
    "gpuRootVolumeGiB": v.Int(
        100,
        GP3_MAX_GIB,
        example=200,
        below="must be >= 100: the DLC image is tens of GB",
        above=f"gp3 volumes are 1..{GP3_MAX_GIB} GiB (EC2 LaunchTemplateEbsBlockDeviceRequest "
        "VolumeSize); use 100..65536, e.g. 200",
    ),
    "gpuRootVolumeIops": v.Int(
        GP3_BASELINE_IOPS,
        GP3_MAX_IOPS,
        example=16000,
        below=f"gp3 volumes have at least {GP3_BASELINE_IOPS} IOPS (the baseline; EC2 "
        "LaunchTemplateEbsBlockDeviceRequest Iops 'gp3: 3,000 - 80,000'); use 3000..80000",
        above=f"gp3 volumes take at most {GP3_MAX_IOPS} IOPS (EC2 "
        "LaunchTemplateEbsBlockDeviceRequest Iops 'gp3: 3,000 - 80,000'); use 3000..80000",
        source=GP3_API_DOC,
    ),
    "gpuRootVolumeThroughputMiBps": v.Int(
        GP3_BASELINE_THROUGHPUT,
        GP3_MAX_THROUGHPUT,
        example=1000,
        below=f"gp3 volumes have at least {GP3_BASELINE_THROUGHPUT} MiB/s (the baseline); use 125..2000",
        above=f"gp3 throughput is at most {GP3_MAX_THROUGHPUT} MiB/s (EC2 "
        "LaunchTemplateEbsBlockDeviceRequest Throughput); use 125..2000",
        source=GP3_API_DOC,
    ),
    "gpuFastImagePull": v.Bool(),
    "systemRootVolumeGiB": v.Int(
        100,
        GP3_MAX_GIB,
        example=100,
        below="must be >= 100: the Ray head and the EFA check pull the DLC image (tens of GB; "
        "containerd keeps the layers and the unpacked copy)",
        above=f"gp3 volumes are 1..{GP3_MAX_GIB} GiB (EC2 LaunchTemplateEbsBlockDeviceRequest "
        "VolumeSize); use 100..65536, e.g. 200",
    ),
    "ncclDebug": v.OneOf(
        choices=("VERSION", "WARN", "INFO", "ABORT", "TRACE"),
        case_insensitive=True,
        source="NCCL_DEBUG, docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html; NCCL reads "
        "any other value as no logging",
    ),
    "kuberayChartVersion": v.ChartVersion(),
    "gpuWorkersToDelete": v.ListOf(
        item=v.DnsSubdomain(),
        unique=True,
        max_items=MAX_NODES_PER_NODE_GROUP,
        max_reason="a node group holds at most 450 nodes, one worker pod each",
    ),
    "efaCheck": v.Bool(),
    "efaCheckBlocking": v.Bool(),
    "efaCheckMinBusbwGbps": v.Float(
        0.0, 100000.0, example=40.0, below="a bandwidth floor: must be >= 0 (0 = verdict only), e.g. 40"
    ),
    "efaCheckMinBusbwFraction": v.Float(
        0.0,
        1.0,
        example=0.5,
        below="a fraction of the EFA line rate: set 0 (off) to 1, e.g. 0.5",
        above="a fraction of the EFA line rate: set 0 (off) to 1, e.g. 0.5",
    ),
    "efaCheckCompareSocket": v.Bool(),
    "efaCheckStrictVersions": v.Bool(),
    "efaCheckWaitSeconds": v.OrUnset(
        inner=v.Seconds(
            60,
            WAIT_MAX_S,
            example=1320,
            below="GPU nodes need minutes to boot and pull the image: set at least 60 (unset: the cold-start model's "
            "budget, 1320 for the default stack)",
            above=f"at most {WAIT_MAX_S} (a day): the gate holds every GPU node while it waits and `pulumi up` waits "
            "with it; unset: the cold-start model's budget",
        )
    ),
    "efaCheckRequireCounters": v.Bool(),
    "gpuCapacity": v.Text(max_len=32, fix="must be on-demand, reservation or capacity-block"),
    "gpuCapacityReservationId": v.OrUnset(
        inner=v.Text(max_len=v.ARN_MAX, fix="an ODCR id (cr-...) or its resource group ARN")
    ),
    "gpuPlacementGroupName": v.OrUnset(
        inner=v.Text(
            max_len=255, fix="a placement group name: up to 255 ASCII characters (EC2 CreatePlacementGroup GroupName)"
        )
    ),
    "gpuScaleToZero": v.OrUnset(inner=v.Bool()),
    "gpuIdleTimeoutSeconds": v.Seconds(
        60,
        WAIT_MAX_S,
        example=1200,
        below="Ray's autoscaler needs a worker idle at least 60 s before removing it; "
        "set 60 or more (default 1200: back-to-back jobs reuse warm nodes)",
        above=f"at most {WAIT_MAX_S} (a day); to keep GPU nodes always up set gpuScaleToZero: false instead",
    ),
    "checkpointBucket": v.Bool(),
    "checkpointPrefix": v.S3KeyPrefix(),
    "checkpointEncryption": v.OneOf(choices=ENCRYPTIONS),
    "checkpointRetainOnDelete": v.Bool(),
    "checkpointNoncurrentVersionDays": v.Int(
        1,
        2**31 - 1,
        example=30,
        below="must be >= 1",
        source="S3 NoncurrentVersionExpiration NoncurrentDays: a positive integer",
    ),
    "endpointPublicAccess": v.Bool(),
    "imdsHopLimit": v.Int(
        1,
        64,
        example=1,
        below="must be 1..64; 1 blocks pods from IMDS, 2 allows them",
        above="must be 1..64 (EC2 HttpPutResponseHopLimit); 1 blocks pods from IMDS, 2 allows them",
    ),
    "encryptRootVolumes": v.Bool(),
    "encryptSecrets": v.Bool(),
    "networkPolicy": v.Bool(),
    "rayTokenAuth": v.Bool(),
    "clusterAdminArns": v.ListOf(item=v.PrincipalArn(), max_items=1000),
    "clusterViewerArns": v.ListOf(item=v.PrincipalArn(), max_items=1000),
    "clusterCreatorArn": v.OrUnset(inner=v.PrincipalArn()),
    "s3GatewayEndpoint": v.Bool(),
    "ecrPullThroughCache": v.Bool(),
    "nodeAgentImage": v.ImageReference(),
    "dlcImageGiB": v.Int(1, 200, example=20),
    "observability": v.Bool(),
    "metricsRetention": v.PrometheusDuration(),
    "metricsRemoteWriteUrl": v.OrUnset(inner=v.RemoteWriteUrl()),
    "jobQueues": v.ListOf(item=TeamQueueText(), max_items=100, max_reason="one ClusterQueue per team"),
}
"""Each StackConfig key's grammar (components/config/values.py). A new key gets one here; until it does it takes the
plain grammar of its default's type (:func:`grammar`), which bounds nothing service-specific."""


def grammar(key: str) -> v.Grammar:
    """The grammar of StackConfig key ``key``: its GRAMMARS entry, else the plain one of its default's type."""
    if key in GRAMMARS:
        return GRAMMARS[key]
    f = next((f for f in fields(StackConfig) if f.name == key), None)
    default = None if f is None else (f.default_factory() if f.default_factory is not MISSING else f.default)
    if isinstance(default, bool):
        return v.Bool()
    if isinstance(default, int):
        return v.Int(-(2**31), 2**31 - 1, example=default)
    if isinstance(default, float):
        return v.Float(-1e300, 1e300, example=default)
    if isinstance(default, list):
        return v.ListOf()
    if default is None:
        return v.OrUnset(inner=v.Text())
    return v.Text()


def unread_keys(keys: Any) -> list[tuple[str, str]]:
    """(key, why) for config keys that look meant for this stack but sit where it never reads them.

    Pulumi accepts any ``namespace:key`` (a provider's keys live in its namespace), so these are warnings: a stack key
    under another namespace (``aws:gpuNodeCount``), or a namespace one typo away from ours (``ray-efa-ek:...``).
    Keys of this namespace that are not stack keys are refused by :meth:`StackConfig.from_mapping`.
    """
    out = []
    for key in keys:  # noqa: F402 (key(), the field helper, is used in the class body only)
        ns, sep, name = str(key).partition(":")
        if not sep or ns == NAMESPACE or key == "aws:region":
            continue
        if name in KEYS:
            out.append((key, f"the {ns} namespace holds no {name}; this stack reads {NAMESPACE}:{name}"))
        elif difflib.SequenceMatcher(None, ns.lower(), NAMESPACE).ratio() >= 0.75:
            near = difflib.get_close_matches(name, sorted(KEYS), n=1, cutoff=0.6)
            out.append(
                (key, f"namespace {ns!r} is not {NAMESPACE!r}; did you mean {NAMESPACE}:{near[0] if near else name}?")
            )
    return out
