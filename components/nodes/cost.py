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
from datetime import date

from ..cluster import eks_versions
from .instances import (
    EKS_CONTROL_PLANE_USD_HOUR,
    INTERFACE_ENDPOINT_USD_HOUR,
    INTERFACE_ENDPOINT_USD_PER_GB,
    NAT_GATEWAY_USD_HOUR,
    NAT_GATEWAY_USD_PER_GB,
    InstanceType,
    NoPrice,
    regional,
)

# How each GPU capacity mode is billed (components/nodes/capacity.py):
# - on demand: per second while an instance runs; gpuNodeCount 0 stops it.
# - ODCR: billed at the On-Demand rate from creation until cancelled, whether instances run in it or not (EC2 user
#   guide, "Capacity Reservation pricing and billing",
#   https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-reservations-pricing-billing.html); instances
#   running in it are not billed a second time; only cancelling the reservation stops it.
# - Capacity Block: its whole price is paid up front when it is bought (EC2 user guide, "Capacity Blocks pricing and
#   billing", https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-pricing-billing.html): nothing
#   per hour in the stack's figure, and nothing the stack does refunds it.
CONTROL_PLANE_LOGS_NOTE = (
    "EKS control-plane logs (audit, authenticator) in CloudWatch Logs: $0.50/GB ingested and $0.03/GB-month stored in "
    "us-east-1 (Standard class; other regions differ: https://aws.amazon.com/cloudwatch/pricing/), kept 90 days; the "
    "volume grows with API requests (controllers' watches, the node agent's patches)"
)
"""EKS bills the standard CloudWatch Logs ingestion and storage rates for control-plane logs (EKS user guide, "Send
control plane logs to CloudWatch Logs"); per GB, so a note, not part of the hourly figure."""
ON_DEMAND, RESERVATION, CAPACITY_BLOCK = "on-demand", "reservation", "capacity-block"


def hourly_usd(
    region: str,
    nodes: Iterable[tuple[InstanceType, int]],
    eks_clusters: int = 1,
    nat_gateways: int = 1,
    control_plane_usd_hour: float = EKS_CONTROL_PLANE_USD_HOUR,
    interface_endpoint_azs: int = 0,
) -> float:
    """Nodes (type, count) + EKS control planes + NAT gateways (one per AZ that has one) + interface endpoints (one
    charge per endpoint per AZ), before storage and data transfer; :class:`NoPrice` when ``region`` has no figure for
    one of them. ``control_plane_usd_hour``: the version's rate (:func:`.eks_versions.control_plane_usd_hour`: $0.10
    standard, $0.60 extended support)."""
    total = sum(it.hourly_usd(region) * count for it, count in nodes if count)
    if nat_gateways:
        total += regional(NAT_GATEWAY_USD_HOUR, region, "NAT gateway") * nat_gateways
    if interface_endpoint_azs:
        total += regional(INTERFACE_ENDPOINT_USD_HOUR, region, "interface VPC endpoint") * interface_endpoint_azs
    return round(total + control_plane_usd_hour * eks_clusters, 4)


def billed_gpu_nodes(mode: str, gpu_nodes: int, reserved: int | None = None) -> int:
    """GPU instances billed per hour: running ones on demand, the whole ODCR (used or not), none for a paid block."""
    if mode == CAPACITY_BLOCK:
        return 0
    if mode == RESERVATION:
        return max(reserved or 0, gpu_nodes)
    return gpu_nodes


def capacity_notes(
    mode: str,
    gpu: InstanceType,
    region: str,
    gpu_nodes: int,
    reserved: int | None = None,
    reservation: str | None = None,
    block_end: str | None = None,
    scale_from_zero: bool = False,
) -> list[str]:
    """What the GPU capacity of ``mode`` costs and what stops that cost (for costNotes and the plan)."""
    try:
        rate = f"${gpu.hourly_usd(region):,.2f}/h"
    except NoPrice:
        rate = f"the on-demand rate (no price for {region})"
    if mode == RESERVATION:
        count = f"all {reserved}" if reserved is not None else f"every instance (at least {gpu_nodes})"
        return [
            f"ODCR {reservation or ''}: {count} reserved {gpu.name} are billed at {rate} each whether GPU nodes "
            "run in it or not; gpuNodeCount 0 does not stop it, cancelling the reservation does "
            f"(aws ec2 cancel-capacity-reservation --capacity-reservation-id {reservation or 'ID'})"
        ]
    if mode == CAPACITY_BLOCK:
        end = f" until {block_end}" if block_end else ""
        return [
            f"Capacity Block {reservation or ''}: paid up front when bought, for its whole duration{end}; its "
            f"{gpu.name} nodes add nothing per hour here, and neither parking them nor pulumi destroy refunds "
            "the block"
        ]
    if scale_from_zero:
        return [
            f"GPU nodes on demand: 0 to {gpu_nodes} x {gpu.name} at {rate} each while they run; they run only "
            "while Ray's jobs need them (gpuScaleToZero: the Cluster Autoscaler adds them and removes them idle)"
        ]
    return [f"GPU nodes on demand: {gpu_nodes} x {gpu.name} at {rate} while they run; gpuNodeCount 0 stops it"]


