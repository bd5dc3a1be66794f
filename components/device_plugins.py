"""Device plugins: advertise ``nvidia.com/gpu`` and ``vpc.amazonaws.com/efa`` to the scheduler.

Both charts ship default scheduling constraints that EKS GPU nodes do not meet on their own (see
``/work/shared/charts/README.md``; tests/test_device_plugins.py checks the merged values against each chart's own
``values.yaml``):

- nvidia-device-plugin (0.17.1 .. 0.20.0) requires one of three node labels (NFD's ``pci-10de.present``, Tegra's
  ``cpu-model.vendor_id`` or ``nvidia.com/gpu.present``) that neither EKS nor the chart (NFD off by default) sets,
  so its DaemonSet would schedule nowhere and no ``nvidia.com/gpu`` would be advertised. Helm merges maps and
  *replaces* lists, so we set ``affinity...nodeSelectorTerms`` to one term on our own GPU role label.
- aws-efa-k8s-device-plugin turns ``supportedInstanceLabels`` into a required ``In`` affinity on the instance type
  (a type missing from the chart's list schedules nothing) and tolerates no taint, while our GPU nodes carry the
  ``nvidia.com/gpu`` NoSchedule taint. We set the list to the stack's own GPU types and add the toleration.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from .instances import CATALOGUE
from .node_groups import GPU_ROLE, GPU_TOLERATION, ROLE_LABEL

NVIDIA_REPO = "https://nvidia.github.io/k8s-device-plugin"
EKS_CHARTS_REPO = "https://aws.github.io/eks-charts"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
"""Well-known label the kubelet sets on every node; the EFA chart's allow-list keys on it."""


@dataclass
class DevicePluginsArgs:
    """Inputs of :class:`DevicePlugins` (chart versions pinned; override to upgrade)."""

    provider: k8s.Provider
    efa: bool = True
    nvidia_chart_version: str = "0.17.1"
    efa_chart_version: str = "v0.5.7"
    namespace: str = "kube-system"
    instance_types: list[str] | None = None
    """GPU instance types of the stack's GPU nodes (the EFA chart's allow-list).
    None: every EFA GPU type in the catalogue."""
    extra_values: dict[str, Any] = field(default_factory=dict)
    """``{"nvidia": {...}, "efa": {...}}`` merged over ours the way Helm merges (maps recursively, lists replace)."""


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Helm's value coalescing: maps merge key by key, anything else (lists, scalars) replaces; None deletes."""
    out = dict(base)
    for k, v in override.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge(out[k], v)
        else:
            out[k] = v
    return out


def _on_gpu_nodes() -> dict[str, Any]:
    return {"nodeSelector": {ROLE_LABEL: GPU_ROLE}, "tolerations": [dict(GPU_TOLERATION)]}


def nvidia_values() -> dict[str, Any]:
    """Overrides for nvidia-device-plugin: our GPU label replaces the chart's NFD/forced-label affinity terms."""
    term = {"matchExpressions": [{"key": ROLE_LABEL, "operator": "In", "values": [GPU_ROLE]}]}
    return {**_on_gpu_nodes(),
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [term]}}}}


def efa_values(instance_types: list[str] | None = None) -> dict[str, Any]:
    """Overrides for aws-efa-k8s-device-plugin: the allow-list is exactly our GPU types; tolerate the GPU taint."""
    types = instance_types if instance_types is not None else [t.name for t in CATALOGUE.values()
                                                               if t.gpus and t.efa_supported]
    return {**_on_gpu_nodes(),
            "supportedInstanceLabels": {"keys": [INSTANCE_TYPE_LABEL], "values": sorted(set(types))}}


class DevicePlugins(pulumi.ComponentResource):
    """NVIDIA and AWS EFA device plugins as pinned Helm releases on the GPU nodes."""

    releases: list[k8s.helm.v3.Release]

    def __init__(self, name: str, args: DevicePluginsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ray-efa-eks:index:DevicePlugins", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)
        self.releases = [k8s.helm.v3.Release(
            f"{name}-nvidia",
            chart="nvidia-device-plugin",
            version=args.nvidia_chart_version,
            repository_opts={"repo": NVIDIA_REPO},
            namespace=args.namespace,
            values=merge(nvidia_values(), args.extra_values.get("nvidia", {})),
            opts=child,
        )]
        if args.efa:
            self.releases.append(k8s.helm.v3.Release(
                f"{name}-efa",
                chart="aws-efa-k8s-device-plugin",
                version=args.efa_chart_version,
                repository_opts={"repo": EKS_CHARTS_REPO},
                namespace=args.namespace,
                values=merge(efa_values(args.instance_types), args.extra_values.get("efa", {})),
                opts=child,
            ))
        self.register_outputs({})
