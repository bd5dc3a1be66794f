"""Hourly cost estimate of a stack, from the instance catalogue.

One formula for both callers: the program's ``estimatedHourlyUsd`` output (from
config) and the offline plan (from the node groups it finds in the resources).
A region without figures raises :class:`~.instances.NoPrice` ("no price for
REGION") instead of borrowing another region's; per-GB charges cannot be known
from a layout, so they are notes, not part of the hourly figure.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from .instances import (EKS_CONTROL_PLANE_USD_HOUR, NAT_GATEWAY_USD_HOUR, NAT_GATEWAY_USD_PER_GB, InstanceType,
                        NoPrice, regional)


def hourly_usd(region: str, nodes: Iterable[tuple[InstanceType, int]], eks_clusters: int = 1,
               nat_gateways: int = 1) -> float:
    """Nodes (type, count) + EKS control planes + NAT gateways (one per AZ that has one), on-demand, before storage
    and data transfer; :class:`NoPrice` when ``region`` has no figure for one of them."""
    total = sum(it.hourly_usd(region) * count for it, count in nodes if count)
    if nat_gateways:
        total += regional(NAT_GATEWAY_USD_HOUR, region, "NAT gateway") * nat_gateways
    return round(total + EKS_CONTROL_PLANE_USD_HOUR * eks_clusters, 4)


def cost_notes(region: str, nat_gateways: int = 1, s3_gateway_endpoint: bool = True) -> list[str]:
    """What the hourly figure leaves out: per-GB NAT processing (and whether S3 avoids it), storage, transfer."""
    per_gb = NAT_GATEWAY_USD_PER_GB.get(region)
    nat = f"${per_gb}/GB" if per_gb is not None else f"per GB (no price for {region})"
    notes = [f"NAT gateway data processing: {nat} through each of the {nat_gateways} NAT gateway(s), on top of the "
             "hourly figure (pulls from public registries, other egress)" if nat_gateways else
             "no NAT gateway: no per-GB NAT processing"]
    if s3_gateway_endpoint:
        notes.append("S3 (checkpoints, ECR image layers) goes through the S3 gateway VPC endpoint: no endpoint "
                     "charge and no NAT processing for it")
    elif nat_gateways:
        notes.append(f"S3 (checkpoints, ECR image layers) goes through the NAT gateway at {nat}: set "
                     "s3GatewayEndpoint true to route it through a free gateway endpoint")
    notes.append("not included: EBS volumes, S3 storage and requests, KMS keys, data transfer out")
    return notes


@dataclass
class CostEstimate:
    """The hourly figure (None where the region has no price), why it is missing, and what it leaves out."""

    hourly_usd: float | None
    missing: str | None = None
    notes: list[str] = field(default_factory=list)


def estimate(region: str, gpu: InstanceType, gpu_nodes: int, system: InstanceType, system_nodes: int = 1,
             nat_gateways: int = 1, s3_gateway_endpoint: bool = True) -> CostEstimate:
    """The reference layout (one GPU node group, one system node group, one cluster), never a guess."""
    notes = cost_notes(region, nat_gateways, s3_gateway_endpoint)
    try:
        usd = hourly_usd(region, [(gpu, gpu_nodes), (system, system_nodes)], nat_gateways=nat_gateways)
    except NoPrice as e:
        return CostEstimate(None, str(e), [str(e), *notes])
    return CostEstimate(usd, None, notes)


def estimate_hourly_usd(region: str, gpu: InstanceType, gpu_nodes: int, system: InstanceType,
                        system_nodes: int = 1, nat_gateways: int = 1) -> float:
    """The reference layout's hourly figure; :class:`NoPrice` where the region has none."""
    return hourly_usd(region, [(gpu, gpu_nodes), (system, system_nodes)], nat_gateways=nat_gateways)
