"""Node groups: the system node (operator + Ray head) and the EFA GPU nodes.

Both are pulumi-eks ``ManagedNodeGroup``s on a launch template the component declares itself
(components/nodes/launch_template.py: IMDSv2 hop limit 1, encrypted gp3 root volume, no AMI id so EKS
bootstraps the EKS-optimized AMI of ``amiType``). The GPU group does what pulumi-eks's
``enableEfaSupport`` did (read from its source, nodejs/eks/nodes/nodegroup.ts and instances.ts) without
it: one EFA interface per network card in the EKS *cluster* security group, the subnets filtered to the
GPU AZ (``aws.ec2.get_subnets``, as its ``filterEfaSubnets``), and a ``cluster`` placement group, now
only on demand: with an ODCR or a Capacity Block (components/nodes/capacity.py) the template targets the
reservation instead. EKS gives the cluster security group an all-traffic ingress rule from itself and
all egress to 0.0.0.0/0, but EFA's documented requirement is an explicit self rule both ways, so the
component adds the missing egress one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks

from .capacity import CAPACITY_BLOCK, RESERVATION, GpuCapacity, reservation_problem
from ..config.errors import ArgError
from .instances import InstanceType
from .launch_template import (
    FAST_IMAGE_PULL,
    Gp3Performance,
    NodeHardening,
    NodeLaunchTemplateArgs,
    data_fingerprint,
    efa_network_interfaces,
    launch_template_ref,
    node_config_user_data,
    node_launch_template,
)
from .rollout_guards import gpu_template_hooks, system_template_hooks, template_tags
from ..kube import GPU_ROLE, GPU_TAINT, POD_EFFECT, ROLE_LABEL, SYSTEM_ROLE


NODE_GROUP_TYPE = "aws:eks/nodeGroup:NodeGroup"
"""The child pulumi-eks's ManagedNodeGroup registers (the EKS API's node group)."""


def node_repair(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
    """Transform: EKS node auto repair on (``nodeRepairConfig.enabled``) on the managed node group's EKS child.

    pulumi-aws 7.51.1's ``aws.eks.NodeGroup`` has ``node_repair_config`` (enabled, thresholds, per-condition
    overrides); pulumi-eks 4.4.0's ``ManagedNodeGroup`` does not pass it through (nothing in the package mentions
    repair), so it is set on the child, as :func:`.cluster.no_creator_admin` does for the cluster. EKS then replaces
    (or, for ``AcceleratedHardwareReady``, reboots) a node whose condition the node monitoring agent reports false
    for its grace time (docs.aws.amazon.com/eks/latest/userguide/node-repair.html); the agent is the stack's
    ``eks-node-monitoring-agent`` add-on."""
    if args.type_ != NODE_GROUP_TYPE:
        return None
    repair = dict(args.props.get("nodeRepairConfig") or {})
    repair["enabled"] = True
    return pulumi.ResourceTransformResult(props={**args.props, "nodeRepairConfig": repair}, opts=args.opts)


@dataclass
class SystemNodeGroupArgs:
    """Inputs of :class:`SystemNodeGroup`."""

    cluster: eks.Cluster
    """The pulumi-eks cluster (``Cluster.eks``) the nodes join."""
    node_role: aws.iam.Role
    """The nodes' IAM role (``Cluster.node_role``), registered with the cluster."""
    subnet_ids: pulumi.Input[list[str]]
    """Private subnets the node may launch in (``Network.private_subnet_ids``)."""
    instance_type: InstanceType
    """Catalogue entry of the node type (no GPU: the operator, the Ray head and the add-ons)."""
    node_count: int = 1
    """Nodes of the group (desired = min; max at least 1, as EKS requires)."""
    root_volume_gib: int = 100
    """The Ray head and the EFA check Job pull the DLC image here (tens of GB, compressed layers plus unpacked)."""
    hardening: NodeHardening = field(default_factory=NodeHardening)
    """IMDS hop limit and root-volume encryption, written into the group's own launch template."""
    kubernetes_version: str | None = None
    """The control plane's MAJOR.MINOR: the nodes follow it (see :data:`VERSION_NOTE`). None: EKS's default at
    creation only (the cluster's version then), never updated afterwards."""


