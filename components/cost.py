"""Hourly cost estimate of a stack, from the instance catalogue."""

from __future__ import annotations

from components.instances import EKS_CONTROL_PLANE_USD_HOUR, NAT_GATEWAY_USD_HOUR, InstanceType


def estimate_hourly_usd(region: str, gpu: InstanceType, gpu_nodes: int, system: InstanceType,
                        system_nodes: int = 1, nat_gateways: int = 1) -> float:
    """Nodes + EKS control plane + NAT gateways, on-demand, before storage and data transfer."""
    total = (gpu.hourly_usd(region) * gpu_nodes + system.hourly_usd(region) * system_nodes
             + EKS_CONTROL_PLANE_USD_HOUR + NAT_GATEWAY_USD_HOUR * nat_gateways)
    return round(total, 4)
