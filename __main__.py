"""ray-efa-eks stack: reads config and wires the components; declares no resource itself."""

import pulumi

from ray_efa_eks.components.checkpoint_bucket import CheckpointBucket, CheckpointBucketArgs
from ray_efa_eks.components.cluster import Cluster, ClusterArgs
from ray_efa_eks.components.config import StackConfig
from ray_efa_eks.components.cost import estimate_hourly_usd
from ray_efa_eks.components.device_plugins import DevicePlugins, DevicePluginsArgs
from ray_efa_eks.components.efa_check import EfaCheckJob, EfaCheckJobArgs
from ray_efa_eks.components.kuberay import KubeRayOperator, KubeRayOperatorArgs
from ray_efa_eks.components.launch_template import NodeHardening
from ray_efa_eks.components.network import Network, NetworkArgs
from ray_efa_eks.components.node_groups import EfaGpuNodeGroup, EfaGpuNodeGroupArgs, SystemNodeGroup, SystemNodeGroupArgs
from ray_efa_eks.components.placement import cluster_azs, resolve_gpu_az
from ray_efa_eks.components.pod_identity import PodStorageAccess, PodStorageAccessArgs
from ray_efa_eks.components.raycluster import RayCluster, RayClusterArgs, WorkerGroupArgs

cfg = StackConfig.from_pulumi()  # raises on bad config before anything is registered
gpu_az = resolve_gpu_az(cfg)
name = f"ray-efa-{pulumi.get_stack()}"
tags = {"project": "ray-efa-eks", "stack": pulumi.get_stack()}
hardening = NodeHardening(imds_hop_limit=cfg.imdsHopLimit, encrypt_root_volume=cfg.encryptRootVolumes)
RAY_NAMESPACE, RAY_SERVICE_ACCOUNT = "ray", "ray-train"

network = Network("net", NetworkArgs(cidr=cfg.vpcCidr, availability_zones=cluster_azs(gpu_az),
                                     gpu_availability_zone=gpu_az, cluster_name=name))
cluster = Cluster(name, ClusterArgs(vpc_id=network.vpc_id, public_subnet_ids=network.public_subnet_ids,
                                    private_subnet_ids=network.private_subnet_ids,
                                    kubernetes_version=cfg.kubernetesVersion,
                                    endpoint_public_access=cfg.endpointPublicAccess,
                                    endpoint_public_access_cidrs=cfg.endpointPublicAccessCidrs,
                                    encrypt_secrets=cfg.encryptSecrets, pod_identity_agent=cfg.checkpointBucket,
                                    enable_network_policy=cfg.networkPolicy, tags=tags))
system = SystemNodeGroup("system", SystemNodeGroupArgs(cluster=cluster.eks, node_role=cluster.node_role,
                                                       subnet_ids=network.private_subnet_ids,
                                                       instance_type=cfg.system_type, hardening=hardening))
gpu = EfaGpuNodeGroup("gpu", EfaGpuNodeGroupArgs(
    cluster=cluster.eks, node_role=cluster.node_role, cluster_security_group_id=cluster.security_group_id,
    subnet_ids=network.gpu_subnet_id.apply(lambda s: [s]), instance_type=cfg.gpu_type, availability_zone=gpu_az,
    node_count=cfg.gpuNodeCount, efa=cfg.efa, allow_single_node=cfg.allowSingleEfaNode,
    root_volume_gib=cfg.gpuRootVolumeGiB, hardening=hardening))
plugins = DevicePlugins("device-plugins", DevicePluginsArgs(provider=cluster.provider, efa=cfg.efa),
                        opts=pulumi.ResourceOptions(depends_on=[gpu]))
operator = KubeRayOperator("kuberay", KubeRayOperatorArgs(provider=cluster.provider, chart_version=cfg.kuberayChartVersion),
                           opts=pulumi.ResourceOptions(depends_on=[system]))
storage = None
if cfg.checkpointBucket:
    bucket = CheckpointBucket(f"{name}-checkpoints", CheckpointBucketArgs(
        encryption=cfg.checkpointEncryption, retain_on_delete=cfg.checkpointRetainOnDelete,
        noncurrent_version_days=cfg.checkpointNoncurrentVersionDays, tags=tags))
    storage = PodStorageAccess("ray-storage", PodStorageAccessArgs(
        cluster_name=cluster.name, cluster_arn=cluster.arn, namespace=RAY_NAMESPACE,
        service_account=RAY_SERVICE_ACCOUNT, bucket_name=bucket.name, bucket_arn=bucket.arn,
        prefix=cfg.checkpointPrefix, kms_key_arn=bucket.kms_key_arn, region=cfg.region, tags=tags))
    pulumi.export("checkpointBucket", bucket.name)
    pulumi.export("checkpointStorageUri", storage.storage_uri)
ray = RayCluster("ray", RayClusterArgs(
    provider=cluster.provider, image=cfg.dlcImage, ray_version=cfg.rayVersion, nccl_debug=cfg.ncclDebug,
    namespace=RAY_NAMESPACE, service_account_name=RAY_SERVICE_ACCOUNT,
    storage_path=storage.storage_uri if storage else None, network_policy=cfg.networkPolicy,
    worker_groups=[WorkerGroupArgs(name="gpu", instance_type=cfg.gpu_type, replicas=cfg.gpuNodeCount, efa=cfg.efa)],
    # Pod identity is injected at pod start: the association and the agent must exist before the pods.
    depends_on=[operator, plugins, *([storage] if storage else []), *cluster.addons]))
if cfg.efaCheck and cfg.gpuNodeCount > 0:
    check = EfaCheckJob("efa-check", EfaCheckJobArgs(
        provider=cluster.provider, image=cfg.dlcImage, namespace=ray.namespace,
        dashboard_address=ray.dashboard_address, ray_cluster=ray.custom_resource,
        blocking=cfg.efaCheckBlocking, min_busbw_gbps=cfg.efaCheckMinBusbwGbps))
    pulumi.export("efaCheckLogsCommand", check.logs_command)

pulumi.export("clusterName", cluster.name)
pulumi.export("kubeconfig", pulumi.Output.secret(cluster.kubeconfig))
pulumi.export("gpuAvailabilityZone", gpu_az)
pulumi.export("gpuNodeCount", cfg.gpuNodeCount)
pulumi.export("gpuInstanceType", cfg.gpuInstanceType)
pulumi.export("efaInterfacesPerNode", gpu.efa_interfaces_per_node)
pulumi.export("estimatedHourlyUsd", estimate_hourly_usd(cfg.region, cfg.gpu_type, cfg.gpuNodeCount, cfg.system_type))
teardown = [
    "pulumi config set gpuNodeCount 0 && pulumi up   # GPU nodes first: the expensive part",
    "pulumi destroy   # then everything else",
]
if cfg.checkpointBucket and cfg.checkpointRetainOnDelete:
    teardown.append(pulumi.Output.concat("# kept on purpose: checkpoint bucket ", bucket.name,
                                         " (and its KMS key); delete by hand when the checkpoints are no longer needed"))
pulumi.export("teardownOrder", teardown)
pulumi.export("headServiceName", ray.head_service_name)
pulumi.export("rayDashboard", f"kubectl -n {ray.namespace} port-forward svc/{ray.head_service_name} 8265:8265")
