"""Device plugins: advertise ``nvidia.com/gpu`` and ``vpc.amazonaws.com/efa`` to the scheduler."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from .node_groups import GPU_ROLE, GPU_TOLERATION, ROLE_LABEL

NVIDIA_REPO = "https://nvidia.github.io/k8s-device-plugin"
EKS_CHARTS_REPO = "https://aws.github.io/eks-charts"


@dataclass
class DevicePluginsArgs:
    """Inputs of :class:`DevicePlugins` (chart versions pinned; override to upgrade)."""

    provider: k8s.Provider
    efa: bool = True
    nvidia_chart_version: str = "0.17.1"
    efa_chart_version: str = "v0.5.7"
    namespace: str = "kube-system"
    extra_values: dict[str, Any] = field(default_factory=dict)


class DevicePlugins(pulumi.ComponentResource):
    """NVIDIA and AWS EFA device plugins as pinned Helm releases on the GPU nodes."""

    releases: list[k8s.helm.v3.Release]

    def __init__(self, name: str, args: DevicePluginsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ray-efa-eks:index:DevicePlugins", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)
        on_gpu = {"nodeSelector": {ROLE_LABEL: GPU_ROLE}, "tolerations": [GPU_TOLERATION]}
        self.releases = [k8s.helm.v3.Release(
            f"{name}-nvidia",
            chart="nvidia-device-plugin",
            version=args.nvidia_chart_version,
            repository_opts={"repo": NVIDIA_REPO},
            namespace=args.namespace,
            values={**on_gpu, **args.extra_values.get("nvidia", {})},
            opts=child,
        )]
        if args.efa:
            self.releases.append(k8s.helm.v3.Release(
                f"{name}-efa",
                chart="aws-efa-k8s-device-plugin",
                version=args.efa_chart_version,
                repository_opts={"repo": EKS_CHARTS_REPO},
                namespace=args.namespace,
                values={**on_gpu, **args.extra_values.get("efa", {})},
                opts=child,
            ))
        self.register_outputs({})
