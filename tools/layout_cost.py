"""What a stack's nodes and control planes cost per hour, as their capacity is billed (on demand, ODCR, Capacity
Block)."""

from __future__ import annotations


from ..components.cluster import eks_versions
from ..components.nodes.cost import (
    CAPACITY_BLOCK,
    ON_DEMAND,
    RESERVATION,
    capacity_notes,
    control_plane_note,
    hourly_usd,
)
from ..components.nodes.instances import CATALOGUE, NoPrice
from .layout import CAPACITY_RESERVATION, EKS_CLUSTER, EKS_COMPONENT, NAT_GATEWAY, Stack, dig
from .layout_node_groups import NodeGroup, node_groups

VPC_ENDPOINT = "aws:ec2/vpcEndpoint:VpcEndpoint"


def capacity_mode(g: NodeGroup) -> str:
    """How a node group's instances are billed: on-demand, reservation (an ODCR) or capacity-block."""
    if g.market_type == "capacity-block" or g.capacity_type == "CAPACITY_BLOCK":
        return CAPACITY_BLOCK
    return RESERVATION if isinstance(g.reservation, str) and g.reservation else ON_DEMAND


def reserved_instances(stack: Stack, g: NodeGroup) -> int | None:
    """The instance count of the ODCR a node group targets, as the read reservation says (None: not known)."""
    if not isinstance(g.reservation, str) or not g.reservation:
        return None
    for r in stack.of_type(CAPACITY_RESERVATION):
        if g.reservation in (r.id, dig(r.props, "id")) and isinstance(dig(r.props, "instanceCount"), (int, float)):
            return int(dig(r.props, "instanceCount"))
    return None


def cluster_versions(stack: Stack) -> list[str | None]:
    """The Kubernetes version of each EKS cluster (None where not set or unknown)."""
    out = []
    for c in [*stack.of_type(EKS_COMPONENT), *stack.of_type(EKS_CLUSTER)]:
        parent = stack.parent_of(c)
        if c.type == EKS_CLUSTER and parent is not None and parent.type == EKS_COMPONENT:
            continue
        v = dig(c.props, "version")
        out.append(v if isinstance(v, str) else None)
    return out


def interface_endpoint_azs(stack: Stack) -> int:
    """Interface VPC endpoints x their subnets (one network interface, one hourly charge, per AZ)."""
    return sum(
        len(subnets)
        for r in stack.of_type(VPC_ENDPOINT)
        if dig(r.props, "vpcEndpointType") == "Interface" and isinstance(subnets := dig(r.props, "subnetIds"), list)
    )


def hourly_cost(stack: Stack, region: str, idle: bool = False) -> tuple[float | None, list[str]]:
    """USD/hour of nodes as their capacity is billed (on demand: running nodes; ODCR: every reserved instance; Capacity
    Block: nothing, paid up front) + EKS control planes at their version's rate today + NAT gateways; (None, why)
    when a price is missing. A group the Cluster Autoscaler sizes counts at its maximum, or with ``idle`` at its
    size with no job (its minimum)."""
    nodes, missing = [], []
    for g in node_groups(stack):
        if not isinstance(g.nodes, int):
            missing.append(f"{g.resource.name}: node count unknown")
            continue
        mode = capacity_mode(g)
        running = g.max_nodes if g.max_nodes is not None and not idle else g.nodes
        count = 0 if mode == CAPACITY_BLOCK else max(running, reserved_instances(stack, g) or 0)
        if count == 0:
            continue
        types = [CATALOGUE[t] for t in g.instance_types if t in CATALOGUE]
        if not types:
            missing.append(f"{g.resource.name}: no catalogue price for {g.instance_types}")
            continue
        nodes.append((types[0], count))
    if missing:
        return None, missing
    planes = sum(
        eks_versions.control_plane_usd_hour(v) if v else eks_versions.STANDARD_USD_HOUR for v in cluster_versions(stack)
    )
    try:
        return round(
            hourly_usd(
                region, nodes, 0, len(stack.of_type(NAT_GATEWAY)), interface_endpoint_azs=interface_endpoint_azs(stack)
            )
            + planes,
            4,
        ), []
    except NoPrice as e:  # a region without figures: say so, never borrow another region's
        return None, [str(e)]


def cost_notes(stack: Stack, region: str) -> list[str]:
    """What the GPU capacity costs and what stops it, and the control plane's rate (its version's support state)."""
    notes = []
    for g in node_groups(stack):
        types = [CATALOGUE[t] for t in g.instance_types if t in CATALOGUE]
        mode = capacity_mode(g)
        if not g.gpu or not types or (mode == ON_DEMAND and not isinstance(g.nodes, int)):
            continue
        count = g.max_nodes if g.max_nodes is not None else (g.nodes if isinstance(g.nodes, int) else 0)
        notes += capacity_notes(
            mode,
            types[0],
            region,
            count,
            reserved_instances(stack, g),
            g.reservation if isinstance(g.reservation, str) else None,
            scale_from_zero=g.max_nodes is not None,
        )
    notes += [control_plane_note(v) for v in cluster_versions(stack)]
    warnings = [w for v in cluster_versions(stack) if v and (w := eks_versions.version_warning(v))]
    return notes + [f"warning: {w}" for w in warnings]
