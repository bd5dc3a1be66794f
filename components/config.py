"""Typed stack configuration: every key, its default and its validation.

All checks run in :meth:`StackConfig.validate`, before any resource is
registered, so a bad ``Pulumi.<stack>.yaml`` fails ``pulumi preview`` with a
message that names the key, the bad value and the fix.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import math
import re
from dataclasses import MISSING, dataclass, fields
from typing import Any

from .capacity import CAPACITY_MODES, config_problem
from .config_fields import key, live
from .eks_versions import DEFAULT_VERSION, version_problem
from .instances import CATALOGUE, REFUSED, InstanceType
from .storage_rules import ENCRYPTIONS, check_prefix

NAMESPACE = "ray-efa-eks"
SYSTEM_TYPES = tuple(n for n, t in CATALOGUE.items() if not t.gpus)
"""The catalogue's GPU-less types: what systemInstanceType takes."""
DEFAULT_DLC_IMAGE = "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1"
DEFAULT_RAY_VERSION = "2.58.0"
DEFAULT_KUBERNETES_VERSION = DEFAULT_VERSION
"""The newest EKS version in components/eks_versions.py (standard support; the AL2023 NVIDIA AMI is built for it)."""


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


# The OCI distribution reference grammar (distribution/reference, reference.go and regexp.go; the same grammar the
# kubelet/containerd parse an image with): [domain[:port]/]path[:tag][@digest], path components lowercase
# alphanumerics joined by '.', '_', '__' or '-'s, tags [\w][\w.-]{0,127}, the name at most 255 characters.
_ALNUM = r"[a-z0-9]+"
_SEP = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEP}{_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
_NAME = rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_REFERENCE = re.compile(rf"(?P<name>{_NAME})(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?")
NAME_MAX = 255
"""distribution/reference: ``NameTotalLengthMax``."""


def image_reference_problem(image: str) -> str | None:
    """Why ``image`` is no OCI image reference (None when it is one), by the distribution grammar above."""
    if not isinstance(image, str) or not image:
        return "must be an image reference such as public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1"
    m = IMAGE_REFERENCE.fullmatch(image)
    if m is None:
        name, _, tag = image.rpartition("@")[0].rpartition(":") if "@" in image else image.rpartition(":")
        if tag and "/" not in tag and re.fullmatch(_NAME, name) and not re.fullmatch(_TAG, tag):
            return (f"the tag {tag[:40]!r}{'...' if len(tag) > 40 else ''} is not a valid tag (letters, digits, "
                    "'_', '.', '-', at most 128 characters, not starting with '.' or '-')")
        return ("is not an image reference (OCI distribution grammar: [registry[:port]/]lowercase/path[:tag]"
                "[@sha256:digest], no spaces or uppercase in the path), e.g. "
                "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1")
    if len(m.group("name")) > NAME_MAX:
        return f"the repository name is {len(m.group('name'))} characters; references allow at most {NAME_MAX}"
    return None


def image_tag(image: str) -> str | None:
    """Tag of ``repo[:port]/name:tag`` (None when untagged or pinned only by digest)."""
    last = image.rsplit("/", 1)[-1]
    if "@" in last:
        return None
    return last.split(":", 1)[1] if ":" in last else None


@dataclass
class StackConfig:
    """Stack settings under the ``ray-efa-eks:`` namespace; defaults = the reference layout."""

    region: str = "us-east-1"
    """AWS region of the stack (the `aws:region` config; default us-east-1)."""
    gpuInstanceType: str = key(
        "g6.12xlarge", allowed="a GPU type in [Supported instance types](instance-types.md)",
        live=live("gpu-nodes", "ray-pods", "gate", "in-place",
                  note="a node group's instance types cannot change in place: EKS replaces the group; the EFA "
                       "device plugin's allow-list follows. In a reservation or Capacity Block, park first "
                       "([Getting GPUs](gpus.md))"))
    """GPU worker instance type; must be in the catalogue (components/instances.py)."""
    gpuNodeCount: int = key(
        2, allowed="0 to 450 (an EKS managed node group's maximum); 1 with efa needs allowSingleEfaNode",
        live=live("scale", "gate",
                  note="0 parks the GPU nodes and stops their cost; scaling rolls no node"))
    """GPU nodes (one Ray worker pod each). 0 parks the GPU node group and stops its cost."""
    systemInstanceType: str = key(
        "m7i.xlarge", allowed=SYSTEM_TYPES,
        live=live("system-node",
                  note="a node group's instance types cannot change in place: EKS replaces the group"))
    """Node for the KubeRay operator and the GPU-less Ray head."""
    availabilityZone: str | None = key(
        None, allowed="an AZ of the region (REGIONa, REGIONb, ...); the reservation's or block's own AZ",
        live=live("network", "gpu-nodes", "system-node", "in-place",
                  note="moves the GPU subnet: AWS replaces a subnet whose AZ or CIDR changes, and EKS the node groups"
                       " on it (every node), with the NAT gateway"))
    """GPU AZ. Unset: the first AZ of the region that offers gpuInstanceType."""
    kubernetesVersion: str = key(
        DEFAULT_KUBERNETES_VERSION, allowed="MAJOR.MINOR of a version EKS still supports (components/eks_versions.py)",
        live=live("in-place",
                  note="EKS upgrades the control plane in place, one minor version at a time and never down; the node"
                       " groups' inputs do not change"))
    """EKS Kubernetes version (MAJOR.MINOR); one in extended support costs $0.60/h instead of $0.10/h (a warning), one past it is refused."""
    vpcCidr: str = key(
        "10.0.0.0/16", allowed="an IPv4 CIDR from /16 to /20",
        live=live("network",
                  note="a VPC's primary CIDR cannot change: AWS replaces the VPC and with it the subnets, the EKS "
                       "cluster and every node; deploy a new stack instead"))
    """VPC CIDR (a /20 or larger: four subnets are carved from it)."""
    efa: bool = key(
        True,
        live=live("gpu-nodes", "ray-pods", "gate", "in-place",
                  note="the GPU launch template gains or loses its EFA interfaces; the placement group, the EFA "
                       "security-group rule and the EFA device plugin follow; with false the gate checks NCCL over "
                       "Socket ([The EFA gate](efa-gate.md))"))
    """Attach EFA interfaces and wire NCCL to the OFI plugin; false = plain TCP (for types without EFA)."""
    allowSingleEfaNode: bool = key(
        False,
        live=live("none",
                  note="only lets gpuNodeCount 1 with efa pass validation"))
    """EFA on a single node has no peer to talk to; set true to allow it anyway."""
    dlcImage: str = key(
        DEFAULT_DLC_IMAGE, allowed="an image reference with a tag other than latest, or a digest",
        live=live("ray-pods", "gate",
                  note="the re-run gate checks that every Ray pod runs the new image ([Upgrades](upgrades.md))"))
    """The one image for head and workers; must carry an explicit tag other than latest."""
    rayVersion: str = key(
        DEFAULT_RAY_VERSION, allowed="MAJOR.MINOR.PATCH of the Ray in dlcImage (>= 2.52 with rayTokenAuth)",
        live=live("ray-pods", "gate"))
    """Ray version in the image (the RayCluster's rayVersion)."""
    endpointPublicAccessCidrs: list[str] = key(
        factory=lambda: ["0.0.0.0/0"], allowed="CIDRs, e.g. 203.0.113.0/24",
        live=live("in-place",
                  note="EKS updates the cluster's endpoint access in place"))
    """Who may reach the EKS API endpoint; narrow this to your office/VPN ranges."""
    gpuRootVolumeGiB: int = key(
        200, allowed="100 to 16384",
        live=live("gpu-nodes",
                  note="a new launch template version; in a reservation or Capacity Block, park first ([Getting "
                       "GPUs](gpus.md))"))
    """Root volume of the GPU nodes: the DLC image alone is tens of GB."""
    systemRootVolumeGiB: int = key(
        100, allowed="100 to 16384",
        live=live("system-node",
                  note="a new launch template version: the Ray head restarts with its node"))
    """Root volume of the system node (>= 100): the Ray head and the EFA check Job pull the DLC image there (tens of GB, compressed layers plus the unpacked copy)."""
    ncclDebug: str = key(
        "WARN", allowed="an NCCL_DEBUG level: VERSION, WARN, INFO or TRACE (not checked)",
        live=live("ray-pods", "gate"))
    """NCCL_DEBUG for training pods (the EFA check always uses INFO)."""
    kuberayChartVersion: str = key(
        "1.7.0", allowed="a kuberay-operator chart version (1.7.0 is the one tested)",
        live=live("in-place",
                  note="Helm upgrades the operator; KubeRay does not recreate Ray pods for an operator version change"
                       " (raycluster_controller.go shouldRecreatePodsForUpgrade), and Helm does not upgrade the CRDs"))
    """KubeRay operator Helm chart version."""
    efaCheck: bool = key(
        True,
        live=live("gate",
                  note="false deletes the gate Job: nothing proves EFA after `pulumi up`"))
    """Create the post-deploy EFA check Job."""
    efaCheckBlocking: bool = key(
        True,
        live=live("in-place",
                  note="the gate Job's await annotation only; the gate does not run again"))
    """Make ``pulumi up`` wait for (and fail on) the EFA check Job."""
    efaCheckMinBusbwGbps: float = key(
        0.0, allowed=">= 0",
        live=live("gate"))
    """Fail the EFA check below this all-reduce bus bandwidth (GB/s); 0 = verdict only."""
    efaCheckMinBusbwFraction: float = key(
        0.0, allowed="0 to 1",
        live=live("gate"))
    """Fail the EFA check when large-message busbw is below this fraction of the type's EFA line rate; 0 = off."""
    efaCheckCompareSocket: bool = key(
        False,
        live=live("gate",
                  note="the gate's deadlines grow with the second sweep ([The EFA gate](efa-gate.md))"))
    """Also sweep with NCCL forced onto TCP sockets and report the EFA/Socket ratio (doubles the sweep time)."""
    efaCheckStrictVersions: bool = key(
        False,
        live=live("gate"))
    """Fail the EFA check when a rank's torch/CUDA/NCCL/OFI/Ray version differs from the image manifest."""
    efaCheckWaitSeconds: int = key(
        1200, allowed=">= 60",
        live=live("gate"))
    """How long the EFA check waits for every GPU node to join Ray (boot + image pull) before it fails."""
    efaCheckRequireCounters: bool = key(
        True,
        live=live("gate"))
    """With EFA: EFA hardware counters the check cannot read (host /sys view) make its verdict undetermined, not a quiet pass."""

    # -- GPU capacity (components/capacity.py) ------------------------------------------
    gpuCapacity: str = key(
        "on-demand", allowed=CAPACITY_MODES,
        live=live("gpu-nodes", "in-place",
                  note="a new launch template version and placement: park the GPU nodes first ([Getting "
                       "GPUs](gpus.md))"))
    """on-demand | reservation (an ODCR) | capacity-block (Capacity Block for ML); the last two need availabilityZone."""
    gpuCapacityReservationId: str | None = key(
        None, allowed="cr- and 8 or 17 hex digits, or (reservation) a resource group ARN",
        live=live("gpu-nodes",
                  note="a new launch template version: park the GPU nodes first ([Getting GPUs](gpus.md))"))
    """reservation: the ODCR id (cr-...) or its resource group ARN; capacity-block: the block's id (cr-...)."""
    gpuPlacementGroupName: str | None = key(
        None, allowed="a placement group name (reservation only)",
        live=live("gpu-nodes",
                  note="a new launch template version: park the GPU nodes first ([Getting GPUs](gpus.md))"))
    """reservation only: the cluster placement group the ODCR was created in; unset: no placement group."""

    # -- checkpoint storage and identity --------------------------------------------
    checkpointBucket: bool = key(
        True,
        live=live("ray-pods", "gate", "in-place",
                  note="false removes the bucket, its key and the pods' role from the stack; the bucket and key stay "
                       "in AWS while checkpointRetainOnDelete is true"))
    """Create the S3 checkpoint bucket + pod identity role; false = pods get no storage (pass --storage-path)."""
    checkpointPrefix: str = key(
        "ray-train", allowed="S3 key segments without a leading or trailing /",
        live=live("ray-pods", "in-place",
                  note="the pods' role and storage path move to the new prefix; the gate is not re-run, so its "
                       "storage proof has not tried the new prefix"))
    """Key prefix in the bucket; the pods' role may use this prefix only."""
    checkpointEncryption: str = key(
        "kms", allowed=ENCRYPTIONS,
        live=live("in-place",
                  note="new objects only: S3 does not re-encrypt existing checkpoints; kms to s3 removes the key from"
                       " the stack (kept in AWS while checkpointRetainOnDelete is true)"))
    """kms: SSE-KMS with a dedicated key; s3: SSE-S3 (AES256)."""
    checkpointRetainOnDelete: bool = key(
        True,
        live=live("in-place",
                  note="takes effect only once a `pulumi up` recorded it, before `pulumi destroy` ([Deploy and "
                       "teardown](deploy.md#teardown))"))
    """Keep the bucket, its key and its protection on `pulumi destroy`; false deletes them with every checkpoint (pulumi up after changing it, then destroy)."""
    checkpointNoncurrentVersionDays: int = key(
        30, allowed=">= 1",
        live=live("in-place"))
    """Expire overwritten/deleted checkpoint object versions after this many days."""

    # -- hardening (each a default with an escape hatch) ------------------------------
    endpointPublicAccess: bool = key(
        True,
        live=live("in-place",
                  note="after false, Pulumi too must run from inside the VPC"))
    """false: private API endpoint only (run Pulumi from inside the VPC)."""
    imdsHopLimit: int = key(
        1, allowed="1 to 64",
        live=live("gpu-nodes", "system-node",
                  note="both launch templates change: every node is replaced"))
    """IMDSv2 hop limit on every node; 1 keeps pods away from the node role (they use Pod Identity)."""
    encryptRootVolumes: bool = key(
        True,
        live=live("gpu-nodes", "system-node",
                  note="both launch templates change: every node is replaced; volumes already created keep their "
                       "encryption"))
    """Encrypt node root volumes (EBS, aws/ebs key)."""
    encryptSecrets: bool = key(
        True,
        live=live("cluster",
                  note="EKS cannot turn secrets encryption off once on (EKS user guide, \"Encrypt Kubernetes secrets "
                       "with KMS on existing clusters\"): true to false needs a new cluster; false to true is done on "
                       "the live cluster"))
    """Envelope-encrypt Kubernetes secrets with a KMS key."""
    networkPolicy: bool = key(
        True,
        live=live("in-place"))
    """NetworkPolicies on every pod of the Ray namespace: Ray pods reach each other, the gate the head's Jobs API, namespace monitoring the metrics ports; the rest is refused (VPC CNI enforcement on)."""
    rayTokenAuth: bool = key(
        True,
        live=live("ray-pods", "gate",
                  note="the token Secret stays; the pods and the gate's client switch mode together "
                       "([Upgrades](upgrades.md))"))
    """Ray token auth (KubeRay authOptions, Ray >= 2.52): Jobs API, dashboard and GCS need the stack's token (output rayAuthToken)."""

    # -- access and egress (components/cluster.py, components/network.py) ----------------
    clusterAdminArns: list[str] = key(
        factory=list, allowed="IAM role or user ARNs",
        live=live("in-place",
                  note="adds or removes EKS access entries"))
    """IAM role/user ARNs given EKS access entries with AmazonEKSClusterAdminPolicy (kubectl, port-forward to Ray)."""
    clusterViewerArns: list[str] = key(
        factory=list, allowed="IAM role or user ARNs, none also in clusterAdminArns",
        live=live("in-place",
                  note="adds or removes EKS access entries"))
    """IAM role/user ARNs given EKS access entries with AmazonEKSAdminViewPolicy (read-only kubectl, no port-forward)."""
    s3GatewayEndpoint: bool = key(
        True,
        live=live("in-place",
                  note="false sends checkpoint and image traffic through the NAT gateway, billed per GB "
                       "([Cost](cost.md))"))
    """S3 gateway VPC endpoint on the private route tables: checkpoints and image layers skip the NAT's per-GB fee."""

    # -- construction ---------------------------------------------------------------

    @classmethod
    def from_mapping(cls, values: dict[str, Any], region: str = "us-east-1") -> "StackConfig":
        """Build from plain key -> value (strings as in Pulumi YAML are coerced)."""
        known = {f.name: f for f in fields(cls)}
        kwargs: dict[str, Any] = {"region": region}
        for key, raw in values.items():
            if key not in known or key == "region":
                valid = sorted(k for k in known if k != "region")
                near = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
                fix = f"unknown key; did you mean {near[0]}?" if near else "unknown key"
                raise ConfigError(key, raw, f"{fix} (known keys: {', '.join(valid)})")
            f = known[key]
            default = f.default_factory() if f.default_factory is not MISSING else f.default
            kwargs[key] = _coerce(key, raw, default)
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
        values = {k[len(prefix):]: v for k, v in {**get_config_env(), **CONFIG.get()}.items() if k.startswith(prefix)}
        return cls.from_mapping(values, region=region)

    # -- derived ----------------------------------------------------------------

    @property
    def gpu_type(self) -> InstanceType:
        return CATALOGUE[self.gpuInstanceType]

    @property
    def system_type(self) -> InstanceType:
        return CATALOGUE[self.systemInstanceType]

    # -- validation -------------------------------------------------------------

    def validate(self) -> None:
        """Raise ConfigError for the first setting that cannot work."""
        # AWS region names: <area>-<direction>-<n> (us-east-1, us-gov-west-1, ap-southeast-2, cn-north-1); see
        # https://docs.aws.amazon.com/global-infrastructure/latest/regions/aws-regions.html
        if not (isinstance(self.region, str) and REGION_RE.fullmatch(self.region)):
            raise ConfigError("aws:region", self.region, "is not an AWS region name; set aws:region to one such as "
                              "us-east-1 or eu-west-1 (aws ec2 describe-regions lists yours)")
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f.name, value, f"must be a finite number (nan and inf are not limits), e.g. {f.default}")
        if self.efaCheckMinBusbwGbps < 0:
            raise ConfigError("efaCheckMinBusbwGbps", self.efaCheckMinBusbwGbps,
                              "a bandwidth floor: must be >= 0 (0 = verdict only), e.g. 40")
        if not 0.0 <= self.efaCheckMinBusbwFraction <= 1.0:
            raise ConfigError("efaCheckMinBusbwFraction", self.efaCheckMinBusbwFraction,
                              "a fraction of the EFA line rate: set 0 (off) to 1, e.g. 0.5")
        if self.efaCheckWaitSeconds < 60:
            raise ConfigError("efaCheckWaitSeconds", self.efaCheckWaitSeconds,
                              "GPU nodes need minutes to boot and pull the image: set at least 60 (default 1200)")
        gpu = CATALOGUE.get(self.gpuInstanceType)
        if gpu is None:
            if self.gpuInstanceType in REFUSED:
                raise ConfigError("gpuInstanceType", self.gpuInstanceType,
                                  f"not supported: {REFUSED[self.gpuInstanceType]}; pick a supported type "
                                  "(docs/instance-types.md)")
            raise ConfigError("gpuInstanceType", self.gpuInstanceType, f"unknown instance type; supported: {', '.join(sorted(CATALOGUE))}")
        if gpu.gpus == 0:
            gpu_types = sorted(n for n, t in CATALOGUE.items() if t.gpus)
            raise ConfigError("gpuInstanceType", self.gpuInstanceType, f"has no GPU; pick one of {', '.join(gpu_types)}")
        if self.efa and not gpu.efa_supported:
            raise ConfigError("gpuInstanceType", self.gpuInstanceType, "does not support EFA; pick an EFA type or set efa: false")
        if self.systemInstanceType not in CATALOGUE:
            raise ConfigError("systemInstanceType", self.systemInstanceType, f"unknown instance type; supported: {', '.join(sorted(CATALOGUE))}")
        if self.gpuNodeCount < 0:
            raise ConfigError("gpuNodeCount", self.gpuNodeCount, "must be >= 0 (0 parks the GPU nodes)")
        if self.gpuNodeCount > MAX_NODES_PER_NODE_GROUP:
            raise ConfigError("gpuNodeCount", self.gpuNodeCount,
                              f"an EKS managed node group holds at most {MAX_NODES_PER_NODE_GROUP} nodes (EKS service "
                              "quotas: 'Nodes per managed node group'); use fewer nodes")
        if self.efa and self.gpuNodeCount == 1 and not self.allowSingleEfaNode:
            raise ConfigError("gpuNodeCount", 1, "EFA with one node has no peer; use >= 2, 0 to park, or set allowSingleEfaNode: true")
        if self.gpuRootVolumeGiB < 100:
            raise ConfigError("gpuRootVolumeGiB", self.gpuRootVolumeGiB, "must be >= 100: the DLC image is tens of GB")
        if self.systemRootVolumeGiB < 100:
            raise ConfigError("systemRootVolumeGiB", self.systemRootVolumeGiB, "must be >= 100: the Ray head and the "
                              "EFA check pull the DLC image (tens of GB; containerd keeps the layers and the unpacked copy)")
        for key in ("gpuRootVolumeGiB", "systemRootVolumeGiB"):
            if getattr(self, key) > GP3_MAX_GIB:
                raise ConfigError(key, getattr(self, key),
                                  f"gp3 volumes are 1..{GP3_MAX_GIB} GiB (EC2 LaunchTemplateEbsBlockDeviceRequest "
                                  "VolumeSize); use 100..16384, e.g. 200")
        if self.availabilityZone is not None:
            if not re.fullmatch(rf"{re.escape(self.region)}[a-z]", self.availabilityZone):
                raise ConfigError("availabilityZone", self.availabilityZone, f"is not an AZ of region {self.region} (expected {self.region}a, {self.region}b, ...)")
        capacity = config_problem(self.gpuCapacity, self.gpuCapacityReservationId, gpu, self.availabilityZone,
                                  self.region, self.gpuPlacementGroupName)
        if capacity:
            raise ConfigError(*capacity)
        problem = image_reference_problem(self.dlcImage)
        if problem:
            raise ConfigError("dlcImage", self.dlcImage, problem)
        tag = image_tag(self.dlcImage)
        pinned_by_digest = "@sha256:" in self.dlcImage.rsplit("/", 1)[-1]
        if tag is None and not pinned_by_digest:
            raise ConfigError("dlcImage", self.dlcImage, "needs an explicit tag (e.g. ...ray:train-ml-cuda-v1.1) or a digest (@sha256:...)")
        if tag == "latest" and not pinned_by_digest:
            raise ConfigError("dlcImage", self.dlcImage, "':latest' is not reproducible; pin a versioned tag")
        try:
            net = ipaddress.ip_network(self.vpcCidr)
        except ValueError:
            raise ConfigError("vpcCidr", self.vpcCidr, "must be a CIDR such as 10.0.0.0/16") from None
        # A VPC's IPv4 block is /16 (largest) to /28 (smallest):
        # https://docs.aws.amazon.com/vpc/latest/userguide/vpc-cidr-blocks.html ("IPv4 VPC CIDR blocks").
        if net.version != 4 or not 16 <= net.prefixlen <= 28:
            raise ConfigError("vpcCidr", self.vpcCidr, "AWS VPCs take an IPv4 block from /16 (largest) to /28 "
                              "(smallest), and this stack carves four subnets from it: use /16 to /20, e.g. 10.0.0.0/16")
        if net.prefixlen > 20:
            raise ConfigError("vpcCidr", self.vpcCidr, "is too small; use a /20 or larger (up to /16, the AWS maximum) "
                              "for four /22+ subnets")
        for cidr in self.endpointPublicAccessCidrs:
            try:
                ipaddress.ip_network(cidr)
            except ValueError:
                raise ConfigError("endpointPublicAccessCidrs", cidr, "each entry must be a CIDR such as 203.0.113.0/24") from None
        version = re.fullmatch(r"(\d+)\.(\d+)", str(self.kubernetesVersion))
        if not version:
            raise ConfigError("kubernetesVersion", self.kubernetesVersion, f"must be MAJOR.MINOR, e.g. {DEFAULT_VERSION}")
        if version.group(1) == "1" and len(version.group(2)) == 1:
            # EKS never offered 1.0-1.9 (its first version was 1.10: docs.aws.amazon.com/eks/latest/userguide/
            # kubernetes-versions.html); "1.3" is what YAML makes of an unquoted 1.30 (a float, trailing 0 lost).
            raise ConfigError("kubernetesVersion", self.kubernetesVersion,
                              f"EKS has no Kubernetes {self.kubernetesVersion}; YAML reads an unquoted "
                              f"{self.kubernetesVersion}0 as the number {self.kubernetesVersion}: quote it, "
                              f'kubernetesVersion: "{self.kubernetesVersion}0"')
        ended = version_problem(self.kubernetesVersion)
        if ended:
            raise ConfigError("kubernetesVersion", self.kubernetesVersion, ended)
        if self.checkpointEncryption not in ENCRYPTIONS:
            raise ConfigError("checkpointEncryption", self.checkpointEncryption, f"must be one of {', '.join(ENCRYPTIONS)}")
        try:
            check_prefix(self.checkpointPrefix)
        except ValueError:
            raise ConfigError("checkpointPrefix", self.checkpointPrefix,
                              "use S3-safe path segments without leading/trailing slashes, e.g. ray-train") from None
        if self.checkpointNoncurrentVersionDays < 1:
            raise ConfigError("checkpointNoncurrentVersionDays", self.checkpointNoncurrentVersionDays, "must be >= 1")
        if self.rayTokenAuth:
            try:
                ray_minor = tuple(int(p) for p in self.rayVersion.split(".")[:2])
            except ValueError:
                raise ConfigError("rayVersion", self.rayVersion, "must be MAJOR.MINOR.PATCH, e.g. 2.58.0") from None
            if ray_minor < (2, 52):
                raise ConfigError("rayTokenAuth", True, f"needs Ray >= 2.52 (rayVersion is {self.rayVersion}); use a "
                                  "newer dlcImage/rayVersion or set rayTokenAuth: false")
        if not 1 <= self.imdsHopLimit <= 64:
            raise ConfigError("imdsHopLimit", self.imdsHopLimit, "must be 1..64; 1 blocks pods from IMDS, 2 allows them")
        for key in ("clusterAdminArns", "clusterViewerArns"):
            for arn in getattr(self, key):
                fix = principal_arn_problem(arn)
                if fix:
                    raise ConfigError(key, arn, fix)
        both = sorted(set(self.clusterAdminArns) & set(self.clusterViewerArns))
        if both:
            raise ConfigError("clusterViewerArns", both[0], "is also in clusterAdminArns (one access entry per "
                              "principal; admin already includes view): list it in one of the two")
        if self.endpointPublicAccess and not self.endpointPublicAccessCidrs:
            raise ConfigError("endpointPublicAccessCidrs", self.endpointPublicAccessCidrs,
                              "is empty while endpointPublicAccess is true; list CIDRs or set endpointPublicAccess: false")


