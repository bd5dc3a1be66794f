"""The node groups of a stack, from pulumi-eks ManagedNodeGroup inputs or their EKS children: instance types,
size, subnets and zones, EFA interfaces, placement group and capacity (see tools/layout.py for the two sources)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..components.nodes.instances import CATALOGUE
from .layout import (
    GPU_RESOURCE,
    LAUNCH_TEMPLATE,
    MNG,
    NODE_GROUP,
    PLACEMENT_GROUP,
    SUBNET,
    UNKNOWN,
    Resource,
    Stack,
    dig,
)


@dataclass
class NodeGroup:
    """A managed node group: pulumi-eks ``ManagedNodeGroup`` (either shape) or a bare ``aws:eks/nodeGroup``."""

    resource: Resource
    props: dict[str, Any]
    """The node group settings: the MNG inputs (mocks) or the ``aws:eks/nodeGroup`` child's props (preview)."""
    instance_types: list[str]
    nodes: Any
    """Desired size (int), or UNKNOWN."""
    labels: dict[str, str]
    gpu: bool
    gpus_per_node: int | None
    efa_interfaces: Any
    """EFA interfaces per node (int) or UNKNOWN."""
    efa_source: str
    """Where ``efa_interfaces`` comes from: the launch template, or pulumi-eks's enableEfaSupport input."""
    placement_az: str | None
    placement_strategy: Any
    security_group_ids: Any
    """Security groups of the EFA interfaces (list, UNKNOWN, or [] when there are none)."""
    subnets: Any
    """Subnet resources the nodes land in (after pulumi-eks's AZ filter), or UNKNOWN."""
    subnet_ids: Any
    capacity_type: Any = "ON_DEMAND"
    """The node group's ``capacityType`` (ON_DEMAND, SPOT, CAPACITY_BLOCK) or UNKNOWN."""
    market_type: Any = None
    """The launch template's ``instanceMarketOptions.marketType`` (``capacity-block``, ``spot``) or None."""
    reservation: Any = None
    """The Capacity Reservation id or resource group ARN the launch template targets, None, or UNKNOWN."""
    max_nodes: Any = None
    """Scaled by the Cluster Autoscaler (``minSize`` < ``maxSize``): the most nodes it may run; None when fixed."""

    @property
    def azs(self) -> Any:
        """AZs of the node group's subnets (sorted), or UNKNOWN."""
        if self.subnets is UNKNOWN:
            return UNKNOWN
        azs = [dig(s.props, "availabilityZone") for s in self.subnets]
        if any(a is UNKNOWN or a is None for a in azs):
            return UNKNOWN
        return sorted(set(azs))

    @property
    def efa_enabled(self) -> bool:
        if isinstance(self.efa_interfaces, int) and self.efa_interfaces > 0:
            return True
        return self.efa_source == "pulumi-eks enableEfaSupport"


def _instance_gpus(instance_types: list[str]) -> int | None:
    known = [CATALOGUE[t] for t in instance_types if t in CATALOGUE]
    return known[0].gpus if known and len(known) == len(instance_types) else None


def _looks_gpu(props: dict[str, Any], instance_types: list[str]) -> bool:
    gpus = _instance_gpus(instance_types)
    if gpus is not None:
        return gpus > 0
    ami, taints = dig(props, "amiType"), dig(props, "taints")
    return (isinstance(ami, str) and ("NVIDIA" in ami or "GPU" in ami)) or any(
        isinstance(t, dict) and t.get("key") == GPU_RESOURCE for t in (taints if isinstance(taints, list) else [])
    )


def _efa_interfaces_of(template: Resource) -> tuple[Any, Any]:
    """(EFA interface count, their security group ids) from a launch template's props."""
    nis = dig(template.props, "networkInterfaces")
    if nis is UNKNOWN:
        return UNKNOWN, UNKNOWN
    nis = nis if isinstance(nis, list) else []
    if any(n is UNKNOWN or dig(n, "interfaceType") is UNKNOWN for n in nis):
        return UNKNOWN, UNKNOWN
    efa = [n for n in nis if isinstance(n, dict) and dig(n, "interfaceType") in ("efa", "efa-only")]
    groups: Any = []
    for n in efa:
        sgs = dig(n, "securityGroups")
        if sgs is UNKNOWN or (isinstance(sgs, list) and any(s is UNKNOWN for s in sgs)):
            groups = UNKNOWN
            break
        groups += [s for s in (sgs or []) if s not in groups]
    return len(efa), groups


