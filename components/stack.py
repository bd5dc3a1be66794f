"""EfaRayCluster: the whole reference stack as one component, for this repo's program and for other infra repos.

Args are the stack config keys (``StackConfig``), flat and plain: each one decides how many resources
exist or what they are, so it must be known when the component is constructed (the schema marks them
``plain``). Outputs are the stack outputs. The building-block components stay public for those who
assemble their own layout.

This module deliberately has no ``from __future__ import annotations``: the Pulumi SDK's schema inference
(``pulumi.provider.experimental``) reads the real annotation objects of ``EfaRayClusterArgs`` and of the
component's outputs, and their docstrings from this source file.

Child names are fixed (``net``, ``system``, ``gpu``, ``ray``...), as the program used before this
component existed, and each direct child carries an alias to its old root parent, so a stack created
by the earlier program keeps every resource. One EfaRayCluster per stack: it owns a VPC and a cluster.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Optional, TypedDict

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

# config, then the layers in the order the stack builds them
from .config.config import LARGE_NODE_COUNT, ConfigError, StackConfig, stack_error
from .config.errors import ArgError
from .kube import FABRIC_STARTUP_TAINT, METRICS_NAMESPACE, startup_taint
from .network.network import Network, NetworkArgs
from .network.placement import cluster_azs, gpu_az_note, resolve_gpu_az
from .cluster.cluster import AccessPlan, Cluster, ClusterArgs, access_plan
from .cluster.eks_versions import version_warning
from .cluster.live_cluster import lagging_warning, read_live_cluster, upgrade_problem
from .cluster.pod_identity import PodStorageAccess, PodStorageAccessArgs
from .nodes.capacity import (
    BLOCK_TERMINATION_LEAD_MINUTES,
    CAPACITY_BLOCK,
    PENDING_BLOCK_STATES,
    RESERVATION,
    CapacityBlock,
    GpuCapacity,
    block_problem,
    read_capacity_block,
)
from .nodes.cost import estimate
from .nodes.launch_template import FAST_IMAGE_PULL_MIN_MIBPS, Gp3Performance, NodeHardening, fingerprint
from .nodes.node_groups import EfaGpuNodeGroup, EfaGpuNodeGroupArgs, SystemNodeGroup, SystemNodeGroupArgs
from .addons.cluster_autoscaler import ClusterAutoscaler, ClusterAutoscalerArgs
from .addons.device_plugins import DevicePlugins, DevicePluginsArgs
from .addons.efa_check import Deadlines, EfaCheckJob, EfaCheckJobArgs, gate_transport
from .addons.image_cache import UPSTREAM_REGISTRY, ImageCache, ImageCacheArgs, cache_prefix, cached_reference
from .addons.image_prepull import ImagePrePull, ImagePrePullArgs
from .addons.node_agent import NodeAgent, NodeAgentArgs
from .storage.checkpoint_bucket import CheckpointBucket, CheckpointBucketArgs
from .queues.job_queues import JobQueues, JobQueuesArgs
from .ray.kuberay import KubeRayOperator, KubeRayOperatorArgs
from .ray.kuberay_versions import unverified_note
from .ray.ray_autoscaler import AutoscalerArgs
from .ray.raycluster import RayCluster, RayClusterArgs, WorkerGroupArgs
from .observability.metrics_rules import AlertThresholds
from .observability.observability import Observability, ObservabilityArgs

RAY_NAMESPACE = "ray"
RAY_SERVICE_ACCOUNT = "ray-train"
TOKEN = "ray-efa-eks:index:EfaRayCluster"


class EfaRayClusterArgs(TypedDict, total=False):
    """Every key is optional; an absent key takes the reference layout's default (see ``StackConfig``).

    Keys, types and docstrings are generated from ``StackConfig`` (tools/dev/config_schema.py; a test keeps them equal).
    """

    # -- generated from StackConfig by `python -m ray_efa_eks.tools.dev.config_schema --write`; do not edit --
    region: str
    """AWS region of the stack (the `aws:region` config; default us-east-1)."""
    gpuInstanceType: str
    """GPU worker instance type; must be in the catalogue (components/nodes/instances.py)."""
    gpuNodeCount: int
    """GPU nodes (one Ray worker pod each). 0 parks the GPU node group and stops its cost."""
    gpuWorkersToDelete: list[str]
    """Fixed GPU fleet (gpuScaleToZero false), lowering gpuNodeCount N -> M > 0: the N-M Ray worker pods KubeRay deletes (its workersToDelete), after their nodes were drained and terminated (docs/upgrades.md: scaling the GPU fleet down)."""
    systemInstanceType: str
    """Node for the KubeRay operator and the GPU-less Ray head."""
    availabilityZone: str
    """GPU AZ. Unset: the first AZ of the region that offers gpuInstanceType."""
    kubernetesVersion: str
    """EKS Kubernetes version (MAJOR.MINOR); one in extended support costs $0.60/h instead of $0.10/h (a warning), one past it is refused."""
    vpcCidr: str
    """VPC CIDR (a /20 or larger: four subnets are carved from it)."""
    efa: bool
    """Attach EFA interfaces and wire NCCL to the OFI plugin; false = plain TCP (for types without EFA)."""
    allowSingleEfaNode: bool
    """EFA on a single node has no peer to talk to; set true to allow it anyway."""
    dlcImage: str
    """The one image for head and workers: an explicit tag other than latest, or (recommended) a digest, repo@sha256:<64 hex>, so every node runs the bits the gate checked."""
    rayVersion: str
    """Ray version in the image (the RayCluster's rayVersion)."""
    endpointPublicAccessCidrs: list[str]
    """Who may reach the EKS API endpoint; narrow this to your office/VPN ranges."""
    gpuRootVolumeGiB: int
    """Root volume of the GPU nodes: the DLC image alone is tens of GB."""
    gpuRootVolumeIops: int
    """Provisioned IOPS of the GPU nodes' gp3 root volume (3000 is the free baseline): a node from zero unpacks the tens-of-GB image onto it ([Cold start](gpus.md#cold-start))."""
    gpuRootVolumeThroughputMiBps: int
    """Provisioned throughput (MiB/s) of the GPU nodes' gp3 root volume (125 is the free baseline); FastImagePull wants at least 600 ([Cold start](gpus.md#cold-start))."""
    gpuFastImagePull: bool
    """nodeadm's FastImagePull feature gate on the GPU nodes (AL2023 EKS AMI, experimental): containerd pulls and unpacks the image's layers in parallel through the SOCI snapshotter ([Cold start](gpus.md#cold-start))."""
    ecrPullThroughCache: bool
    """Pull public.ecr.aws images (the DLC, the node agent) through the account's own ECR: a pull-through cache rule, ECR interface endpoints in the private subnets, and pod references rewritten to <account>.dkr.ecr.<region>.amazonaws.com/<stack>-ecr-public/...; images from any other registry are used as given ([Cold start](gpus.md#cold-start))."""
    nodeAgentImage: str
    """The node agent's image (EFA exporter and fabric proof, stdlib Python only): a small public slim Python image pinned by digest, so a joining node proves its fabric while the DLC is still being pulled ([Cold start](gpus.md#cold-start))."""
    dlcImageGiB: int
    """Compressed size of dlcImage in GiB, for the cold-start model (plan's table, the gate's default wait) and the per-pull cost notes."""
    systemRootVolumeGiB: int
    """Root volume of the system node (>= 100): the Ray head and the EFA check Job pull the DLC image there (tens of GB, compressed layers plus the unpacked copy)."""
    ncclDebug: str
    """NCCL_DEBUG for training pods (the EFA check always uses INFO; a training run's fabric capture replaces it with INFO, or TRACE, and a per-rank file: docs/training.md)."""
    kuberayChartVersion: str
    """KubeRay operator Helm chart version (>= 1.6.0: its RayCluster CRD has upgradeStrategy); its CRDs are applied with it (docs/upgrades.md)."""
    efaCheck: bool
    """Create the post-deploy EFA check Job."""
    efaCheckBlocking: bool
    """Make ``pulumi up`` wait for (and fail on) the EFA check Job."""
    efaCheckMinBusbwGbps: float
    """Fail the EFA check below this all-reduce bus bandwidth (GB/s); 0 = verdict only."""
    efaCheckMinBusbwFraction: float
    """Fail the EFA check when large-message busbw is below this fraction of the type's EFA line rate; 0 = off."""
    efaCheckCompareSocket: bool
    """Also sweep with NCCL forced onto TCP sockets and report the EFA/Socket ratio (doubles the sweep time)."""
    efaCheckStrictVersions: bool
    """Fail the EFA check when a rank's torch/CUDA/NCCL/OFI/Ray version differs from the image manifest."""
    efaCheckWaitSeconds: int
    """How long the EFA check waits for every GPU node to join Ray (boot, proof, image pull) before it fails. Unset: the cold-start model's budget for the stack's gpuInstanceType, dlcImageGiB, gpuFastImagePull and ecrPullThroughCache: the path from zero at its high figures plus one failed launch the Cluster Autoscaler retries after its 5-minute backoff (1320 s for the default stack, [Cold start](gpus.md#cold-start))."""
    efaCheckRequireCounters: bool
    """With EFA: EFA hardware counters the check cannot read (host /sys view) make its verdict undetermined, not a quiet pass."""
    gpuCapacity: str
    """on-demand | reservation (an ODCR) | capacity-block (Capacity Block for ML); the last two need availabilityZone."""
    gpuCapacityReservationId: str
    """reservation: the ODCR id (cr-...) or its resource group ARN; capacity-block: the block's id (cr-...)."""
    gpuPlacementGroupName: str
    """reservation only: the cluster placement group the ODCR was created in; unset: no placement group."""
    gpuScaleToZero: bool
    """GPU nodes follow the jobs: 0 when idle, up to gpuNodeCount when Ray asks (Cluster Autoscaler + Ray autoscaler v2); each node proves its EFA path before Ray may use it. Unset: true on demand, false with a reservation."""
    gpuIdleTimeoutSeconds: int
    """With gpuScaleToZero: seconds a GPU worker may sit idle before Ray's autoscaler removes it (then its node goes); long enough that back-to-back jobs reuse warm nodes."""
    checkpointBucket: bool
    """Create the S3 checkpoint bucket + pod identity role; false = pods get no storage (pass --storage-path)."""
    checkpointPrefix: str
    """Key prefix in the bucket; the pods' role may use this prefix only."""
    checkpointEncryption: str
    """kms: SSE-KMS with a dedicated key; s3: SSE-S3 (AES256)."""
    checkpointRetainOnDelete: bool
    """Keep the bucket, its key and its protection on `pulumi destroy`; false deletes them with every checkpoint (pulumi up after changing it, then destroy)."""
    checkpointNoncurrentVersionDays: int
    """Expire overwritten/deleted checkpoint object versions after this many days."""
    endpointPublicAccess: bool
    """false: private API endpoint only (run Pulumi from inside the VPC)."""
    imdsHopLimit: int
    """IMDSv2 hop limit on every node; 1 keeps pods away from the node role (they use Pod Identity)."""
    encryptRootVolumes: bool
    """Encrypt node root volumes (EBS, aws/ebs key)."""
    encryptSecrets: bool
    """Envelope-encrypt Kubernetes secrets with a KMS key."""
    networkPolicy: bool
    """NetworkPolicies on every pod of the Ray namespace: Ray pods reach each other, the gate the head's Jobs API, namespace monitoring the metrics ports; the rest is refused (VPC CNI enforcement on)."""
    rayTokenAuth: bool
    """Ray token auth (KubeRay authOptions, Ray >= 2.52): Jobs API, dashboard and GCS need the stack's token (output rayAuthToken)."""
    observability: bool
    """Prometheus + Grafana (kube-prometheus-stack), DCGM exporter, scrape of the EFA exporter and Ray, fabric alert rules and dashboard."""
    metricsRetention: str
    """How long Prometheus keeps samples locally."""
    metricsRemoteWriteUrl: str
    """Also send every sample to this Prometheus remote-write endpoint (e.g. Amazon Managed Service for Prometheus)."""
    clusterAdminArns: list[str]
    """IAM role/user ARNs given EKS access entries with AmazonEKSClusterAdminPolicy (kubectl, port-forward to Ray)."""
    clusterViewerArns: list[str]
    """IAM role/user ARNs given EKS access entries with AmazonEKSAdminViewPolicy (read-only kubectl, no port-forward)."""
    clusterCreatorArn: str
    """Only for a cluster created with EKS's creator admin entry (bootstrapClusterCreatorAdminPermissions): the IAM principal that created it; the stack makes no entry for it (docs/upgrades.md)."""
    s3GatewayEndpoint: bool
    """S3 gateway VPC endpoint on the private route tables: checkpoints and image layers skip the NAT's per-GB fee."""
    jobQueues: list[str]
    """Team job queues (Kueue): each team gets a namespace, a LocalQueue and a ClusterQueue with a GPU quota in nodes or GPUs (`:borrow`: may use other teams' idle quota), and a role that reaches only its checkpoint prefix; empty: no Kueue, today's stack ([Team jobs](team-jobs.md))."""
    # -- end of generated keys --


def stack_config(args: "EfaRayClusterArgs | StackConfig") -> StackConfig:
    """Validate ``args`` into a StackConfig, refusing values not known at construction (before any resource)."""
    if isinstance(args, StackConfig):
        args.validate()
        return args
    values = dict(args or {})
    for key, value in values.items():
        if isinstance(value, pulumi.Output):
            raise TypeError(
                f"EfaRayCluster: {key} must be a plain value known at preview (a literal or a config "
                "value), not a resource output: it decides which resources exist"
            )
    region = values.pop("region", None) or pulumi.Config("aws").get("region") or "us-east-1"
    return StackConfig.from_mapping(values, region=region)


@contextmanager
def _in_stack_keys() -> Iterator[None]:
    """A component's ArgError (its own argument names) as the ConfigError of the stack key behind it."""
    try:
        yield
    except ArgError as e:
        raise stack_error(e) from None


@dataclass
class _Checked:
    """What the stack learns before it registers anything: the GPU AZ, its capacity, the live cluster it changes."""

    gpu_az: str
    capacity: GpuCapacity
    block: Optional[CapacityBlock]
    access: AccessPlan


def _check_before_any_resource(name: str, cfg: StackConfig) -> _Checked:
    """Every refusal AWS or EKS would give later, raised now (preview included), and the warnings of the config."""
    with _in_stack_keys():  # components name their own arguments; the stack names its keys
        gpu_az = resolve_gpu_az(cfg.gpuInstanceType, cfg.availabilityZone, cfg.region)
    capacity = GpuCapacity(cfg.gpuCapacity, cfg.gpuCapacityReservationId, cfg.gpuPlacementGroupName)
    block = read_capacity_block(cfg.gpuCapacityReservationId) if capacity.mode == CAPACITY_BLOCK else None
    problem = block and block_problem(block, cfg.gpuInstanceType, gpu_az, cfg.gpuNodeCount)
    if problem:  # the block is elsewhere, of another type, too small or over: refuse before any resource
        raise stack_error(problem)
    if block and block.state in PENDING_BLOCK_STATES and cfg.gpuNodeCount > 0:
        pulumi.log.warn(
            f"Capacity Block {block.id} is {block.state} until {block.start_date}: its nodes cannot "
            f"launch before, so the node group waits and may time out; deploy with gpuNodeCount 0 "
            "and raise it once the block is active"
        )
    if cfg.scale_to_zero and capacity.mode == RESERVATION:
        pulumi.log.warn(
            "gpuScaleToZero with gpuCapacity reservation: the ODCR bills every reserved instance at "
            "the on-demand rate whether a node runs in it or not, so idle GPU nodes going away saves "
            "nothing; only the node-group churn remains (docs/gpus.md)"
        )
    live = read_live_cluster(name)  # what this update changes from: EKS's view, whoever runs it
    if live is not None:
        problem = upgrade_problem(live.version, cfg.kubernetesVersion)
        if problem:  # EKS refuses it; before any resource, preview included
            raise ConfigError("kubernetesVersion", cfg.kubernetesVersion, problem)
        lagging = lagging_warning(live, cfg.kubernetesVersion)
        if lagging:
            pulumi.log.warn(lagging)
    with _in_stack_keys():
        access = access_plan(name, cfg.clusterAdminArns, cfg.clusterViewerArns, cfg.clusterCreatorArn, live)
    for note in access.warnings:
        pulumi.log.warn(note)
    chart_note = unverified_note(cfg.kuberayChartVersion)
    if chart_note:
        pulumi.log.warn(chart_note)
    version_note = version_warning(cfg.kubernetesVersion)
    if version_note:  # extended support: $0.60/h instead of $0.10/h
        pulumi.log.warn(version_note)
    if cfg.gpuFastImagePull and cfg.gpuRootVolumeThroughputMiBps < FAST_IMAGE_PULL_MIN_MIBPS:
        pulumi.log.warn(
            f"gpuFastImagePull with gpuRootVolumeThroughputMiBps {cfg.gpuRootVolumeThroughputMiBps}: "
            f"nodeadm's docs recommend at least {FAST_IMAGE_PULL_MIN_MIBPS} MiB/s, below which the "
            "parallel pull may be slower than the default one; raise the throughput or set "
            "gpuFastImagePull: false"
        )
    return _Checked(gpu_az, capacity, block, access)


@dataclass
class _Build:
    """One EfaRayCluster under construction: its config and what every child shares. Each layer's builder below
    takes it and the layers it stands on, and returns its components."""

    owner: pulumi.ComponentResource
    name: str
    cfg: StackConfig
    checked: _Checked
    tags: dict[str, str] = field(default_factory=lambda: {"project": "ray-efa-eks", "stack": pulumi.get_stack()})

    @property
    def child(self) -> pulumi.ResourceOptions:
        """Direct children keep the URNs the earlier root-level program gave them."""
        return pulumi.ResourceOptions(parent=self.owner, aliases=[pulumi.Alias(parent=pulumi.ROOT_STACK_RESOURCE)])

    def opts(self, **kw: Any) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions.merge(self.child, pulumi.ResourceOptions(**kw))

    @property
    def unproven(self) -> list[str]:
        """Every GPU node proves its fabric before Ray may use it: it joins with the startup taint, which only the
        node agent's fabric proof removes; so only with EFA, where the agent runs. Fixed fleet too: its nodes are
        replaced as well (node repair, version updates, a new launch template) and join unproven."""
        return [FABRIC_STARTUP_TAINT] if self.cfg.efa else []


def _network(b: _Build) -> Network:
    cfg, gpu_az = b.cfg, b.checked.gpu_az
    with _in_stack_keys():
        azs = cluster_azs(gpu_az, cfg.region)  # by zone ID: the GPU AZ may be one EKS refuses for the cluster
    outside = gpu_az_note(gpu_az, azs, cfg.region)
    if outside:
        pulumi.log.warn(outside, resource=b.owner)
    return Network(
        "net",
        NetworkArgs(
            cidr=cfg.vpcCidr,
            availability_zones=azs,
            gpu_availability_zone=gpu_az,
            cluster_name=b.name,
            s3_gateway_endpoint=cfg.s3GatewayEndpoint,
            region=cfg.region,
            ecr_interface_endpoints=cfg.ecrPullThroughCache,
        ),
        opts=b.child,
    )


def _cluster(b: _Build, network: Network) -> Cluster:
    cfg, access = b.cfg, b.checked.access
    return Cluster(
        b.name,
        ClusterArgs(
            vpc_id=network.vpc_id,
            public_subnet_ids=network.public_subnet_ids,
            private_subnet_ids=network.private_subnet_ids,
            kubernetes_version=cfg.kubernetesVersion,
            endpoint_public_access=cfg.endpointPublicAccess,
            endpoint_public_access_cidrs=cfg.endpointPublicAccessCidrs,
            encrypt_secrets=cfg.encryptSecrets,
            pod_identity_agent=cfg.checkpointBucket or cfg.scale_to_zero,
            enable_network_policy=cfg.networkPolicy,
            admin_arns=cfg.clusterAdminArns,
            viewer_arns=cfg.clusterViewerArns,
            creator_admin=access.creator_admin,
            creator_arn=access.creator_arn,
            tags=b.tags,
        ),
        opts=b.child,
    )


@dataclass
class _Images:
    dlc: str
    agent: str
    cache: Optional[ImageCache]

    @property
    def pulled_after(self) -> list[pulumi.Resource]:
        """What a pod pulling these images waits for: the pull-through cache rule, when there is one."""
        return [self.cache] if self.cache else []


def _images(b: _Build, cluster: Cluster) -> _Images:
    """Images from ECR Public come through the account's pull-through cache (components/addons/image_cache.py); the
    Ray head on the system node pulls the DLC first, so the cache is filled before any GPU worker needs it."""
    cfg = b.cfg
    dlc_image, agent_image = cfg.dlcImage, cfg.nodeAgentImage
    if not (cfg.ecrPullThroughCache and any(i.startswith(UPSTREAM_REGISTRY + "/") for i in (dlc_image, agent_image))):
        return _Images(dlc_image, agent_image, None)
    account = aws.get_caller_identity().account_id
    prefix = cache_prefix(b.name)
    dlc_image, agent_image = (cached_reference(i, account, cfg.region, prefix) for i in (dlc_image, agent_image))
    cache = ImageCache(
        "image-cache",
        ImageCacheArgs(account_id=account, region=cfg.region, prefix=prefix, node_role_name=cluster.node_role.name),
        opts=b.child,
    )
    return _Images(dlc_image, agent_image, cache)


@dataclass
class _Nodes:
    system: SystemNodeGroup
    gpu: EfaGpuNodeGroup
    plugins: DevicePlugins
    autoscaler: Optional[ClusterAutoscaler]


def _nodes(b: _Build, network: Network, cluster: Cluster) -> _Nodes:
    """The system node, the EFA GPU nodes, their device plugins, the Cluster Autoscaler (scale to zero) and EKS's
    node monitoring agent."""
    cfg = b.cfg
    hardening = NodeHardening(imds_hop_limit=cfg.imdsHopLimit, encrypt_root_volume=cfg.encryptRootVolumes)
    system = SystemNodeGroup(
        "system",
        SystemNodeGroupArgs(
            cluster=cluster.eks,
            node_role=cluster.node_role,
            subnet_ids=network.private_subnet_ids,
            instance_type=cfg.system_type,
            root_volume_gib=cfg.systemRootVolumeGiB,
            hardening=hardening,
            kubernetes_version=cfg.kubernetesVersion,
        ),
        opts=b.child,
    )
    gpu = EfaGpuNodeGroup(
        "gpu",
        EfaGpuNodeGroupArgs(
            cluster=cluster.eks,
            node_role=cluster.node_role,
            cluster_security_group_id=cluster.security_group_id,
            subnet_ids=network.gpu_subnet_id.apply(lambda s: [s]),
            instance_type=cfg.gpu_type,
            availability_zone=b.checked.gpu_az,
            node_count=cfg.gpuNodeCount,
            efa=cfg.efa,
            allow_single_node=cfg.allowSingleEfaNode,
            root_volume_gib=cfg.gpuRootVolumeGiB,
            hardening=hardening,
            root_volume_performance=Gp3Performance(cfg.gpuRootVolumeIops, cfg.gpuRootVolumeThroughputMiBps),
            fast_image_pull=cfg.gpuFastImagePull,
            capacity=b.checked.capacity,
            kubernetes_version=cfg.kubernetesVersion,
            workers_to_delete=len(cfg.gpuWorkersToDelete),
            autoscaled=cfg.scale_to_zero,
            scale_from_zero=cfg.scale_to_zero and cfg.gpuNodeCount > 0,  # 0 parks: max 1 must not be used
            startup_taints=[startup_taint(k) for k in b.unproven],
            error_as=stack_error,
        ),
        opts=b.child,
    )
    plugins = DevicePlugins(
        "device-plugins",
        DevicePluginsArgs(
            provider=cluster.provider, efa=cfg.efa, instance_types=[cfg.gpuInstanceType], startup_taints=b.unproven
        ),
        opts=b.opts(depends_on=[gpu]),
    )
    autoscaler = None
    if cfg.scale_to_zero:  # GPU nodes follow Ray's pending worker pods
        autoscaler = ClusterAutoscaler(
            "cluster-autoscaler",
            ClusterAutoscalerArgs(
                provider=cluster.provider,
                cluster_name=cluster.name,
                cluster_arn=cluster.arn,
                region=cfg.region,
                tags=b.tags,
                depends_on=[system, *cluster.addons],
            ),
            opts=b.child,
        )
    # EKS node monitoring agent: sets the Node conditions (AcceleratedHardwareReady, NetworkingReady, ...) that
    # node auto repair (nodeRepairConfig on both node groups, node_groups.node_repair) acts on. After the nodes:
    # a DaemonSet add-on with no node to run on does not become ACTIVE.
    aws.eks.Addon(
        "node-monitoring-agent",
        cluster_name=cluster.name,
        addon_name="eks-node-monitoring-agent",
        tags=b.tags,
        opts=b.opts(depends_on=[system, gpu]),
    )
    return _Nodes(system, gpu, plugins, autoscaler)


def _storage(b: _Build, cluster: Cluster) -> tuple[Optional[CheckpointBucket], Optional[PodStorageAccess]]:
    """The checkpoint bucket and the Ray pods' Pod Identity role on it (checkpointBucket)."""
    cfg = b.cfg
    if not cfg.checkpointBucket:
        return None, None
    bucket = CheckpointBucket(
        f"{b.name}-checkpoints",
        CheckpointBucketArgs(
            encryption=cfg.checkpointEncryption,
            retain_on_delete=cfg.checkpointRetainOnDelete,
            noncurrent_version_days=cfg.checkpointNoncurrentVersionDays,
            tags=b.tags,
        ),
        opts=b.child,
    )
    storage = PodStorageAccess(
        "ray-storage",
        PodStorageAccessArgs(
            cluster_name=cluster.name,
            cluster_arn=cluster.arn,
            namespace=RAY_NAMESPACE,
            service_account=RAY_SERVICE_ACCOUNT,
            bucket_name=bucket.name,
            bucket_arn=bucket.arn,
            prefix=cfg.checkpointPrefix,
            kms_key_arn=bucket.kms_key_arn,
            region=cfg.region,
            tags=b.tags,
        ),
        opts=b.child,
    )
    return bucket, storage


def _queues(b: _Build, cluster: Cluster, nodes: _Nodes, bucket: Optional[CheckpointBucket]) -> Optional[JobQueues]:
    """Kueue, the teams' namespaces, queues, RBAC and storage (jobQueues; docs/team-jobs.md)."""
    cfg = b.cfg
    if not (cfg.jobQueues and bucket is not None):
        return None
    return JobQueues(
        "job-queues",
        JobQueuesArgs(
            provider=cluster.provider,
            teams=cfg.job_queues,
            instance_type=cfg.gpu_type,
            cluster_name=cluster.name,
            cluster_arn=cluster.arn,
            bucket_name=bucket.name,
            bucket_arn=bucket.arn,
            kms_key_arn=bucket.kms_key_arn,
            region=cfg.region,
            pods_ready_timeout_s=cfg.efa_check_wait_s,
            network_policy=cfg.networkPolicy,
            tags=b.tags,
            depends_on=[nodes.system],
        ),
        opts=b.child,
    )


@dataclass
class _Ray:
    ray: RayCluster
    operator: KubeRayOperator
    agent: Optional[NodeAgent]


def _ray(
    b: _Build,
    cluster: Cluster,
    nodes: _Nodes,
    images: _Images,
    storage: Optional[PodStorageAccess],
    queues: Optional[JobQueues],
) -> _Ray:
    """The KubeRay operator, the node agent (EFA), the DLC pre-pull and the RayCluster."""
    cfg = b.cfg
    team_namespaces = queues.namespace_names if queues else []
    operators: list[KubeRayOperator] = []
    # The CRDs Helm installed on a stack's first up are upserted and taken over (components/ray/kuberay.py).
    crd_provider = k8s.Provider(
        "kuberay-crds-k8s",
        kubeconfig=cluster.eks.kubeconfig_json,
        enable_server_side_apply=True,
        upsert_existing_objects=True,
        enable_patch_force=True,
        opts=pulumi.ResourceOptions(parent=b.owner, depends_on=cluster.access_grants),
    )

    def install_operator(ray_ns: pulumi.Resource) -> list[pulumi.Resource]:
        """The KubeRay operator, watching only the Ray namespace (its chart puts a Role there)."""
        operators.append(
            KubeRayOperator(
                "kuberay",
                KubeRayOperatorArgs(
                    provider=cluster.provider,
                    chart_version=cfg.kuberayChartVersion,
                    crd_provider=crd_provider,
                    watch_namespaces=[RAY_NAMESPACE, *team_namespaces],
                    network_policy=cfg.networkPolicy,
                    depends_on=[ray_ns, *(queues.namespaces if queues else [])],
                ),
                opts=b.opts(depends_on=[nodes.system]),
            )
        )
        # the node agent's read of its node's Ray workers (a failed provider check puts its taint back)
        return [operators[-1], *(agent.grant_worker_read(ray_ns) if agent else [])]

    agent = None
    if cfg.efa:  # the one reader of the hosts' EFA counters (the Ray pods mount no host path)
        agent = NodeAgent(
            "node-agent",
            NodeAgentArgs(
                provider=cluster.provider,
                image=images.agent,
                instance_types=[cfg.gpuInstanceType],
                network_policy=cfg.networkPolicy,
                allowed_namespaces=[RAY_NAMESPACE, METRICS_NAMESPACE, *team_namespaces],
                startup_taints=b.unproven,
                efa_devices={cfg.gpuInstanceType: cfg.gpu_type.max_efa_interfaces},
                workers_namespace=RAY_NAMESPACE,
                kubernetes_version=cfg.kubernetesVersion,
                depends_on=[nodes.gpu, *images.pulled_after],
            ),
            opts=b.child,
        )
    # The DLC pulled on each joining GPU node while its fabric is proven (the taint keeps Ray off until then).
    ImagePrePull(
        "image-prepull",
        ImagePrePullArgs(
            provider=cluster.provider,
            image=images.dlc,
            idle_image=images.agent,
            instance_types=[cfg.gpuInstanceType],
            startup_taints=b.unproven,
            network_policy=cfg.networkPolicy,
        ),
        opts=b.opts(depends_on=[nodes.gpu, *images.pulled_after]),
    )
    ray = RayCluster(
        "ray",
        RayClusterArgs(
            provider=cluster.provider,
            image=images.dlc,
            ray_version=cfg.rayVersion,
            nccl_debug=cfg.ncclDebug,
            namespace=RAY_NAMESPACE,
            service_account_name=RAY_SERVICE_ACCOUNT,
            storage_path=storage.storage_uri if storage else None,
            network_policy=cfg.networkPolicy,
            token_auth=cfg.rayTokenAuth,
            region=cfg.region,
            efa_exporter_url=agent.exporter_url if agent else None,
            kuberay_chart_version=cfg.kuberayChartVersion,
            worker_groups=[
                WorkerGroupArgs(
                    name="gpu",
                    instance_type=cfg.gpu_type,
                    replicas=cfg.gpuNodeCount,
                    efa=cfg.efa,
                    scale_from_zero=cfg.scale_to_zero,
                    workers_to_delete=list(cfg.gpuWorkersToDelete),
                )
            ],
            autoscaler=AutoscalerArgs(idle_timeout_s=cfg.gpuIdleTimeoutSeconds) if cfg.scale_to_zero else None,
            # Pod identity is injected at pod start: the association and the agent must exist before the pods.
            depends_on=[nodes.plugins, *([storage] if storage else []), *cluster.addons, *images.pulled_after],
            after_namespace=install_operator,
        ),
        opts=b.child,
    )
    (operator,) = operators
    return _Ray(ray, operator, agent)


def _observability(b: _Build, cluster: Cluster, nodes: _Nodes, queues: Optional[JobQueues]) -> Optional[Observability]:
    """Prometheus + Grafana on the system node, DCGM on the GPU nodes, alerts, dashboard (observability)."""
    cfg = b.cfg
    if not cfg.observability:
        return None
    line_rate_gbps = cfg.gpu_type.efa_gbps or 0.0
    return Observability(
        "observability",
        ObservabilityArgs(
            provider=cluster.provider,
            ray_namespace=RAY_NAMESPACE,
            team_namespaces=queues.namespace_names if queues else [],
            retention=cfg.metricsRetention,
            remote_write_url=cfg.metricsRemoteWriteUrl,
            region=cfg.region,
            efa=cfg.efa,
            line_rate_gbps=line_rate_gbps,
            thresholds=AlertThresholds(line_rate_bytes_per_s=line_rate_gbps * 1e9 / 8, ray_namespace=RAY_NAMESPACE),
            startup_taints=b.unproven,
            network_policy=cfg.networkPolicy,
            depends_on=[nodes.system],
        ),
        opts=b.child,
    )


def _gate(b: _Build, cluster: Cluster, nodes: _Nodes, images: _Images, ray: _Ray) -> Optional[EfaCheckJob]:
    """The post-deploy EFA gate (efaCheck, with GPU nodes), after every node's exporter is up."""
    cfg = b.cfg
    if not (cfg.efaCheck and cfg.gpuNodeCount > 0):
        return None
    shape = gate_transport(cfg.efa, cfg.gpuNodeCount)
    if shape == "socket":
        pulumi.log.warn(
            "efaCheck with efa: false: the gate checks that NCCL works across the GPU nodes over "
            "its Socket transport (TCP); it does not prove EFA",
            resource=b.owner,
        )
    elif shape == "intra-node":
        pulumi.log.warn(
            "efaCheck with one GPU node: the gate checks NCCL inside the node only; EFA (and any "
            "inter-node path) is not exercised. Use gpuNodeCount >= 2 for the EFA proof",
            resource=b.owner,
        )
    return EfaCheckJob(
        "efa-check",
        EfaCheckJobArgs(
            provider=cluster.provider,
            image=images.dlc,
            namespace=ray.ray.namespace,
            dashboard_address=ray.ray.dashboard_address,
            ray_cluster=ray.ray.custom_resource,
            blocking=cfg.efaCheckBlocking,
            min_busbw_gbps=cfg.efaCheckMinBusbwGbps,
            instance_type=cfg.gpu_type,
            node_count=cfg.gpuNodeCount,
            efa=cfg.efa,
            nccl_debug=cfg.ncclDebug,
            min_busbw_fraction=cfg.efaCheckMinBusbwFraction,
            compare_socket=cfg.efaCheckCompareSocket,
            strict_versions=cfg.efaCheckStrictVersions,
            require_counters=cfg.efaCheckRequireCounters and cfg.efa,
            storage_proof=cfg.checkpointBucket,
            deadlines=Deadlines(topology_wait_s=cfg.efa_check_wait_s),
            auth_secret_name=ray.ray.auth_secret_name,
            spec_hash=ray.ray.spec_hash,
            ray_cluster_name=ray.ray.name,
            node_identity=pulumi.Output.all(
                nodes.gpu.template_fingerprint, nodes.system.template_fingerprint, cfg.kubernetesVersion
            ).apply(fingerprint),
            depends_on=[ray.agent.daemonset] if ray.agent else [],
        ),
        opts=b.child,
    )  # every node's exporter up first


def _teardown(b: _Build, bucket: Optional[CheckpointBucket]) -> list[Any]:
    """The teardownOrder output: how to stop the cost, GPU nodes first, and what each capacity mode leaves billed."""
    block, capacity = b.checked.block, b.checked.capacity
    teardown: list[Any] = [
        "pulumi config set --type int gpuNodeCount 0 && pulumi up   # GPU nodes first: the expensive part",
        "pulumi destroy   # then everything else",
    ]
    if block is not None:
        teardown.insert(
            0,
            f"# Capacity Block {block.id} ends {block.end_date or '(unknown)'}: EC2 terminates its "
            f"instances from {BLOCK_TERMINATION_LEAD_MINUTES} min before; park the GPU nodes first",
        )
        teardown.append(
            f"# Capacity Block {block.id} was paid up front: parking and destroy stop the other costs, not the block's"
        )
    if capacity.mode == RESERVATION:
        how = (
            f"cancel each reservation in {capacity.reservation}"
            if capacity.is_group
            else f"aws ec2 cancel-capacity-reservation --capacity-reservation-id {capacity.reservation}"
        )
        teardown.append(
            f"# the ODCR bills at the on-demand rate until cancelled, GPU nodes or not; when no one needs it: {how}"
        )
    if bucket is not None and b.cfg.checkpointRetainOnDelete:
        teardown.append(
            pulumi.Output.concat(
                "# kept on purpose: checkpoint bucket ",
                bucket.name,
                " (and its KMS key); delete by hand when the checkpoints are no longer needed",
            )
        )
    return teardown


class EfaRayCluster(pulumi.ComponentResource):
    """VPC, EKS, a system node (KubeRay operator + GPU-less Ray head), EFA GPU nodes in one AZ, device plugins,
    a RayCluster from one DLC image, the S3 checkpoint bucket with Pod Identity, and the post-deploy EFA gate."""

    cluster_name: pulumi.Output[str]
    """EKS cluster name."""
    kubeconfig: pulumi.Output[Any]
    """Kubeconfig of the cluster (secret)."""
    gpu_availability_zone: pulumi.Output[str]
    """The one AZ of the GPU nodes."""
    gpu_node_count: pulumi.Output[int]
    """GPU nodes (0 = parked)."""
    gpu_instance_type: pulumi.Output[str]
    """GPU instance type."""
    efa_interfaces_per_node: pulumi.Output[int]
    """EFA interfaces on each GPU node (0 without EFA)."""
    estimated_hourly_usd: pulumi.Output[Optional[float]]
    """On-demand USD/hour of nodes, control plane and NAT gateway, before storage and data transfer; left out where the region has no price figures (costNotes says so)."""
    estimated_idle_hourly_usd: pulumi.Output[Optional[float]]
    """USD/hour with no job running: the system node, control plane and NAT gateway, plus the GPU nodes that stay (all of them with gpuScaleToZero false; an ODCR's every reserved instance); left out where estimatedHourlyUsd is."""
    cost_notes: pulumi.Output[list[str]]
    """What estimatedHourlyUsd leaves out or could not price: "no price for REGION", NAT per-GB processing, S3 via the gateway endpoint."""
    teardown_order: pulumi.Output[list[str]]
    """Commands to stop the cost: GPU nodes first."""
    head_service_name: pulumi.Output[str]
    """Kubernetes service of the Ray head."""
    ray_dashboard: pulumi.Output[str]
    """kubectl port-forward command for the Ray dashboard and Jobs API."""
    checkpoint_bucket: pulumi.Output[Optional[str]]
    """S3 checkpoint bucket (when checkpointBucket is on)."""
    checkpoint_storage_uri: pulumi.Output[Optional[str]]
    """s3:// URI Ray Train stores checkpoints under (when checkpointBucket is on)."""
    efa_check_logs_command: pulumi.Output[Optional[str]]
    """kubectl command for the EFA check Job's log (when the check runs)."""
    ray_auth_token: pulumi.Output[Optional[str]]
    """Ray token for the Jobs API and dashboard (secret; when rayTokenAuth is on): export RAY_AUTH_TOKEN=$(pulumi stack output rayAuthToken --show-secrets)."""
    gpu_capacity_block_end: pulumi.Output[Optional[str]]
    """When the GPU nodes' Capacity Block ends (UTC, from EC2; gpuCapacity capacity-block only): EC2 starts terminating its instances 30 minutes before, so park them (gpuNodeCount 0) earlier."""

    def __init__(self, name: str, args: EfaRayClusterArgs, opts: Optional[pulumi.ResourceOptions] = None):
        cfg = stack_config(args)  # raises on bad config before anything is registered
        checked = _check_before_any_resource(name, cfg)
        super().__init__(TOKEN, name, None, opts)
        self.config = cfg
        b = _Build(self, name, cfg, checked)
        network = _network(b)
        cluster = _cluster(b, network)
        images = _images(b, cluster)
        nodes = _nodes(b, network, cluster)
        bucket, storage = _storage(b, cluster)
        queues = _queues(b, cluster, nodes, bucket)
        ray = _ray(b, cluster, nodes, images, storage, queues)
        metrics = _observability(b, cluster, nodes, queues)
        check = _gate(b, cluster, nodes, images, ray)

        # The building blocks, for Python callers that want to extend the stack (not part of the schema).
        self.network, self.cluster, self.system, self.gpu = network, cluster, nodes.system, nodes.gpu
        self.device_plugins, self.operator, self.ray, self.check = nodes.plugins, ray.operator, ray.ray, check
        self.bucket, self.storage, self.cluster_autoscaler = bucket, storage, nodes.autoscaler
        self.observability = metrics
        self.job_queues = queues

        out = pulumi.Output.from_input
        self.cluster_name = cluster.name
        self.kubeconfig = pulumi.Output.secret(cluster.kubeconfig)
        self.gpu_availability_zone = out(checked.gpu_az)
        self.gpu_node_count = out(cfg.gpuNodeCount)
        self.gpu_instance_type = out(cfg.gpuInstanceType)
        self.efa_interfaces_per_node = out(nodes.gpu.efa_interfaces_per_node)
        self._price(b, network, nodes.gpu)
        self.teardown_order = pulumi.Output.all(*_teardown(b, bucket))
        self.head_service_name = out(ray.ray.head_service_name)
        self.ray_dashboard = out(
            f"kubectl -n {ray.ray.namespace} port-forward svc/{ray.ray.head_service_name} 8265:8265"
        )
        self.checkpoint_bucket = bucket.name if bucket is not None else None
        self.checkpoint_storage_uri = storage.storage_uri if storage is not None else None
        self.efa_check_logs_command = out(check.logs_command) if check is not None else None
        self.ray_auth_token = ray.ray.auth_token
        block = checked.block
        self.gpu_capacity_block_end = out(block.end_date) if block is not None and block.end_date else None
        self.register_outputs({k: v for k, v in self.outputs().items()})

    def _price(self, b: _Build, network: Network, gpu: EfaGpuNodeGroup) -> None:
        """estimatedHourlyUsd, estimatedIdleHourlyUsd and costNotes, and the warnings a large or unpriced stack gets."""
        cfg, capacity, block, out = b.cfg, b.checked.capacity, b.checked.block, pulumi.Output.from_input

        def priced(reserved: Any = None, idle: bool = False) -> Any:
            """The estimate for this capacity mode, the control plane at the version's rate today; ``idle``: with
            no job (GPU nodes that scale from zero are gone)."""
            from_zero = cfg.scale_to_zero and cfg.gpuNodeCount > 0
            return estimate(
                cfg.region,
                cfg.gpu_type,
                0 if idle and from_zero else cfg.gpuNodeCount,
                cfg.system_type,
                scale_from_zero=from_zero and not idle,
                s3_gateway_endpoint=cfg.s3GatewayEndpoint,
                capacity_mode=capacity.mode,
                reserved=int(reserved) if reserved is not None else None,
                reservation=capacity.reservation,
                block_end=block.end_date if block else None,
                kubernetes_version=cfg.kubernetesVersion,
                image_gib=cfg.dlcImageGiB,
                ecr_endpoint_azs=2 * len(network.ecr_subnet_azs),
            )

        cost = priced()
        if cost.missing:
            pulumi.log.warn(f"estimatedHourlyUsd left out: {cost.missing}", resource=self)
        if cfg.gpuNodeCount > LARGE_NODE_COUNT:
            price = f" (about ${cost.hourly_usd:,.0f}/h for the stack)" if cost.hourly_usd is not None else ""
            pulumi.log.warn(
                f"gpuNodeCount {cfg.gpuNodeCount} x {cfg.gpuInstanceType}{price}: more than "
                f"{LARGE_NODE_COUNT} GPU nodes; check your vCPU quota and capacity first (ray-efa-eks "
                "preflight) and that this is not a typo",
                resource=self,
            )
        if gpu.reserved_instances is not None:  # an ODCR bills every reserved instance: priced once EC2 says how many
            by_count = gpu.reserved_instances.apply(priced)
            self.estimated_hourly_usd = by_count.apply(lambda c: c.hourly_usd)
            self.estimated_idle_hourly_usd = gpu.reserved_instances.apply(lambda n: priced(n, idle=True).hourly_usd)
            self.cost_notes = by_count.apply(lambda c: c.notes)
        else:
            self.estimated_hourly_usd = out(cost.hourly_usd) if cost.hourly_usd is not None else None
            idle = priced(idle=True).hourly_usd
            self.estimated_idle_hourly_usd = out(idle) if idle is not None else None
            self.cost_notes = out(cost.notes)

    def outputs(self) -> dict[str, pulumi.Output[Any]]:
        """The stack outputs by their schema (camelCase) names; outputs that do not apply are left out."""
        names = {
            "clusterName": self.cluster_name,
            "kubeconfig": self.kubeconfig,
            "gpuAvailabilityZone": self.gpu_availability_zone,
            "gpuNodeCount": self.gpu_node_count,
            "gpuInstanceType": self.gpu_instance_type,
            "efaInterfacesPerNode": self.efa_interfaces_per_node,
            "estimatedHourlyUsd": self.estimated_hourly_usd,
            "estimatedIdleHourlyUsd": self.estimated_idle_hourly_usd,
            "costNotes": self.cost_notes,
            "teardownOrder": self.teardown_order,
            "headServiceName": self.head_service_name,
            "rayDashboard": self.ray_dashboard,
            "checkpointBucket": self.checkpoint_bucket,
            "checkpointStorageUri": self.checkpoint_storage_uri,
            "efaCheckLogsCommand": self.efa_check_logs_command,
            "gpuCapacityBlockEnd": self.gpu_capacity_block_end,
            "rayAuthToken": self.ray_auth_token,
        }
        return {k: v for k, v in names.items() if v is not None}