REGION_RE = re.compile(r"[a-z]{2}(-[a-z]+)+-\d+")
GP3_MAX_GIB = 16384
"""gp3 volume size limit, GiB (EC2 API: LaunchTemplateEbsBlockDeviceRequest.VolumeSize, 'gp2 and gp3: 1 - 16,384')."""
MAX_NODES_PER_NODE_GROUP = 450
"""EKS service quota 'Nodes per managed node group' (docs.aws.amazon.com/eks/latest/userguide/service-quotas.html)."""
LARGE_NODE_COUNT = 16
"""Above this many GPU nodes the stack warns with the hourly cost (a typo like 200 for 20 is expensive)."""


_PRINCIPAL_ARN = re.compile(r"arn:(aws|aws-cn|aws-us-gov):iam::(\d{12}):(role|user)/([\w+=,.@/-]+)")


def principal_arn_problem(arn: str) -> str | None:
    """Why ``arn`` cannot be an EKS access entry's principal (None when it can): an IAM role or user ARN."""
    if not isinstance(arn, str) or not arn:
        return "must be an IAM role or user ARN such as arn:aws:iam::123456789012:role/platform-admins"
    sts = re.fullmatch(r"arn:(aws|aws-cn|aws-us-gov):sts::(\d{12}):assumed-role/([\w+=,.@-]+)/.*", arn)
    if sts:
        return (f"is an STS session, which access entries do not accept; use the role: "
                f"arn:{sts.group(1)}:iam::{sts.group(2)}:role/{sts.group(3)} (add its path if it has one)")
    m = _PRINCIPAL_ARN.fullmatch(arn)
    if not m:
        return ("is not an IAM role or user ARN; expected arn:aws:iam::<12-digit account>:role/<name> "
                "or arn:aws:iam::<account>:user/<name> (groups and wildcards cannot have access entries)")
    if "*" in arn or m.group(4).endswith("/") or "//" in m.group(4):
        return "has an empty or wildcard name; name one role or user"
    return None