def _known_list(value: Any) -> bool:
    return isinstance(value, list) and not any(v is UNKNOWN for v in value)


def _subnets_for(stack: Stack, ids: Any, owner: Resource | None, dep_prop: str = "subnetIds") -> Any:
    """Subnet resources named by ``ids``; falls back to ``owner``'s dependencies when the ids are unknown."""
    if _known_list(ids) and ids:
        found = [stack.resolve(i) for i in ids]
        if all(f is not None and f.type == SUBNET for f in found):
            return found
    if owner is not None and owner.deps.get(dep_prop):
        found = [stack.by_urn.get(u) for u in owner.deps[dep_prop]]
        subnets = [f for f in found if f is not None and f.type == SUBNET]
        if subnets:
            return subnets
    return UNKNOWN


def node_groups(stack: Stack) -> list[NodeGroup]:
    """Every managed node group of the stack, read from whichever shape it has."""
    groups = []
    for mng in stack.of_type(MNG):
        child_ng = next(iter(stack.children(mng, NODE_GROUP)), None)
        template = next(iter(stack.children(mng, LAUNCH_TEMPLATE)), None)
        pg = next(iter(stack.children(mng, PLACEMENT_GROUP)), None)
        props = {**mng.props, **(child_ng.props if child_ng else {})}
        efa_input = mng.props.get("enableEfaSupport") is True
        placement_az = mng.props.get("placementGroupAvailabilityZone")
        itypes = _str_list(props.get("instanceTypes"))
        # Our own launch template (components/nodes/launch_template.py) is the MNG's sibling: the mocks name it in the
        # MNG's launchTemplate input, a preview in the aws:eks/nodeGroup child's (by id, or by its dependency).
        template = template or template_of(stack, child_ng if child_ng is not None else mng)
        if not itypes and template is not None and isinstance(dig(template.props, "instanceType"), str):
            itypes = [dig(template.props, "instanceType")]  # a Capacity Block's type lives in the launch template
        if pg is None and template is not None:
            pg = _placement_group_of(stack, template)
        if template is not None:
            efa, sgs = _efa_interfaces_of(template)
            source = "launch template"
        elif child_ng is not None:  # preview shape without a custom launch template: no EFA interfaces
            efa, sgs, source = 0, [], "launch template"
        elif efa_input:  # mock shape: pulumi-eks adds one EFA interface per network card
            known = [CATALOGUE[t] for t in itypes if t in CATALOGUE]
            efa = known[0].max_efa_interfaces if known else UNKNOWN
            sgs, source = UNKNOWN, "pulumi-eks enableEfaSupport"
        else:
            efa, sgs, source = 0, [], "pulumi-eks inputs"
        if pg is not None:
            strategy = dig(pg.props, "strategy")
        elif template is not None and dig(template.props, "placement", "groupName") is UNKNOWN:
            strategy = UNKNOWN
        elif child_ng is None:
            strategy = "cluster" if efa_input else None
        else:
            strategy = None
        if child_ng is not None:
            subnet_ids = child_ng.props.get("subnetIds")
            subnets = _subnets_for(stack, subnet_ids, child_ng)
            pinned = pg is not None or (
                template is not None
                and dig(template.props, "capacityReservationSpecification", "capacityReservationTarget")
                not in (None, {})
            )
            if (
                pinned
                and not _known_list(subnet_ids)
                and subnets is not UNKNOWN
                and len({dig(s.props, "availabilityZone") for s in subnets}) > 1
            ):
                # candidates only: pulumi-eks (placement AZ) or EfaGpuNodeGroup (GPU AZ) filters them, unseen here
                subnets = UNKNOWN
        else:
            subnet_ids = mng.props.get("subnetIds")
            subnets = _subnets_for(stack, subnet_ids, mng)
        if efa_input and isinstance(placement_az, str) and subnets is not UNKNOWN:
            # pulumi-eks keeps only the subnets in placementGroupAvailabilityZone (filterEfaSubnets).
            subnets = [s for s in subnets if dig(s.props, "availabilityZone") in (placement_az, UNKNOWN)]
        groups.append(
            _node_group(mng, props, itypes, efa, source, placement_az, strategy, sgs, subnets, subnet_ids, template)
        )
    for ng in stack.of_type(NODE_GROUP):
        parent = stack.parent_of(ng)
        if parent is not None and parent.type == MNG:
            continue
        props = ng.props
        itypes = _str_list(props.get("instanceTypes"))
        template = template_of(stack, ng)
        if not itypes and template is not None and isinstance(dig(template.props, "instanceType"), str):
            itypes = [dig(template.props, "instanceType")]
        if template is not None:
            efa, sgs = _efa_interfaces_of(template)
            pg = _placement_group_of(stack, template)
            pg_name = dig(template.props, "placement", "groupName")
            strategy = dig(pg.props, "strategy") if pg else (UNKNOWN if pg_name is UNKNOWN else None)
        elif dig(props, "launchTemplate") in (None, {}):
            efa, sgs, strategy = 0, [], None
        else:
            efa, sgs, strategy = UNKNOWN, UNKNOWN, UNKNOWN
        subnets = _subnets_for(stack, props.get("subnetIds"), ng)
        groups.append(
            _node_group(
                ng,
                props,
                itypes,
                efa,
                "launch template",
                None,
                strategy,
                sgs,
                subnets,
                props.get("subnetIds"),
                template,
            )
        )
    return groups


