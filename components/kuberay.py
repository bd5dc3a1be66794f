"""KubeRay operator: the pinned ``kuberay-operator`` Helm chart on the system node.

Least privilege (issue 37): by default the chart installs a ClusterRole that lets the operator create pods and
read every Secret in every namespace (helm-chart/kuberay-operator/templates/role.yaml, ``role.consistentRules``
in _helpers.tpl, at v1.7.0). With ``watch_namespaces`` set, :func:`watch_values` turns on
``singleNamespaceInstall`` and lists the namespaces in ``watchNamespace``: the chart then renders no ClusterRole
or ClusterRoleBinding (role.yaml / rolebinding.yaml need ``not .Values.singleNamespaceInstall``), one Role and
RoleBinding with the same rules in each watched namespace (multiple_namespaces_role.yaml / _rolebinding.yaml,
with ``rbacEnable`` and ``crNamespacedRbacEnable``, both true by default), the leader-election Role in the
operator's own namespace, and passes ``--watch-namespace`` to the operator (deployment.yaml), whose cache then
sees only those namespaces. The watched namespaces must exist before the release (Helm creates a Role in each).
"""

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
    watch_namespaces: list[str] | None = None
    """Namespaces the operator watches, with RBAC in those only (:func:`watch_values`); None: the chart's default,
    every namespace with a ClusterRole."""
    depends_on: list[pulumi.Resource] = field(default_factory=list)
    """What the release waits for: the watched namespaces."""


def watch_values(namespaces: list[str] | None) -> dict[str, Any]:
    """Chart values that confine the operator to ``namespaces`` (module docstring); {} for None."""
    if namespaces is None:
        return {}
    if not namespaces or any(not isinstance(n, str) or not n for n in namespaces):
        raise ValueError(f"KubeRayOperator: watch_namespaces {namespaces!r}: list the namespaces of the RayClusters "
                         "(e.g. ['ray']), or None to watch all")
    return {"singleNamespaceInstall": True, "watchNamespace": list(namespaces)}


class KubeRayOperator(pulumi.ComponentResource):
    """Namespace + Helm release of the KubeRay operator (which owns the RayCluster CRD)."""

    release: k8s.helm.v3.Release

    def __init__(self, name: str, args: KubeRayOperatorArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ray-efa-eks:index:KubeRayOperator", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)
        ns = k8s.core.v1.Namespace(f"{name}-ns", metadata={"name": args.namespace}, opts=child)
        values = {"nodeSelector": {ROLE_LABEL: SYSTEM_ROLE}, **watch_values(args.watch_namespaces), **args.values}
        self.release = k8s.helm.v3.Release(
            f"{name}-release",
            chart="kuberay-operator",
            version=args.chart_version,
            repository_opts={"repo": KUBERAY_REPO},
            namespace=ns.metadata["name"],
            values=values,
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[ns, *args.depends_on]),
        )
        self.register_outputs({"chartVersion": args.chart_version})