VERSION_NOTE = """Managed node groups carry the control plane's version explicitly: pulumi-eks 4.4.0 fills
``version`` from the cluster only when no launch template is given (nodejs/eks/nodes/nodegroup.ts,
createManagedNodeGroup), and both groups use this stack's own template, so without it a node group stays on the
version it was created with while the control plane moves on, and EKS wants the managed nodes on the control
plane's minor before the next control-plane update ("Update existing cluster to new Kubernetes version"). A node
group depends on its cluster, so one ``pulumi up`` updates the control plane first, then the nodes (EKS recycles
them: "Managed node update behavior"); EKS refuses a node group version above the control plane's ("Update a
managed node group for your cluster")."""


class SystemNodeGroup(pulumi.ComponentResource):
    """Managed node group for the KubeRay operator, the Ray head and cluster add-ons."""

    node_group: eks.ManagedNodeGroup
    launch_template: aws.ec2.LaunchTemplate
    labels: dict[str, str]
    template_fingerprint: pulumi.Output[str]
    """Hash of the launch template's resolved data: it changes exactly when EKS replaces the node."""

    def __init__(self, name: str, args: SystemNodeGroupArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ray-efa-eks:index:SystemNodeGroup", name, None, opts)
        if args.instance_type.gpus:
            raise ValueError(
                f"SystemNodeGroup {name}: {args.instance_type.name} has GPUs; use a CPU type for the system node"
            )
        self.labels = {ROLE_LABEL: SYSTEM_ROLE}
        n = args.node_count
        child = pulumi.ResourceOptions(parent=self)
        lt_args = NodeLaunchTemplateArgs(
            hardening=args.hardening,
            root_volume_gib=args.root_volume_gib,
            template_tags=template_tags(SYSTEM_ROLE, n, "on-demand", args.kubernetes_version or ""),
            hooks=system_template_hooks(f"{name}-lt"),
        )
        self.launch_template = node_launch_template(f"{name}-lt", lt_args, child)
        self.template_fingerprint = data_fingerprint(f"{name}-lt", lt_args)
        self.node_group = eks.ManagedNodeGroup(
            f"{name}-mng",
            cluster=args.cluster,
            node_role=args.node_role,
            subnet_ids=args.subnet_ids,
            instance_types=[args.instance_type.name],
            ami_type="AL2023_x86_64_STANDARD",
            version=args.kubernetes_version,  # VERSION_NOTE
            launch_template=launch_template_ref(self.launch_template),
            scaling_config={"desired_size": n, "min_size": n, "max_size": max(n, 1)},
            labels=self.labels,
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(transforms=[node_repair])),
        )
        self.register_outputs({"labels": self.labels})