def _placement_group_of(stack: Stack, template: Resource) -> Resource | None:
    """The placement group a launch template names (by name or id; a preview: by its dependency)."""
    pg_name = dig(template.props, "placement", "groupName")
    if isinstance(pg_name, str) and pg_name:
        found = next((p for p in stack.of_type(PLACEMENT_GROUP) if pg_name in (dig(p.props, "name"), p.id)), None)
        if found is not None:
            return found
    for urn in template.deps.get("placement", []):
        dep = stack.by_urn.get(urn)
        if dep is not None and dep.type == PLACEMENT_GROUP:
            return dep
    return None


def template_of(stack: Stack, ng: Resource) -> Resource | None:
    """The launch template a node group names in ``launchTemplate.id`` (or depends on for it)."""
    ref = dig(ng.props, "launchTemplate", "id")
    found = stack.resolve(ref)
    if found is not None and found.type == LAUNCH_TEMPLATE:
        return found
    for urn in ng.deps.get("launchTemplate", []):
        dep = stack.by_urn.get(urn)
        if dep is not None and dep.type == LAUNCH_TEMPLATE:
            return dep
    return None


def _node_group(
    r: Resource,
    props: dict,
    itypes: list[str],
    efa: Any,
    source: str,
    placement_az: Any,
    strategy: Any,
    sgs: Any,
    subnets: Any,
    subnet_ids: Any,
    template: Resource | None = None,
) -> NodeGroup:
    desired = dig(props, "scalingConfig", "desiredSize")
    labels = props.get("labels") if isinstance(props.get("labels"), dict) else {}
    lt = template.props if template is not None else {}
    target = dig(lt, "capacityReservationSpecification", "capacityReservationTarget")
    if isinstance(target, dict):  # an id only ``up`` knows (a reservation created in this run) is UNKNOWN, not None
        named = [target.get(k) for k in ("capacityReservationId", "capacityReservationResourceGroupArn")]
        reservation = next((v for v in named if v), UNKNOWN if any(v is UNKNOWN for v in named) else None)
    else:
        reservation = UNKNOWN if target is UNKNOWN else None
    return NodeGroup(
        r,
        props,
        itypes,
        desired if desired is not None else UNKNOWN,
        labels,
        _looks_gpu(props, itypes),
        _instance_gpus(itypes),
        efa,
        source,
        placement_az if isinstance(placement_az, str) else None,
        strategy,
        sgs,
        subnets,
        subnet_ids,
        props.get("capacityType", "ON_DEMAND"),
        dig(lt, "instanceMarketOptions", "marketType"),
        reservation,
        _scaled_max(props),
    )


def _scaled_max(props: dict) -> int | None:
    """maxSize of a node group whose size the Cluster Autoscaler sets (pulumi-eks ``ignoreScalingChanges`` and
    minSize < maxSize), else None (fixed, or parked: 0/0 with EKS's minimum maxSize 1)."""
    lo, hi = dig(props, "scalingConfig", "minSize"), dig(props, "scalingConfig", "maxSize")
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (lo, hi)) or lo >= hi:
        return None
    if props.get("ignoreScalingChanges") is not True:
        return None
    return int(hi)


def _str_list(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def gpu_node_groups(stack: Stack) -> list[NodeGroup]:
    return [g for g in node_groups(stack) if g.gpu]