def control_plane_note(version: str | None, on: date | None = None) -> str:
    """The control plane's rate and why: the version's EKS support state on ``on`` (default today)."""
    if version is None:
        return f"EKS control plane: ${EKS_CONTROL_PLANE_USD_HOUR:.2f}/h (standard support)"
    state = eks_versions.support(version, on)
    usd = eks_versions.control_plane_usd_hour(version, on)
    row = eks_versions.BY_VERSION.get(version)
    if state == eks_versions.EXTENDED and row:
        why = f"{version} in extended support since {row.end_of_standard.isoformat()}"
    elif state == eks_versions.STANDARD and row:
        why = f"{version} in standard support until {row.end_of_standard.isoformat()}"
    else:
        why = f"{version}: {state}"
    return f"EKS control plane: ${usd:.2f}/h ({why}; priced on {(on or eks_versions.today()).isoformat()})"


def cost_notes(
    region: str,
    nat_gateways: int = 1,
    s3_gateway_endpoint: bool = True,
    ecr_endpoint_azs: int = 0,
    image_gib: int | None = None,
) -> list[str]:
    """What the hourly figure leaves out: per-GB NAT processing (and whether S3 and the account's ECR avoid it),
    what the ECR interface endpoints add (``ecr_endpoint_azs``: endpoint-AZs), storage, transfer."""
    per_gb = NAT_GATEWAY_USD_PER_GB.get(region)
    nat = f"${per_gb}/GB" if per_gb is not None else f"per GB (no price for {region})"
    through = (
        "other egress; not the stack's images, pulled from the account's ECR"
        if ecr_endpoint_azs
        else "pulls from public registries, other egress"
    )
    if nat_gateways and not ecr_endpoint_azs and image_gib and per_gb is not None:
        through += f": about ${per_gb * image_gib * 1.073741824:.2f} per GPU node pulling a {image_gib} GiB DLC"
    notes = [
        f"NAT gateway data processing: {nat} through each of the {nat_gateways} NAT gateway(s), on top of the "
        f"hourly figure ({through})"
        if nat_gateways
        else "no NAT gateway: no per-GB NAT processing"
    ]
    if ecr_endpoint_azs:
        hour, gb = INTERFACE_ENDPOINT_USD_HOUR.get(region), INTERFACE_ENDPOINT_USD_PER_GB.get(region)
        rate = (
            f"${hour}/h each = ${hour * ecr_endpoint_azs:.2f}/h, in the hourly figure, plus ${gb}/GB processed"
            if hour is not None and gb is not None
            else f"per hour and per GB (no price for {region})"
        )
        notes.append(
            f"ECR interface endpoints (ecr.api, ecr.dkr): {ecr_endpoint_azs} endpoint-AZs at {rate} "
            "(registry API and manifests; the layers come from S3"
            + (" through its gateway endpoint)" if s3_gateway_endpoint else ")")
            + "; the pull-through cache's copy is ECR storage, not included"
        )
    if s3_gateway_endpoint:
        notes.append(
            "S3 (checkpoints, ECR image layers) goes through the S3 gateway VPC endpoint: no endpoint "
            "charge and no NAT processing for it"
        )
    elif nat_gateways:
        notes.append(
            f"S3 (checkpoints, ECR image layers) goes through the NAT gateway at {nat}: set "
            "s3GatewayEndpoint true to route it through a free gateway endpoint"
        )
    notes.append(CONTROL_PLANE_LOGS_NOTE)
    notes.append("not included: EBS volumes, S3 storage and requests, KMS keys, data transfer out")
    return notes


@dataclass
class CostEstimate:
    """The hourly figure (None where the region has no price), why it is missing, and what it leaves out."""

    hourly_usd: float | None
    missing: str | None = None
    notes: list[str] = field(default_factory=list)


def estimate(
    region: str,
    gpu: InstanceType,
    gpu_nodes: int,
    system: InstanceType,
    system_nodes: int = 1,
    nat_gateways: int = 1,
    s3_gateway_endpoint: bool = True,
    *,
    capacity_mode: str = ON_DEMAND,
    reserved: int | None = None,
    reservation: str | None = None,
    block_end: str | None = None,
    kubernetes_version: str | None = None,
    on: date | None = None,
    scale_from_zero: bool = False,
    ecr_endpoint_azs: int = 0,
    image_gib: int | None = None,
) -> CostEstimate:
    """The reference layout (one GPU node group, one system node group, one cluster), never a guess.

    GPU instances are counted as their capacity mode bills them (:func:`billed_gpu_nodes`), the control plane at
    ``kubernetes_version``'s rate on ``on`` (default today).
    """
    notes = [
        *capacity_notes(capacity_mode, gpu, region, gpu_nodes, reserved, reservation, block_end, scale_from_zero),
        control_plane_note(kubernetes_version, on),
        *cost_notes(region, nat_gateways, s3_gateway_endpoint, ecr_endpoint_azs, image_gib),
    ]
    plane = (
        eks_versions.control_plane_usd_hour(kubernetes_version, on)
        if kubernetes_version
        else EKS_CONTROL_PLANE_USD_HOUR
    )
    try:
        usd = hourly_usd(
            region,
            [(gpu, billed_gpu_nodes(capacity_mode, gpu_nodes, reserved)), (system, system_nodes)],
            nat_gateways=nat_gateways,
            control_plane_usd_hour=plane,
            interface_endpoint_azs=ecr_endpoint_azs,
        )
    except NoPrice as e:
        return CostEstimate(None, str(e), [str(e), *notes])
    return CostEstimate(usd, None, notes)
