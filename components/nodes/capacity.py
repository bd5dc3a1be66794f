"""How the GPU nodes get capacity: On-Demand, an On-Demand Capacity Reservation (ODCR), or a Capacity Block for ML.

Large EFA types are rarely available on demand; teams hold them as reservations. Each mode needs
different launch-template fields and node-group settings (EKS user guide, "Capacity Blocks for ML"
with managed node groups; EC2 launch template ``CapacityReservationSpecification``):

=================  ==============================  =====================================  ================  ===============
mode               launch template target          ``instanceMarketOptions.marketType``   MNG capacityType  placement group
=================  ==============================  =====================================  ================  ===============
on-demand          (none)                          (none)                                 ON_DEMAND         cluster (EFA)
reservation        reservation id or group ARN     (none)                                 ON_DEMAND         none
capacity-block     reservation id                  capacity-block                         CAPACITY_BLOCK    none
=================  ==============================  =====================================  ================  ===============

A new cluster placement group next to a reservation makes launches fail with InsufficientInstanceCapacity
(the reserved capacity need not sit where the group lands) and a Capacity Block is already placed by EC2,
so only on-demand EFA nodes get one of their own; an ODCR that was created *in* a cluster placement group
(AWS's advice for EFA) names that group in ``gpuPlacementGroupName`` and the template uses it.

A reservation lives in one AZ: the GPU AZ must be that AZ, so the stack names it in ``availabilityZone``
(preflight prints it). For a Capacity Block the program asks EC2 (``aws.ec2.get_capacity_block_reservation``)
and refuses a mismatch before any resource is registered; pulumi-aws has no data source for an ODCR, so
EfaGpuNodeGroup reads it as a resource (``aws.ec2.CapacityReservation.get``, a read) and its launch
template's target waits for the same check.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..config.errors import ArgError

ON_DEMAND = "on-demand"
RESERVATION = "reservation"
CAPACITY_BLOCK = "capacity-block"
CAPACITY_MODES = (ON_DEMAND, RESERVATION, CAPACITY_BLOCK)

RESERVATION_ID = re.compile(r"cr-(?:[0-9a-f]{8}|[0-9a-f]{17})")
"""EC2 Capacity Reservation ids (ODCRs and Capacity Blocks alike): ``cr-`` + 8 or 17 hex digits."""
RESOURCE_GROUP_ARN = re.compile(
    r"arn:aws(?:-[a-z]+)*:resource-groups:([a-z0-9-]+):(\d{12}):group/[A-Za-z0-9._-]{1,300}"
)
"""A Capacity Reservation resource group (``AWS::EC2::CapacityReservationPool``): launches use any ODCR in it."""

BLOCK_TERMINATION_LEAD_MINUTES = 30
"""EC2 starts terminating a Capacity Block's instances 30 minutes before its end (a warning event comes 40 before)."""
DEAD_BLOCK_STATES = ("expired", "cancelled", "failed", "unsupported", "payment-failed")
"""States in which a block never (again) runs instances; ``payment-failed``: the purchase was not paid, it never starts."""
PENDING_BLOCK_STATES = ("scheduled", "payment-pending", "pending")
"""A block bought but not started: instances cannot launch into it yet."""


@dataclass(frozen=True)
class GpuCapacity:
    """Which capacity the GPU launch template targets; built from ``gpuCapacity`` / ``gpuCapacityReservationId``."""

    mode: str = ON_DEMAND
    """on-demand | reservation | capacity-block."""
    reservation: str | None = None
    """A Capacity Reservation id (``cr-...``) or, in reservation mode, a reservation resource group ARN."""
    placement_group: str | None = None
    """Reservation mode: the existing cluster placement group the ODCR was created in (the launch template names it)."""

    def __post_init__(self) -> None:
        problem = target_problem(self.mode, self.reservation) or placement_problem(self.mode, self.placement_group)
        if problem:  # ArgError is a ValueError naming this class's fields
            raise problem

    @property
    def is_group(self) -> bool:
        return bool(self.reservation and self.reservation.startswith("arn:"))

    @property
    def node_group_capacity_type(self) -> str:
        """The managed node group's ``capacityType``."""
        return "CAPACITY_BLOCK" if self.mode == CAPACITY_BLOCK else "ON_DEMAND"

    @property
    def cluster_placement_group(self) -> bool:
        """Whether EFA nodes get a cluster placement group: only on demand (it conflicts with reservations)."""
        return own_cluster_placement_group(self.mode)

    def capacity_reservation_specification(self) -> dict[str, Any] | None:
        """``capacity_reservation_specification`` of the launch template (None on demand: EC2's default, open)."""
        if self.mode == ON_DEMAND:
            return None
        key = "capacity_reservation_resource_group_arn" if self.is_group else "capacity_reservation_id"
        # With a target set, EC2 wants the preference omitted or capacity-reservations-only: omitted.
        return {"capacity_reservation_target": {key: self.reservation}}

    def instance_market_options(self) -> dict[str, Any] | None:
        """``instance_market_options`` of the launch template: a Capacity Block is its own market."""
        return {"market_type": CAPACITY_BLOCK} if self.mode == CAPACITY_BLOCK else None


