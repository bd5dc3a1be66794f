"""KubeRay operator: the pinned ``kuberay-operator`` Helm chart on the system node."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from .node_groups import ROLE_LABEL, SYSTEM_ROLE

KUBERAY_REPO = "https://ray-project.github.io/kuberay-helm/"
KUBERAY_CHART_VERSION = "1.7.0"


@dataclass
class KubeRayOperatorArgs:
    """Inputs of :class:`KubeRayOperator`."""

    provider: k8s.Provider
    chart_version: str = KUBERAY_CHART_VERSION
    namespace: str = "kuberay-system"
    values: dict[str, Any] = field(default_factory=dict)
    """Extra chart values, merged over the defaults (which pin the operator to the system node)."""


class KubeRayOperator(pulumi.ComponentResource):
    """Namespace + Helm release of the KubeRay operator (which owns the RayCluster CRD)."""

    release: k8s.helm.v3.Release

    def __init__(self, name: str, args: KubeRayOperatorArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ray-efa-eks:index:KubeRayOperator", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)
        ns = k8s.core.v1.Namespace(f"{name}-ns", metadata={"name": args.namespace}, opts=child)
        values = {"nodeSelector": {ROLE_LABEL: SYSTEM_ROLE}, **args.values}
        self.release = k8s.helm.v3.Release(
            f"{name}-release",
            chart="kuberay-operator",
            version=args.chart_version,
            repository_opts={"repo": KUBERAY_REPO},
            namespace=ns.metadata["name"],
            values=values,
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[ns]),
        )
        self.register_outputs({"chartVersion": args.chart_version})
