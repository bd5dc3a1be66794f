"""KubeRay operator: the pinned ``kuberay-operator`` Helm chart on the system node.

Least privilege: by default the chart installs a ClusterRole that lets the operator create pods and
read every Secret in every namespace (helm-chart/kuberay-operator/templates/role.yaml, ``role.consistentRules``
in _helpers.tpl, at v1.7.0). With ``watch_namespaces`` set, :func:`watch_values` turns on
``singleNamespaceInstall`` and lists the namespaces in ``watchNamespace``: the chart then renders no ClusterRole
or ClusterRoleBinding (role.yaml / rolebinding.yaml need ``not .Values.singleNamespaceInstall``), one Role and
RoleBinding with the same rules in each watched namespace (multiple_namespaces_role.yaml / _rolebinding.yaml,
with ``rbacEnable`` and ``crNamespacedRbacEnable``, both true by default), the leader-election Role in the
operator's own namespace, and passes ``--watch-namespace`` to the operator (deployment.yaml), whose cache then
sees only those namespaces. The watched namespaces must exist before the release (Helm creates a Role in each).

CRDs: Helm v3 installs a chart's ``crds/`` on the first install only and never upgrades or deletes them
("Helm: Custom Resource Definitions": no support for upgrading or deleting CRDs), so a chart bump through
``helm.v3.Release`` alone would run the new operator against the old RayCluster CRD. The Release therefore skips CRDs
(``skip_crds``) and the CRDs of the same version are applied by Pulumi from the KubeRay tag the chart is built from
(:data:`~.kuberay_versions.CRD_URL`), with ``k8s.yaml.v2.ConfigGroup``: each CRD is a Pulumi resource, updated on
every bump before the Release (the new operator expects its own CRD). A stack created before this change has the CRDs
Helm installed; the CRD provider upserts them (``upsertExistingObjects``) and takes their fields over from Helm's field
manager (``enablePatchForce``): pulumi-kubernetes refuses to create an object that exists otherwise
(provider/pkg/await/await.go, "The resource already exists in the cluster"). The CRDs are retained on delete: deleting
a CRD deletes every RayCluster, so neither ``pulumi destroy`` nor a rename may do it.

Why not ``helm.v4.Chart`` (it renders CRDs as resources too: provider/pkg/provider/helm/v4/chart.go
``cmd.IncludeCRDs = !chartArgs.SkipCrds``): moving an existing stack from the v3 Release to it would create the
operator's objects a second time and then ``helm uninstall`` them when the old Release is deleted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from .kuberay_versions import chart_version_problem, crd_urls
from ..network.network_policies import allow_all_egress, default_deny_ingress
from ..kube import POD_SECURITY_LABELS as BASELINE_LABELS, ROLE_LABEL, SYSTEM_ROLE

KUBERAY_REPO = "https://ray-project.github.io/kuberay-helm/"
KUBERAY_CHART_VERSION = "1.7.0"
POD_SECURITY_LABELS = dict(BASELINE_LABELS)
"""The operator's namespace: ``baseline`` enforced (the 1.7.0 chart's pod passes it: no host namespaces or paths,
``allowPrivilegeEscalation: false``, all capabilities dropped); ``restricted`` warned and audited (the chart sets
no seccomp profile and no ``runAsNonRoot``)."""


@dataclass
class KubeRayOperatorArgs:
    """Inputs of :class:`KubeRayOperator`."""

    provider: k8s.Provider
    """Kubernetes provider of the cluster the operator installs into."""
    chart_version: str = KUBERAY_CHART_VERSION
    """The ``kuberay-operator`` chart version (one of ray/kuberay_versions.py); its CRDs are applied
    from the same tag."""
    namespace: str = "kuberay-system"
    """The operator's own namespace."""
    values: dict[str, Any] = field(default_factory=dict)
    """Extra chart values, merged over the defaults (which pin the operator to the system node)."""
    watch_namespaces: list[str] | None = None
    """Namespaces the operator watches, with RBAC in those only (:func:`watch_values`); None: the chart's default,
    every namespace with a ClusterRole."""
    network_policy: bool = False
    """NetworkPolicies in ``namespace``: nothing may connect to the operator (it serves no webhook here; the kubelet's
    probes come from the node, which the VPC CNI always admits), all egress (the API server) allowed."""
    depends_on: list[pulumi.Resource] = field(default_factory=list)
    """What the release waits for: the watched namespaces."""
    crd_provider: k8s.Provider | None = None
    """Provider for the CRDs; give it ``upsert_existing_objects=True, enable_patch_force=True`` on clusters where
    Helm installed them before (default: ``provider``)."""


def watch_values(namespaces: list[str] | None) -> dict[str, Any]:
    """Chart values that confine the operator to ``namespaces`` (module docstring); {} for None."""
    if namespaces is None:
        return {}
    if not namespaces or any(not isinstance(n, str) or not n for n in namespaces):
        raise ValueError(
            f"KubeRayOperator: watch_namespaces {namespaces!r}: list the namespaces of the RayClusters "
            "(e.g. ['ray']), or None to watch all"
        )
    return {"singleNamespaceInstall": True, "watchNamespace": list(namespaces)}


class KubeRayOperator(pulumi.ComponentResource):
    """Namespace + Helm release of the KubeRay operator (which owns the RayCluster CRD)."""

    release: k8s.helm.v3.Release
    crds: k8s.yaml.v2.ConfigGroup

    def __init__(self, name: str, args: KubeRayOperatorArgs, opts: pulumi.ResourceOptions | None = None):
        problem = chart_version_problem(args.chart_version)
        if problem:
            raise ValueError(f"KubeRayOperator {name}: chart_version {args.chart_version!r} {problem}")
        super().__init__("ray-efa-eks:index:KubeRayOperator", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)
        ns = k8s.core.v1.Namespace(
            f"{name}-ns", metadata={"name": args.namespace, "labels": dict(POD_SECURITY_LABELS)}, opts=child
        )
        if args.network_policy:
            in_ns = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[ns]))
            for policy, spec in (
                (f"{args.namespace}-default-deny", default_deny_ingress()),
                (f"{args.namespace}-egress", allow_all_egress()),
            ):
                k8s.networking.v1.NetworkPolicy(
                    f"{name}-{policy}", metadata={"name": policy, "namespace": args.namespace}, spec=spec, opts=in_ns
                )
        self.crds = k8s.yaml.v2.ConfigGroup(
            f"{name}-crds",
            files=crd_urls(args.chart_version),
            opts=pulumi.ResourceOptions(
                parent=self, provider=args.crd_provider or args.provider, transforms=[retain_crds]
            ),
        )
        values = {"nodeSelector": {ROLE_LABEL: SYSTEM_ROLE}, **watch_values(args.watch_namespaces), **args.values}
        self.release = k8s.helm.v3.Release(
            f"{name}-release",
            chart="kuberay-operator",
            version=args.chart_version,
            repository_opts={"repo": KUBERAY_REPO},
            namespace=ns.metadata["name"],
            values=values,
            skip_crds=True,  # applied above, from the same version
            opts=pulumi.ResourceOptions(
                parent=self, provider=args.provider, depends_on=[ns, self.crds, *args.depends_on]
            ),
        )
        self.register_outputs({"chartVersion": args.chart_version})


def retain_crds(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
    """Transform for the CRD ConfigGroup's children: a CRD is never deleted by Pulumi (it would delete every
    RayCluster with it)."""
    if args.type_ != "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition":
        return None
    return pulumi.ResourceTransformResult(
        props=args.props, opts=pulumi.ResourceOptions.merge(args.opts, pulumi.ResourceOptions(retain_on_delete=True))
    )
