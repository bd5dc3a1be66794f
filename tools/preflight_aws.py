"""Preflight's AWS client side: read-only EC2 and Service Quotas calls, each paginated, bounded and classified
(denied or not implemented: :class:`Unanswered`, naming the IAM action that would answer it). ``recommend_az`` and
``reservation_az`` can be reused by the Pulumi program and other tools; what the answers mean is decided in
``tools/preflight_checks.py``."""

from __future__ import annotations

import re
from typing import Any

import botocore.exceptions
from botocore.parsers import ResponseParserError

DENIED_CODES = {
    "AccessDenied",
    "AccessDeniedException",
    "UnauthorizedOperation",
    "UnauthorizedException",
}

QUOTA_G_VT = "L-DB2E81BA"
QUOTA_P = "L-417A185B"
QUOTA_STANDARD = "L-1216C47A"


class PreflightError(Exception):
    """Credentials, endpoint or unexpected API error (CLI exit code 2)."""


STANDARD_FAMILIES = frozenset(("a", "c", "d", "h", "i", "m", "r", "t", "z", "im", "is"))
"""Family letters of "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances"; Im4gn and Is4gen are I."""


def quota_code_for(instance_type: str) -> str | None:
    """On-Demand vCPU quota code of the family of ``instance_type`` (its leading letters), or None."""
    prefix = re.match(r"[a-z]*", instance_type.lower()).group(0)  # always matches, perhaps empty
    if prefix in ("g", "gr", "vt"):  # "Running On-Demand G and VT instances": Gr6 is a G6 variant (its L4 GPUs)
        return QUOTA_G_VT
    if prefix == "p":
        return QUOTA_P
    if prefix in STANDARD_FAMILIES:
        return QUOTA_STANDARD
    return None


def error_code(err: botocore.exceptions.ClientError) -> str:
    """The AWS error code of a refused call ("" when the response has none)."""
    return err.response.get("Error", {}).get("Code", "")


def _is_denied(err: botocore.exceptions.ClientError) -> bool:
    return error_code(err) in DENIED_CODES


def ec2_and_quota_clients(session_or_clients: Any) -> tuple[Any, Any]:
    """Accept a boto3 Session or a dict {"ec2": client, "service-quotas": client}."""
    if isinstance(session_or_clients, dict):
        ec2 = session_or_clients["ec2"]
        sq = session_or_clients.get("service-quotas") or session_or_clients.get("servicequotas")
        return ec2, sq
    return (
        session_or_clients.client("ec2"),
        session_or_clients.client("service-quotas"),
    )


def offered_azs(ec2_client: Any, instance_type: str) -> list[str]:
    """Sorted AZ names where EC2 offers ``instance_type``."""
    pages = ec2_client.get_paginator("describe_instance_type_offerings").paginate(
        LocationType="availability-zone",
        Filters=[{"Name": "instance-type", "Values": [instance_type]}],
    )
    azs = {
        o["Location"]
        for page in pages
        for o in page.get("InstanceTypeOfferings", [])
        if o.get("InstanceType") == instance_type
    }
    return sorted(azs)


def zone_ids(ec2_client: Any) -> dict[str, str | None]:
    """AZ name -> zone ID (``zone-type availability-zone``), as DescribeAvailabilityZones answers for this account:
    the same name is another zone ID in another account."""
    resp = ec2_client.describe_availability_zones(Filters=[{"Name": "zone-type", "Values": ["availability-zone"]}])
    return {
        z["ZoneName"]: z.get("ZoneId") for z in sorted(resp.get("AvailabilityZones", []), key=lambda z: z["ZoneName"])
    }


def eks_refuses_cluster_subnets(region: str, zone_id: str | None) -> bool:
    """EKS creates no control plane in this zone ID (components/placement.EKS_UNSUPPORTED_ZONE_IDS, network-reqs)."""
    from ..components.network.placement import EKS_UNSUPPORTED_ZONE_IDS

    return zone_id in EKS_UNSUPPORTED_ZONE_IDS.get(region, frozenset())


def recommend_az(ec2_client: Any, instance_type: str) -> str | None:
    """First AZ (sorted by name) that offers ``instance_type``, or None."""
    azs = offered_azs(ec2_client, instance_type)
    return azs[0] if azs else None