@dataclass
class EfaGpuNodeGroupArgs:
    """Inputs of :class:`EfaGpuNodeGroup`."""

    cluster: eks.Cluster
    """The pulumi-eks cluster (``Cluster.eks``) the nodes join."""
    node_role: aws.iam.Role
    """The nodes' IAM role (``Cluster.node_role``), registered with the cluster."""
    cluster_security_group_id: pulumi.Input[str]
    """The EKS cluster security group: the EFA interfaces join it."""
    subnet_ids: pulumi.Input[list[str]]
    """Private subnets; the component keeps only those in ``availability_zone``."""
    instance_type: InstanceType
    """Catalogue entry of the GPU type: GPUs, EFA interfaces and what the launch template gives them."""
    availability_zone: str
    """The one AZ of the group: EFA traffic does not cross AZs."""
    node_count: int = 2
    """GPU nodes (0 parks them); with ``scale_from_zero`` the group's maximum."""
    efa: bool = True
    """EFA interfaces on every node (the type must support EFA); False: the default network interface only."""
    allow_single_node: bool = False
    """Accept EFA on one node (no peer, so EFA is never exercised between nodes)."""
    root_volume_gib: int = 200
    """Size of the gp3 root volume (the DLC image, tens of GB, is pulled here)."""
    extra_labels: dict[str, str] = field(default_factory=dict)
    """More Kubernetes labels on the nodes, beside the role and instance-type labels."""
    hardening: NodeHardening = field(default_factory=NodeHardening)
    """IMDS hop limit and root-volume encryption, written into the group's own launch template."""
    capacity: GpuCapacity = field(default_factory=GpuCapacity)
    """On demand (default), an ODCR or a Capacity Block: the launch template's target and the group's capacityType."""
    error_as: Callable[[ArgError], Exception] | None = None
    """How an ArgError found while deploying (the ODCR check names ``availability_zone``, ``instance_type``,
    ``node_count``, ``placement_group``) reaches the caller: as is when None; the umbrella passes
    ``config.stack_error`` (its ConfigError, in stack keys)."""
    kubernetes_version: str | None = None
    """The control plane's MAJOR.MINOR (see :data:`VERSION_NOTE`)."""
    workers_to_delete: int = 0
    """How many Ray worker pods this update deletes by name (gpuWorkersToDelete), for the scale-down guard."""
    autoscaled: bool = False
    """Ray's autoscaler runs the worker group (gpuScaleToZero): no scale-down guard (components/nodes/rollout_guards.py)."""
    scale_from_zero: bool = False
    """min 0 / max ``node_count`` and desired left to the Cluster Autoscaler (components/addons/cluster_autoscaler.py), with
    the node-template tags it needs at size 0 (:func:`scale_from_zero_tags`); False: ``node_count`` nodes, fixed."""
    startup_taints: list[dict[str, str]] = field(default_factory=list)
    """Taints a node joins with and loses once it has proven itself (the node agent's fabric proof)."""
    root_volume_performance: Gp3Performance | None = None
    """Provisioned gp3 IOPS/throughput of the root volume, for the image pull of a node from zero (None: baseline)."""
    fast_image_pull: bool = False
    """nodeadm's ``FastImagePull`` feature gate in the launch template's user data (SOCI parallel pull and unpack)."""