def target_problem(mode: str, reservation: str | None) -> ArgError | None:
    """The mode/target combination that cannot launch (naming ``mode`` / ``reservation``), else None. No
    instance-type rules here."""
    if mode not in CAPACITY_MODES:
        return ArgError("mode", mode, f"must be one of {', '.join(CAPACITY_MODES)}")
    if mode == ON_DEMAND:
        if reservation:
            return ArgError(
                "reservation",
                reservation,
                lambda n: (
                    f"is set but {n('mode')} is on-demand; set "
                    f"{n('mode')}: reservation (ODCR) or capacity-block, or remove the id"
                ),
            )
        return None
    if not reservation:
        what = (
            "the Capacity Block's reservation id (cr-...)"
            if mode == CAPACITY_BLOCK
            else "the ODCR id (cr-...) or its resource group ARN (arn:aws:resource-groups:REGION:ACCOUNT:group/NAME)"
        )
        return ArgError("reservation", reservation, lambda n: f"{n('mode')} {mode} needs {what}")
    if RESERVATION_ID.fullmatch(reservation):
        return None
    if RESOURCE_GROUP_ARN.fullmatch(reservation):
        if mode == CAPACITY_BLOCK:
            return ArgError(
                "reservation",
                reservation,
                "a Capacity Block is targeted by its own id (cr-...), not a "
                "resource group; aws ec2 describe-capacity-reservations --filters "
                "Name=reservation-type,Values=capacity-block lists them",
            )
        return None
    return ArgError(
        "reservation",
        reservation,
        "must be a reservation id (cr- + 8 or 17 hex digits) or a resource "
        "group ARN (arn:aws:resource-groups:REGION:ACCOUNT:group/NAME)",
    )


PLACEMENT_GROUP_NAME = re.compile(r"(?!arn:)[!-~](?:[ -~]{0,253}[!-~])?")
"""A placement group name as EC2 takes it: up to 255 ASCII characters (CreatePlacementGroup,
https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CreatePlacementGroup.html), so '/' is allowed (the
reservation check reads the name as all of the ARN after ``placement-group/``). Refused: an ARN pasted in its place,
and leading or trailing blanks (a copy slip: EC2 would look for a group of that exact name)."""


def own_cluster_placement_group(mode: str) -> bool:
    """Whether EFA nodes in ``mode`` get a cluster placement group of the stack's own: only on demand (a new group
    beside a reservation makes launches fail; EC2 places a Capacity Block itself). Preflight asks EC2 by this rule."""
    return mode == ON_DEMAND


def placement_problem(mode: str, placement_group: str | None) -> ArgError | None:
    """``placement_group`` when it does not fit the mode, else None."""
    if placement_group is None:
        return None
    if mode != RESERVATION:
        why = (
            "the stack creates its own cluster placement group on demand"
            if mode == ON_DEMAND
            else "EC2 places a Capacity Block itself; a placement group conflicts with it"
        )
        return ArgError(
            "placement_group", placement_group, lambda n: f"only for {n('mode')} reservation ({why}); remove it"
        )
    if not PLACEMENT_GROUP_NAME.fullmatch(placement_group):
        return ArgError(
            "placement_group",
            placement_group,
            "must be a placement group name (up to 255 ASCII "
            "characters: what follows placement-group/ in the ODCR's "
            "PlacementGroupArn), not the ARN",
        )
    return None


def config_problem(
    mode: str,
    reservation: str | None,
    instance_type: Any,
    availability_zone: str | None,
    region: str,
    placement_group: str | None = None,
) -> ArgError | None:
    """The first capacity argument that cannot work with this type/AZ/region (named as here), else None."""
    problem = target_problem(mode, reservation) or placement_problem(mode, placement_group)
    if problem:
        return problem
    if mode == ON_DEMAND:
        return None
    if mode == CAPACITY_BLOCK and not instance_type.capacity_blocks:
        from .instances import CATALOGUE

        have = sorted(n for n, t in CATALOGUE.items() if t.capacity_blocks)
        return ArgError(
            "mode",
            mode,
            lambda n: (
                f"EC2 sells no Capacity Blocks of {instance_type.name}; use one of "
                f"{', '.join(have)}, or {n('mode')} reservation/on-demand"
            ),
        )
    if availability_zone is None:
        return ArgError(
            "availability_zone",
            None,
            lambda n: (
                f"{n('mode')} {mode} needs the reservation's AZ here (a "
                "reservation lives in one AZ); `ray-efa-eks preflight --capacity-reservation-id ID` prints it"
            ),
        )
    m = RESOURCE_GROUP_ARN.fullmatch(reservation or "")
    if m and m.group(1) != region:
        return ArgError(
            "reservation",
            reservation,
            f"the resource group is in {m.group(1)}, the stack in {region}; use a group of {region}",
        )
    return None


