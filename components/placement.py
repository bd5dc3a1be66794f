"""Where the GPU nodes go: one AZ that offers the GPU type, plus a second AZ for EKS."""

from __future__ import annotations

import pulumi_aws as aws

from .config import ConfigError


def offering_azs(instance_type: str) -> list[str]:
    """AZs of the current region where EC2 offers ``instance_type`` (sorted)."""
    res = aws.ec2.get_instance_type_offerings(
        filters=[{"name": "instance-type", "values": [instance_type]}],
        location_type="availability-zone",
    )
    return sorted(res.locations)


def resolve_gpu_az(instance_type: str, availability_zone: str | None, region: str) -> str:
    """The configured AZ if it offers the type, else the first AZ that does (errors name the config keys)."""
    azs = offering_azs(instance_type)
    if not azs:
        raise ConfigError("gpuInstanceType", instance_type,
                          f"is not offered in any AZ of {region}; pick another type or region")
    if availability_zone is None:
        return azs[0]
    if availability_zone not in azs:
        raise ConfigError("availabilityZone", availability_zone,
                          f"does not offer {instance_type}; use one of {', '.join(azs)}")
    return availability_zone


def cluster_azs(gpu_az: str) -> list[str]:
    """The GPU AZ first, then another available AZ (EKS needs two).

    Only ``zone-type availability-zone``: DescribeAvailabilityZones also returns the Local and Wavelength Zones the
    account opted in to (``us-east-1-atl-2a`` sorts before ``us-east-1a``), and EKS refuses cluster subnets there
    (EKS user guide, "View Amazon EKS networking requirements for VPC and subnets",
    https://docs.aws.amazon.com/eks/latest/userguide/network-reqs.html).
    """
    names = sorted(aws.get_availability_zones(
        state="available", filters=[{"name": "zone-type", "values": ["availability-zone"]}]).names)
    others = [az for az in names if az != gpu_az]
    if not others:
        raise ConfigError("availabilityZone", gpu_az, "the region has no second AZ; EKS needs two")
    return [gpu_az, others[0]]
