"""Another repo's stack on ray-efa-eks components: 2 x p5.48xlarge (8 H100, 32 EFA interfaces each) in one AZ."""

import pulumi

from ray_efa_eks.components import (
    Cluster,
    ClusterArgs,
    DevicePlugins,
    DevicePluginsArgs,
    EfaGpuNodeGroup,
    EfaGpuNodeGroupArgs,
    KubeRayOperator,
    KubeRayOperatorArgs,
    Network,
    NetworkArgs,
    NodeAgent,
    NodeAgentArgs,
    RayCluster,
    RayClusterArgs,
    SystemNodeGroup,
    SystemNodeGroupArgs,
    WorkerGroupArgs,
    lookup,
)

config = pulumi.Config()
gpu_type = lookup(config.get("gpuInstanceType") or "p5.48xlarge")
gpu_az = config.get("gpuAz") or "us-east-1a"  # must offer the type: ray-efa-eks preflight checks
nodes = config.get_int("gpuNodes") or 2
image = "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1"
name = "h100-train"

net = Network(
    "h100-net",
    NetworkArgs(
        cidr="10.20.0.0/16",
        availability_zones=[gpu_az, config.get("otherAz") or "us-east-1b"],
        gpu_availability_zone=gpu_az,
        cluster_name=name,
    ),
)
cluster = Cluster(
    name,
    ClusterArgs(
        vpc_id=net.vpc_id,
        public_subnet_ids=net.public_subnet_ids,
        private_subnet_ids=net.private_subnet_ids,
        kubernetes_version="1.35",
    ),
)
system = SystemNodeGroup(
    "h100-system",
    SystemNodeGroupArgs(
        cluster=cluster.eks,
        node_role=cluster.node_role,
        subnet_ids=net.private_subnet_ids,
        instance_type=lookup("m7i.xlarge"),
    ),
)
gpu = EfaGpuNodeGroup(
    "h100",
    EfaGpuNodeGroupArgs(
        cluster=cluster.eks,
        node_role=cluster.node_role,
        cluster_security_group_id=cluster.security_group_id,
        subnet_ids=net.gpu_subnet_id.apply(lambda s: [s]),
        instance_type=gpu_type,
        availability_zone=gpu_az,
        node_count=nodes,
    ),
)
plugins = DevicePlugins(
    "h100-plugins", DevicePluginsArgs(provider=cluster.provider), opts=pulumi.ResourceOptions(depends_on=[gpu])
)


def operator(ray_ns: pulumi.Resource) -> list[pulumi.Resource]:
    """KubeRay watching only the Ray namespace (its chart puts a Role there, so the namespace comes first)."""
    return [
        KubeRayOperator(
            "h100-kuberay",
            KubeRayOperatorArgs(provider=cluster.provider, watch_namespaces=["ray"], depends_on=[ray_ns]),
            opts=pulumi.ResourceOptions(depends_on=[system]),
        )
    ]


agent = NodeAgent(
    "h100-agent",
    NodeAgentArgs(  # the EFA exporter: the Ray pods read their node's counters here
        provider=cluster.provider, image=image, instance_types=[gpu_type.name], depends_on=[gpu]
    ),
)
ray = RayCluster(
    "h100-ray",
    RayClusterArgs(
        provider=cluster.provider,
        image=image,
        efa_exporter_url=agent.exporter_url,
        region=pulumi.Config("aws").get("region") or "us-east-1",  # the pods' AWS SDKs: no IMDS probing
        worker_groups=[WorkerGroupArgs(name="h100", instance_type=gpu_type, replicas=nodes)],
        depends_on=[plugins],
        after_namespace=operator,
    ),
)

pulumi.export("efaInterfacesPerNode", gpu.efa_interfaces_per_node)
pulumi.export("rayDashboard", f"kubectl -n {ray.namespace} port-forward svc/{ray.head_service_name} 8265:8265")
if ray.auth_token is not None:  # token auth is on by default: the Jobs API needs this token
    pulumi.export("rayAuthToken", ray.auth_token)
