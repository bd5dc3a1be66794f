"""Hourly cost estimate of a stack, from the instance catalogue.

One formula for both callers: the program's ``estimatedHourlyUsd`` output (from
config) and the offline plan (from the node groups it finds in the resources).
"""

from __future__ import annotations

from collections.abc import Iterable

from .instances import EKS_CONTROL_PLANE_USD_HOUR, NAT_GATEWAY_USD_HOUR, InstanceType


def hourly_usd(region: str, nodes: Iterable[tuple[InstanceType, int]], eks_clusters: int = 1,
               nat_gateways: int = 1) -> float:
    """Nodes (type, count) + EKS control planes + NAT gateways, on-demand, before storage and data transfer."""
    total = (sum(it.hourly_usd(region) * count for it, count in nodes)
             + EKS_CONTROL_PLANE_USD_HOUR * eks_clusters + NAT_GATEWAY_USD_HOUR * nat_gateways)
    return round(total, 4)


def estimate_hourly_usd(region: str, gpu: InstanceType, gpu_nodes: int, system: InstanceType,
                        system_nodes: int = 1, nat_gateways: int = 1) -> float:
    """The reference layout: one GPU node group, one system node group, one cluster."""
    return hourly_usd(region, [(gpu, gpu_nodes), (system, system_nodes)], nat_gateways=nat_gateways)