class EfaGpuNodeGroup(pulumi.ComponentResource):
    """GPU managed node group pinned to one AZ, with EFA, in a cluster placement group on demand or in a reservation."""

    node_group: eks.ManagedNodeGroup
    launch_template: aws.ec2.LaunchTemplate
    placement_group: aws.ec2.PlacementGroup | None
    subnet_ids: pulumi.Output[list[str]]
    """The subnets the nodes use: those of ``subnet_ids`` in the GPU AZ."""
    labels: dict[str, str]
    efa_interfaces_per_node: int
    reserved_instances: pulumi.Output[Any] | None
    """The ODCR's instance count as EC2 describes it (reservation mode with a reservation id; else None): all of
    them are billed whether GPU nodes run or not."""
    template_fingerprint: pulumi.Output[str]
    """Hash of the launch template's resolved data: it changes exactly when EKS replaces every GPU node."""

    def __init__(self, name: str, args: EfaGpuNodeGroupArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ray-efa-eks:index:EfaGpuNodeGroup", name, None, opts)
        it = args.instance_type
        if it.gpus == 0:
            raise ValueError(f"EfaGpuNodeGroup {name}: {it.name} has no GPU")
        if args.efa and not it.efa_supported:
            raise ValueError(
                f"EfaGpuNodeGroup {name}: {it.name} does not support EFA; pick an EFA type or set efa=False"
            )
        if args.node_count < 0:
            raise ValueError(f"EfaGpuNodeGroup {name}: node_count must be >= 0, got {args.node_count}")
        if args.efa and args.node_count == 1 and not args.allow_single_node:
            raise ValueError(
                f"EfaGpuNodeGroup {name}: EFA on one node has no peer; use >= 2 nodes or allow_single_node=True"
            )
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
        self.subnet_ids = subnets_in_az(name, args.subnet_ids, args.availability_zone, child)
        self.placement_group = None
        # A Capacity Block's type goes in the launch template and nowhere else (EKS refuses it on the node group);
        # every other mode keeps it on the node group, and the launch template has none (launch-templates.html).
        in_template = args.capacity.mode == CAPACITY_BLOCK
        if args.efa and args.capacity.cluster_placement_group:
            self.placement_group = aws.ec2.PlacementGroup(f"{name}-pg", strategy="cluster", opts=child)
        lt_args = NodeLaunchTemplateArgs(
            hardening=args.hardening,
            root_volume_gib=args.root_volume_gib,
            network_interfaces=efa_network_interfaces(it, [args.cluster_security_group_id]) if args.efa else None,
            placement_group_name=self.placement_group.name if self.placement_group else args.capacity.placement_group,
            capacity=args.capacity,
            reservation_id=checked_reservation(name, it.name, args, child, self),
            instance_type=it.name if in_template else None,
            template_tags=template_tags(
                GPU_ROLE, n, args.capacity.mode, args.kubernetes_version or "", args.workers_to_delete, args.autoscaled
            ),
            hooks=gpu_template_hooks(f"{name}-lt"),
            root_volume_performance=args.root_volume_performance,
            user_data=node_config_user_data({FAST_IMAGE_PULL: True}) if args.fast_image_pull else None,
        )
        self.launch_template = node_launch_template(f"{name}-lt", lt_args, child)
        self.template_fingerprint = data_fingerprint(f"{name}-lt", lt_args)
        self.node_group = eks.ManagedNodeGroup(
            f"{name}-mng",
            cluster=args.cluster,
            node_role=args.node_role,
            subnet_ids=self.subnet_ids,
            instance_types=None if in_template else [it.name],
            ami_type="AL2023_x86_64_NVIDIA",
            version=args.kubernetes_version,  # VERSION_NOTE
            gpu=None,
            launch_template=launch_template_ref(self.launch_template),
            capacity_type=args.capacity.node_group_capacity_type,
            # EKS requires max_size >= 1; desired = min = 0 parks the group.
            # Fixed fleet: min 0: nothing scales this group but Pulumi, and a lower minimum lets the documented
            # scale-down terminate the chosen idle instances (EC2 Auto Scaling TerminateInstanceInAutoScalingGroup with
            # --should-decrement-desired-capacity refuses to go below the minimum; docs/upgrades.md).
            # From zero: the Cluster Autoscaler owns desired, pulumi up must not set it back (ignoreScalingChanges).
            scaling_config=(
                {"desired_size": 0, "min_size": 0, "max_size": max(n, 1)}
                if args.scale_from_zero
                else {"desired_size": n, "min_size": 0, "max_size": max(n, 1)}
            ),
            ignore_scaling_changes=True if args.scale_from_zero else None,
            labels=self.labels,
            taints=[GPU_TAINT, *args.startup_taints],
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(transforms=[node_repair])),
        )
        if args.scale_from_zero:
            asg = self.node_group.node_group.apply(_asg_name)
            for key, value in scale_from_zero_tags(it, args.efa, args.startup_taints).items():
                aws.autoscaling.Tag(
                    f"{name}-ca-" + re.sub(r'[^a-z0-9]+', '-', key[len(CA_TEMPLATE) :].lower()),
                    autoscaling_group_name=asg,
                    tag={"key": key, "value": value, "propagate_at_launch": False},
                    opts=child,
                )
        self.register_outputs({"labels": self.labels, "efaInterfacesPerNode": self.efa_interfaces_per_node})


CA_TEMPLATE = "k8s.io/cluster-autoscaler/node-template/"


def _asg_name(node_group: Any) -> Any:
    """The Auto Scaling group EKS made for a managed node group (``resources[0].autoscalingGroups[0].name``)."""
    if node_group is None:  # not known yet (a preview, or the offline plan's mocks)
        return None
    return node_group.resources.apply(lambda r: r[0].autoscaling_groups[0].name if r else None)