def _coerce(key: str, raw: Any, default: Any) -> Any:
    """Turn Pulumi's string config (or an engine's JSON value) into the field's type, naming the key on failure.

    Integer keys take integral doubles: a protobuf ``Struct`` has only doubles, so ``gpuNodeCount: 2`` from YAML,
    TypeScript, Go or .NET reaches ``Construct`` as ``2.0`` (google/protobuf/struct.proto, ``number_value``), and the
    Python SDK hands the raw double on (pulumi/provider/experimental/component.py, ``map_input_properties``).
    """
    if isinstance(default, bool):
        try:
            return _to_bool(raw)
        except ValueError:
            raise ConfigError(key, raw, "must be true or false") from None
    if isinstance(default, int):
        whole = _to_whole(raw)
        if whole is None:
            raise ConfigError(key, raw, f"must be a whole number, e.g. {default}")
        return whole
    if isinstance(default, float):
        try:
            if isinstance(raw, bool):
                raise ValueError(raw)
            return float(raw)
        except (TypeError, ValueError):
            raise ConfigError(key, raw, f"must be a number, e.g. {default}") from None
    if isinstance(default, list):
        if isinstance(raw, str) and raw.strip().startswith("["):
            try:
                raw = json.loads(raw)  # the form `pulumi config set --path` / YAML lists arrive in
            except ValueError:
                raise ConfigError(key, raw, "must be a JSON list or comma-separated values") from None
        return [s.strip() for s in raw.split(",") if s.strip()] if isinstance(raw, str) else list(raw)
    return raw


def _to_whole(raw: Any) -> int | None:
    """``2``, ``2.0``, ``"2"`` and ``"2.0"`` -> 2; booleans, fractions, inf/nan and other text -> None."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw
    if isinstance(raw, str):
        text = raw.strip()
        if re.fullmatch(r"[-+]?\d+", text):
            return int(text)
        if not re.fullmatch(r"[-+]?\d+\.\d*", text):
            return None
        raw = float(text)
    if isinstance(raw, float) and math.isfinite(raw) and raw.is_integer():
        return int(raw)
    return None


def _to_bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ValueError(raw)