def describe_types(ec2_client: Any, types: list[str]) -> dict[str, dict]:
    """Instance type -> its DescribeInstanceTypes entry, asked 100 types at a time (the API's limit), every page."""
    out: dict[str, dict] = {}
    types = sorted(set(types))
    for i in range(0, len(types), 100):
        pages = ec2_client.get_paginator("describe_instance_types").paginate(InstanceTypes=types[i : i + 100])
        for page in pages:
            for t in page.get("InstanceTypes", []):
                out[t["InstanceType"]] = t
    return out


def running_vcpus(ec2_client: Any, quota_code: str) -> int:
    """vCPUs of the running and pending On-Demand instances that count against ``quota_code``."""
    pages = ec2_client.get_paginator("describe_instances").paginate(
        Filters=[{"Name": "instance-state-name", "Values": ["running", "pending"]}]
    )
    counts: dict[str, int] = {}
    explicit = 0
    for page in pages:
        for res in page.get("Reservations", []):
            for inst in res.get("Instances", []):
                itype = inst.get("InstanceType", "")
                # Spot instances count against the Spot quotas, not the On-Demand ones (EC2 user guide, "Spot
                # Instance quotas", docs.aws.amazon.com/AWSEC2/latest/UserGuide/using-spot-limits.html).
                if quota_code_for(itype) != quota_code or inst.get("InstanceLifecycle") == "spot":
                    continue
                counts[itype] = counts.get(itype, 0) + 1
    if not counts:
        return 0
    info = describe_types(ec2_client, list(counts))
    for itype, n in counts.items():
        vcpus = info.get(itype, {}).get("VCpuInfo", {}).get("DefaultVCpus", 0)
        explicit += n * int(vcpus)
    return explicit


class Unanswered(Exception):
    """An API call that got no usable answer: denied, or not implemented by the endpoint."""

    def __init__(self, action: str, why: str):
        self.action = action
        super().__init__(f"{why}: {action}")


def ask(action: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(...)``, or :class:`Unanswered` naming ``action`` when denied or not answered; other errors propagate."""
    try:
        return fn(*args, **kwargs)
    except botocore.exceptions.ClientError as e:
        code = error_code(e)
        if _is_denied(e):
            raise Unanswered(action, "denied") from None
        if (
            code in ("InternalError", "InternalFailure", "NotImplemented", "InvalidAction", "UnsupportedOperation")
            or e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) >= 500
        ):
            raise Unanswered(action, f"not answered by the endpoint ({code or 'server error'})") from None
        raise
    except ResponseParserError:  # e.g. an emulator that does not implement the action (HTTP 500 page)
        raise Unanswered(action, "not answered by the endpoint (unparseable response)") from None


def reservation_az(ec2_client: Any, reservation_id: str) -> str:
    """The AZ of On-Demand Capacity Reservation (or Capacity Block) ``reservation_id``.

    Raises :class:`Unanswered` (denied / not implemented) or LookupError (no such reservation).
    """
    found = ask("ec2:DescribeCapacityReservations", describe_reservation, ec2_client, reservation_id)
    if found is None:
        raise LookupError(f"capacity reservation {reservation_id} not found in {ec2_client.meta.region_name}")
    return found["AvailabilityZone"]


def describe_reservation(ec2_client: Any, reservation_id: str) -> dict[str, Any] | None:
    """The Capacity Reservation ``reservation_id``, or None when EC2 knows no such id."""
    try:
        resp = ec2_client.describe_capacity_reservations(CapacityReservationIds=[reservation_id])
    except botocore.exceptions.ClientError as e:
        if error_code(e) in ("InvalidCapacityReservationId.NotFound", "InvalidCapacityReservationId.Malformed"):
            return None
        raise
    found = resp.get("CapacityReservations")  # absent or empty: none
    return found[0] if found else None


def capacity_block_offerings(ec2: Any, instance_type: str, count: int, hours: int = 24) -> list[dict[str, Any]]:
    """Every page of DescribeCapacityBlockOfferings (it follows NextToken: EC2 may split the offerings)."""
    found, token = [], None
    while True:
        kw = {"NextToken": token} if token else {}
        page = ec2.describe_capacity_block_offerings(
            InstanceType=instance_type, InstanceCount=count, CapacityDurationHours=hours, **kw
        )
        found += page.get("CapacityBlockOfferings", [])
        token = page.get("NextToken")
        if not token:
            return found