def scale_from_zero_tags(
    it: InstanceType, efa: bool, startup_taints: list[dict[str, str]] | None = None
) -> dict[str, str]:
    """The Cluster Autoscaler's node-template tags for a GPU group at size 0 (cloudprovider/aws/README.md).

    CPU, memory and ``nvidia.com/gpu`` come from the instance type, labels and taints from ``eks:DescribeNodegroup``;
    EFA interfaces are not derived from the type, so a pod asking for ``vpc.amazonaws.com/efa`` would never trigger
    a scale-up without this tag. The GPU count and the role label are tagged too, so the template does not hang on a
    DescribeNodegroup permission. Every taint the nodes join with is tagged as well (``taint/<key>:
    <value>:<Effect>``), the startup taint included: the template then says what a new node really carries, and
    the Cluster Autoscaler itself drops ``startup-taint.cluster-autoscaler.kubernetes.io/`` taints from a template
    before it simulates a pod on it (FAQ, "How does Cluster Autoscaler treat nodes with status/startup/ignore
    taints?"), so the startup taint never blocks the scale-up it is meant to follow.
    """
    tags = {
        f"{CA_TEMPLATE}resources/nvidia.com/gpu": str(it.gpus),
        f"{CA_TEMPLATE}label/{ROLE_LABEL}": GPU_ROLE,
        f"{CA_TEMPLATE}taint/{GPU_TAINT['key']}": f"{GPU_TAINT['value']}:NoSchedule",
    }
    for t in startup_taints or []:
        tags[f"{CA_TEMPLATE}taint/{t['key']}"] = f"{t.get('value', '')}:{POD_EFFECT[t['effect']]}"
    if efa:
        tags[f"{CA_TEMPLATE}resources/vpc.amazonaws.com/efa"] = str(it.max_efa_interfaces)
    return tags


def checked_reservation(
    name: str, instance_type: str, args: EfaGpuNodeGroupArgs, opts: pulumi.ResourceOptions, group: Any = None
) -> pulumi.Output[str] | None:
    """An ODCR id that resolves only when EC2's description of it fits the group (AZ, type, count, placement group).

    The reservation is read (``CapacityReservation.get``: a read, nothing is created) during preview, and the
    launch template's target waits for the check, so a mismatch fails the preview and no GPU node launches
    elsewhere. A resource group ARN is not checked (its reservations may differ); Capacity Blocks are checked by
    EfaRayCluster through ``aws.ec2.get_capacity_block_reservation`` before anything is registered.
    """
    cap = args.capacity
    if group is not None:
        group.reserved_instances = None
    if cap.mode != RESERVATION or cap.is_group or not cap.reservation:
        return None
    odcr = aws.ec2.CapacityReservation.get(f"{name}-odcr", cap.reservation, opts=opts)
    if group is not None:
        group.reserved_instances = odcr.instance_count
    rid = cap.reservation

    def check(values: list[Any]) -> str:
        az, itype, count, pg_arn = values
        if az is None and itype is None:
            return rid  # EC2 described nothing we can judge (offline plans of unknown ids)
        problem = reservation_problem(
            rid,
            {
                "availability_zone": az,
                "instance_type": itype,
                "instance_count": count,
                "placement_group_arn": pg_arn or "",
            },  # no group reads as empty
            instance_type,
            args.availability_zone,
            args.node_count,
            cap.placement_group,
        )
        if problem:
            raise args.error_as(problem) if args.error_as else problem
        return rid

    return pulumi.Output.all(
        odcr.availability_zone, odcr.instance_type, odcr.instance_count, odcr.placement_group_arn
    ).apply(check)


def subnets_in_az(
    name: str, subnet_ids: pulumi.Input[list[str]], availability_zone: str, opts: pulumi.ResourceOptions
) -> pulumi.Output[list[str]]:
    """The ids of ``subnet_ids`` in ``availability_zone`` (EC2 DescribeSubnets, as pulumi-eks's filterEfaSubnets).

    Fails the deployment when none is left, naming the AZ: a node group without a subnet in the GPU AZ
    would place nodes where neither EFA peers nor the reservation are.
    """
    found = aws.ec2.get_subnets_output(
        filters=[
            {"name": "availability-zone", "values": [availability_zone]},
            {"name": "subnet-id", "values": subnet_ids},
        ],
        opts=pulumi.InvokeOutputOptions(parent=opts.parent),
    )

    def ids(result: Any) -> list[str]:
        if not result.ids:
            raise ValueError(
                f"EfaGpuNodeGroup {name}: none of the subnets is in the GPU AZ {availability_zone}; "
                "pass that AZ's private subnet (Network.gpu_subnet_id)"
            )
        return sorted(result.ids)

    return found.apply(ids)
