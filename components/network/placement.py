"""Where the GPU nodes go: one AZ that offers the GPU type, plus a second AZ for EKS."""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from ..config.errors import ArgError


def offering_azs(instance_type: str) -> list[str]:
    """AZs of the current region where EC2 offers ``instance_type`` (sorted)."""
    res = aws.ec2.get_instance_type_offerings(
        filters=[{"name": "instance-type", "values": [instance_type]}],
        location_type="availability-zone",
    )
    return sorted(res.locations)


def resolve_gpu_az(instance_type: str, availability_zone: str | None, region: str) -> str:
    """The configured AZ if it offers the type, else the first AZ that does (ArgError names ``instance_type`` or
    ``availability_zone``)."""
    azs = offering_azs(instance_type)
    if not azs:
        raise ArgError(
            "instance_type", instance_type, f"is not offered in any AZ of {region}; pick another type or region"
        )
    if availability_zone is None:
        return azs[0]
    if availability_zone not in azs:
        raise ArgError(
            "availability_zone", availability_zone, f"does not offer {instance_type}; use one of {', '.join(azs)}"
        )
    return availability_zone


NETWORK_REQS = (
    "EKS user guide: View Amazon EKS networking requirements for VPC and subnets",
    "https://docs.aws.amazon.com/eks/latest/userguide/network-reqs.html",
)
EKS_UNSUPPORTED_ZONE_IDS: dict[str, frozenset[str]] = {
    "us-east-1": frozenset({"use1-az3"}),
    "us-west-1": frozenset({"usw1-az2"}),
    "ca-central-1": frozenset({"cac1-az3"}),
}
"""Zone IDs where EKS refuses cluster (control-plane) subnets with UnsupportedAvailabilityZoneException (NETWORK_REQS,
"Subnet requirements for clusters": "The subnets can't reside in the following Availability Zones"). Listed by zone
ID: which AZ *name* that is differs from account to account."""


def region_zone_ids() -> dict[str, str]:
    """AZ name -> zone ID of every AZ (``zone-type availability-zone``) of the provider's region, in this account."""
    res = aws.get_availability_zones(
        state="available", filters=[{"name": "zone-type", "values": ["availability-zone"]}]
    )
    return dict(zip(res.names, res.zone_ids or [None] * len(res.names)))


def cluster_azs(gpu_az: str, region: str | None = None) -> list[str]:
    """Two AZs for the cluster's subnets: the GPU AZ first when EKS supports it there, then others by name.

    Chosen by zone ID, which DescribeAvailabilityZones returns with each name: EKS refuses control-plane subnets in
    :data:`EKS_UNSUPPORTED_ZONE_IDS`, and the name that maps to such an ID differs per account. The GPU nodes may
    still run in such an AZ, in their own subnet the cluster does not get (:class:`~.network.Network`; see
    :func:`gpu_az_note`). Only ``zone-type availability-zone``: DescribeAvailabilityZones also returns the Local and
    Wavelength Zones the account opted in to (``us-east-1-atl-2a`` sorts before ``us-east-1a``), and EKS refuses
    cluster subnets there too (NETWORK_REQS).
    """
    region = region or pulumi.Config("aws").get("region") or ""
    ids = region_zone_ids()
    refused = EKS_UNSUPPORTED_ZONE_IDS.get(region, frozenset())
    usable = [az for az in sorted(ids) if ids[az] not in refused]
    ordered = ([gpu_az] if gpu_az in usable else []) + [az for az in usable if az != gpu_az]
    if len(ordered) < 2:
        raise ArgError(
            "gpu_az",
            gpu_az,
            f"the region has fewer than two AZs where EKS creates a control plane (zone IDs "
            f"{', '.join(f'{az}={ids[az]}' for az in sorted(ids))}; EKS refuses "
            f"{', '.join(sorted(refused)) or 'none'}: {NETWORK_REQS[1]}); EKS needs two",
        )
    return ordered[:2]


def gpu_az_note(gpu_az: str, cluster: list[str], region: str | None = None) -> str | None:
    """The warning for a GPU AZ the cluster's subnets leave out (its zone ID is one EKS refuses for them), else None.

    A warning, not a refusal: EKS's node subnet requirements (NETWORK_REQS, "Subnet requirements for nodes") allow
    nodes in subnets the cluster was not created with and do not list these zone IDs, but no document says in so
    many words that a managed node group may use one, and UnsupportedAvailabilityZoneException carries a node group
    name too.
    """
    if gpu_az in cluster:
        return None
    zone = region_zone_ids().get(gpu_az, "?")
    return (
        f"GPU AZ {gpu_az} is zone ID {zone} in this account, where EKS creates no cluster subnets "
        f"({NETWORK_REQS[1]}): the cluster uses {', '.join(cluster)} and the GPU nodes get their own private "
        f"subnet in {gpu_az}. EKS documents nodes in subnets the cluster does not have, but not this zone ID "
        "for managed node groups: if CreateNodegroup answers UnsupportedAvailabilityZoneException, pick "
        "another availabilityZone (ray-efa-eks preflight lists the zone IDs)"
    )
