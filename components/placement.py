"""Where the GPU nodes go: one AZ that offers the GPU type, plus a second AZ for EKS."""

from __future__ import annotations

import pulumi_aws as aws

from .config import ConfigError, StackConfig


def offering_azs(instance_type: str) -> list[str]:
    """AZs of the current region where EC2 offers ``instance_type`` (sorted)."""
    res = aws.ec2.get_instance_type_offerings(
        filters=[{"name": "instance-type", "values": [instance_type]}],
        location_type="availability-zone",
    )
    return sorted(res.locations)


def resolve_gpu_az(cfg: StackConfig) -> str:
    """The configured AZ if it offers the type, else the first AZ that does."""
    azs = offering_azs(cfg.gpuInstanceType)
    if not azs:
        raise ConfigError("gpuInstanceType", cfg.gpuInstanceType, f"is not offered in any AZ of {cfg.region}; pick another type or region")
    if cfg.availabilityZone is None:
        return azs[0]
    if cfg.availabilityZone not in azs:
        raise ConfigError("availabilityZone", cfg.availabilityZone, f"does not offer {cfg.gpuInstanceType}; use one of {', '.join(azs)}")
    return cfg.availabilityZone


def cluster_azs(gpu_az: str) -> list[str]:
    """The GPU AZ first, then another available AZ (EKS needs two)."""
    names = sorted(aws.get_availability_zones(state="available").names)
    others = [az for az in names if az != gpu_az]
    if not others:
        raise ConfigError("availabilityZone", gpu_az, "the region has no second AZ; EKS needs two")
    return [gpu_az, others[0]]
