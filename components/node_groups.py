"""Node groups: the system node (operator + Ray head) and the EFA GPU nodes.

The GPU group leans on pulumi-eks's native EFA support (read from its source,
nodejs/eks/nodes/nodegroup.ts and instances.ts): with ``enable_efa_support``
it creates a ``cluster`` placement group, filters the subnets to
``placement_group_availability_zone`` and writes a launch template with one
EFA interface per network card (``efa`` first, ``efa-only`` after), all in the
EKS *cluster* security group. EKS gives that group an all-traffic ingress rule
from itself and all egress to 0.0.0.0/0, but EFA's documented requirement is
an explicit self rule both ways, so the component adds the missing egress one.

Both groups carry a transform (components/launch_template.py) that sets IMDS
hop limit 1 and encrypts the root volume in the launch template pulumi-eks
builds, since pulumi-eks exposes neither and refuses a user launch template
next to ``enable_efa_support``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks

from .instances import InstanceType
from .launch_template import NodeHardening

ROLE_LABEL = "ray-efa-eks/role"
SYSTEM_ROLE = "system"
GPU_ROLE = "gpu"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}
GPU_TOLERATION = {"key": GPU_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}
"""The pod-side match of GPU_TAINT (Kubernetes spells the effect NoSchedule)."""


@dataclass
class SystemNodeGroupArgs:
    """Inputs of :class:`SystemNodeGroup`."""

    cluster: eks.Cluster
    node_role: aws.iam.Role
    subnet_ids: pulumi.Input[list[str]]
    instance_type: InstanceType
    node_count: int = 1
    root_volume_gib: int = 50
    hardening: NodeHardening = field(default_factory=NodeHardening)
    """IMDS hop limit and root-volume encryption, patched into pulumi-eks's launch template."""


class SystemNodeGroup(pulumi.ComponentResource):
    """Managed node group for the KubeRay operator, the Ray head and cluster add-ons."""

    node_group: eks.ManagedNodeGroup
    labels: dict[str, str]

    def __init__(self, name: str, args: SystemNodeGroupArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ray-efa-eks:index:SystemNodeGroup", name, None, opts)
        if args.instance_type.gpus:
            raise ValueError(f"SystemNodeGroup {name}: {args.instance_type.name} has GPUs; use a CPU type for the system node")
        self.labels = {ROLE_LABEL: SYSTEM_ROLE}
        n = args.node_count
        self.node_group = eks.ManagedNodeGroup(
            f"{name}-mng",
            cluster=args.cluster,
            node_role=args.node_role,
            subnet_ids=args.subnet_ids,
            instance_types=[args.instance_type.name],
            ami_type="AL2023_x86_64_STANDARD",
            enable_imd_sv2=True,
            disk_size=args.root_volume_gib,
            scaling_config={"desired_size": n, "min_size": n, "max_size": max(n, 1)},
            labels=self.labels,
            opts=pulumi.ResourceOptions(parent=self, transforms=[args.hardening.transform()]),
        )
        self.register_outputs({"labels": self.labels})


@dataclass
class EfaGpuNodeGroupArgs:
    """Inputs of :class:`EfaGpuNodeGroup`."""

    cluster: eks.Cluster
    node_role: aws.iam.Role
    cluster_security_group_id: pulumi.Input[str]
    """The EKS cluster security group: pulumi-eks attaches the EFA interfaces to it."""
    subnet_ids: pulumi.Input[list[str]]
    """Private subnets; pulumi-eks keeps only those in ``availability_zone``."""
    instance_type: InstanceType
    availability_zone: str
    node_count: int = 2
    efa: bool = True
    allow_single_node: bool = False
    root_volume_gib: int = 200
    extra_labels: dict[str, str] = field(default_factory=dict)
    hardening: NodeHardening = field(default_factory=NodeHardening)
    """IMDS hop limit and root-volume encryption, patched into pulumi-eks's EFA launch template."""


class EfaGpuNodeGroup(pulumi.ComponentResource):
    """GPU managed node group pinned to one AZ, in a cluster placement group, with EFA."""

    node_group: eks.ManagedNodeGroup
    labels: dict[str, str]
    efa_interfaces_per_node: int

    def __init__(self, name: str, args: EfaGpuNodeGroupArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ray-efa-eks:index:EfaGpuNodeGroup", name, None, opts)
        it = args.instance_type
        if it.gpus == 0:
            raise ValueError(f"EfaGpuNodeGroup {name}: {it.name} has no GPU")
        if args.efa and not it.efa_supported:
            raise ValueError(f"EfaGpuNodeGroup {name}: {it.name} does not support EFA; pick an EFA type or set efa=False")
        if args.node_count < 0:
            raise ValueError(f"EfaGpuNodeGroup {name}: node_count must be >= 0, got {args.node_count}")
        if args.efa and args.node_count == 1 and not args.allow_single_node:
            raise ValueError(f"EfaGpuNodeGroup {name}: EFA on one node has no peer; use >= 2 nodes or allow_single_node=True")
        self.labels = {ROLE_LABEL: GPU_ROLE, "ray-efa-eks/instance-type": it.name, **args.extra_labels}
        self.efa_interfaces_per_node = it.max_efa_interfaces if args.efa else 0
        child = pulumi.ResourceOptions(parent=self)
        if args.efa:
            # EKS already allows ingress from itself; EFA also needs egress to itself.
            aws.vpc.SecurityGroupEgressRule(
                f"{name}-efa-self-egress",
                security_group_id=args.cluster_security_group_id,
                referenced_security_group_id=args.cluster_security_group_id,
                ip_protocol="-1",
                description="EFA: all traffic to the security group itself",
                opts=child,
            )
        n = args.node_count
        efa_args = {"enable_efa_support": True, "placement_group_availability_zone": args.availability_zone} if args.efa else {}
        self.node_group = eks.ManagedNodeGroup(
            f"{name}-mng",
            cluster=args.cluster,
            node_role=args.node_role,
            subnet_ids=args.subnet_ids,
            instance_types=[it.name],
            ami_type="AL2023_x86_64_NVIDIA",
            gpu=None,
            enable_imd_sv2=True,
            disk_size=args.root_volume_gib,
            # EKS requires max_size >= 1; desired = min = 0 parks the group.
            scaling_config={"desired_size": n, "min_size": n, "max_size": max(n, 1)},
            labels=self.labels,
            taints=[GPU_TAINT],
            **efa_args,
            opts=pulumi.ResourceOptions(parent=self, transforms=[args.hardening.transform()]),
        )
        self.register_outputs({"labels": self.labels, "efaInterfacesPerNode": self.efa_interfaces_per_node})