@dataclass(frozen=True)
class CapacityBlock:
    """What EC2 says about a Capacity Block (``DescribeCapacityReservations``)."""

    id: str
    availability_zone: str | None
    instance_type: str | None
    instance_count: int | None
    start_date: str | None
    end_date: str | None
    state: str | None


def block_problem(block: CapacityBlock, instance_type: str, availability_zone: str, node_count: int) -> ArgError | None:
    """The argument that cannot run in this block (``reservation``, ``availability_zone``, ``instance_type``,
    ``node_count``), else None. Unknown fields are not judged."""
    if block.state == "payment-failed":
        return ArgError(
            "reservation",
            block.id,
            lambda n: (
                "the Capacity Block is payment-failed: EC2 never starts "
                f"it, so its nodes would never launch; buy a new block or set {n('mode')}: on-demand"
            ),
        )
    if block.state in DEAD_BLOCK_STATES:
        return ArgError(
            "reservation",
            block.id,
            lambda n: (
                f"the Capacity Block is {block.state} (ended "
                f"{block.end_date}); buy a new block or set {n('mode')}: on-demand"
            ),
        )
    if block.availability_zone and block.availability_zone != availability_zone:
        return ArgError(
            "availability_zone",
            availability_zone,
            lambda n: (
                f"the Capacity Block {block.id} is in "
                f"{block.availability_zone}; set {n('availability_zone')}: {block.availability_zone}"
            ),
        )
    if block.instance_type and block.instance_type != instance_type:
        return ArgError(
            "instance_type",
            instance_type,
            lambda n: (
                f"the Capacity Block {block.id} holds "
                f"{block.instance_type}; set {n('instance_type')}: {block.instance_type}"
            ),
        )
    if block.instance_count is not None and node_count > block.instance_count:
        return ArgError(
            "node_count",
            node_count,
            f"the Capacity Block {block.id} holds {block.instance_count} instances; use at most {block.instance_count}",
        )
    return None


def reservation_problem(
    reservation_id: str,
    described: dict[str, Any],
    instance_type: str,
    availability_zone: str,
    node_count: int,
    placement_group: str | None,
) -> ArgError | None:
    """The argument that cannot launch into this ODCR as EC2 describes it, else None.

    ``described``: availability_zone, instance_type, instance_count, placement_group_arn (None = not known, not judged).
    An ODCR made in a cluster placement group serves only instances launched into that group, and one made outside
    any group serves none launched into one, so the group must match too.
    """
    az = described.get("availability_zone")
    if az and az != availability_zone:
        return ArgError(
            "availability_zone",
            availability_zone,
            lambda n: f"the reservation {reservation_id} is in {az}; set {n('availability_zone')}: {az}",
        )
    itype = described.get("instance_type")
    if itype and itype != instance_type:
        return ArgError(
            "instance_type",
            instance_type,
            lambda n: f"the reservation {reservation_id} holds {itype}; set {n('instance_type')}: {itype}",
        )
    count = described.get("instance_count")
    if count is not None and node_count > int(count):
        return ArgError(
            "node_count",
            node_count,
            f"the reservation {reservation_id} holds {int(count)} instances; use at most {int(count)}",
        )
    pg_arn = described.get("placement_group_arn")
    if pg_arn is not None:
        # arn:aws:ec2:REGION:ACCOUNT:placement-group/NAME; EC2 limits NAME only to 255 ASCII characters
        # (CreatePlacementGroup, https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CreatePlacementGroup.html),
        # so NAME is all the text after the first '/', which may hold another '/'
        group = pg_arn.partition("/")[2] or None
        if group != placement_group:
            return ArgError(
                "placement_group",
                placement_group,
                lambda n: (
                    f"set {n('placement_group')}: {group} (the reservation was made in that cluster placement group)"
                    if group
                    else f"remove {n('placement_group')}: the reservation is in no placement group"
                ),
            )
    return None


def read_capacity_block(reservation_id: str) -> CapacityBlock:
    """The block as EC2 reports it, through the AWS provider (an invoke: runs at preview, before any resource)."""
    import pulumi_aws as aws

    r = aws.ec2.get_capacity_block_reservation(id=reservation_id)
    count = r.instance_count
    return CapacityBlock(
        reservation_id,
        r.availability_zone or None,
        r.instance_type or None,
        int(count) if count is not None else None,
        r.start_date or None,
        r.end_date or None,
        r.state or None,
    )
