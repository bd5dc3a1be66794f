"""JobQueues: Kueue, and per team a namespace, a LocalQueue/ClusterQueue, RBAC for RayJobs and a storage role.

Kueue comes from its pinned chart (``kueue`` 0.19.2, ``oci://registry.k8s.io/kueue/charts/kueue``: the chart's
README at tag v0.19.2, "helm install kueue oci://registry.k8s.io/kueue/charts/kueue --version=0.19.2"). Its CRDs are
*templates* of that chart (charts/kueue/templates/crd/, not crds/), with a conversion webhook that points at the
release's own Service (``'{{ include "kueue.fullname" . }}-webhook-service'`` in each CRD): Helm upgrades them with
every chart bump, so the KubeRay problem (components/ray/kuberay.py: Helm never upgrades ``crds/``) does not arise, and
the plain CRD files of the tag (config/components/crd/bases/) could not replace them (they lack the webhook). So the
Release installs them; this component pins the version and the stack turns the whole thing on or off.

Values set over the chart's defaults (tests/fixtures/charts/kueue-0.19.2/values.yaml):

* the released image: values.yaml names a staging image (``k8s-staging-images/kueue/kueue:release-0.19``, pull
  Always, "should be set to 'IfNotPresent' for released version"); the stack pins ``registry.k8s.io/kueue/kueue`` at
  the chart's appVersion;
* the operator on the system node;
* the Kueue Configuration (:func:`manager_config`): the chart's own, with RayJob the only integration, quota checked
  on GPUs only, and all-or-nothing on readiness (``waitForPodsReady``, docs/team-jobs.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from ..nodes.instances import InstanceType
from ..network.network_policies import allow_all_egress, default_deny_ingress, from_anywhere
from ..kube import (
    GPU_ROLE,
    METRICS_NAMESPACE,
    METRICS_PORTS,
    NAMESPACE_NAME_LABEL,
    POD_SECURITY_LABELS,
    ROLE_LABEL,
    SYSTEM_ROLE,
)
from ..cluster.pod_identity import PodStorageAccess, PodStorageAccessArgs
from .team_queues import TEAM_LABEL, TeamQueue, team_objects

KUEUE_CHART = "oci://registry.k8s.io/kueue/charts/kueue"
KUEUE_CHART_VERSION = "0.19.2"
KUEUE_IMAGE = "registry.k8s.io/kueue/kueue"
KUEUE_NAMESPACE = "kueue-system"
KUEUE_API_PORTS = [9443, 8082]
"""What the API server calls in the manager, from its own addresses: the webhook server (the chart's manager
configuration ``webhook.port: 9443``; ``webhookService`` 443 -> 9443) on every RayJob, Workload and queue object, and
the visibility server (its default port, ``--visibility-server-port``) behind the ``visibility.kueue.x-k8s.io``
APIService: an aggregated API the API server cannot reach breaks discovery for every client."""
TEAM_SERVICE_ACCOUNT = "ray-train"
"""The service account of a team's Ray pods (the team's Pod Identity association binds exactly this one)."""
TEAM_GROUP = "ray-efa-eks:team:{team}"
"""The Kubernetes group a team's Role is bound to; map a CI role to it with an EKS access entry's
``kubernetesGroups`` (docs/team-jobs.md)."""
TEAM_PREFIX = "teams/{team}"
"""A team's checkpoint prefix in the stack's bucket (beside, not under, ``checkpointPrefix``: the shared cluster's
role reaches ``checkpointPrefix/*`` only)."""
TEAM_RULES = [
    {"apiGroups": ["ray.io"], "resources": ["rayjobs"], "verbs": ["create", "get", "list", "watch", "delete"]},
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "get"]},
    {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads", "localqueues"], "verbs": ["get", "list", "watch"]},
]
"""What a team may do in its namespace: create, watch and delete RayJobs; create the ConfigMap that carries the
training code (``ray-efa-eks rayjob``); read the pods' logs and its queue's Workloads. No update of a RayJob (its
``spec.suspend`` is Kueue's), no Secret, no RayCluster, nothing outside the namespace."""


def manager_config(pods_ready_timeout_s: int) -> str:
    """The Kueue Configuration: the chart's default (values.yaml ``managerConfig.controllerManagerConfigYaml``)
    with these changes, each from apis/config/v1beta2/configuration_types.go at v0.19.2:

    * ``integrations.frameworks: [ray.io/rayjob]``: Kueue manages RayJobs only (the chart enables twelve, among them
      ``pod`` and ``ray.io/raycluster``; the shared RayCluster and the gate's Job stay outside the queues);
    * ``resources.quotaCheckStrategy: IgnoreUndeclared``: only ``nvidia.com/gpu`` (the ClusterQueues' one covered
      resource) is counted; the CPU-only head and submitter pods need no quota;
    * ``waitForPodsReady``: an admitted RayJob whose pods are not all Ready within ``pods_ready_timeout_s`` is
      evicted (its pods deleted, its nodes freed) and requeued; ``blockAdmission`` admits no other job while one is
      still waiting for its nodes, so two half-started jobs never hold each other's nodes.
    * ``managedJobsNamespaceSelector``: only namespaces with the team label (never kube-system or the Ray namespace).
    """
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        "controller": {
            "groupKindConcurrency": {
                "Job.batch": 5,
                "Pod": 5,
                "Workload.kueue.x-k8s.io": 10,
                "LocalQueue.kueue.x-k8s.io": 5,
                "ClusterQueue.kueue.x-k8s.io": 5,
                "ResourceFlavor.kueue.x-k8s.io": 1,
            }
        },
        "clientConnection": {"qps": 300, "burst": 500},
        "integrations": {"frameworks": ["ray.io/rayjob"]},
        "resources": {"quotaCheckStrategy": "IgnoreUndeclared"},
        "waitForPodsReady": {
            "timeout": f"{pods_ready_timeout_s}s",
            "blockAdmission": True,
            "requeuingStrategy": {"timestamp": "Eviction"},
        },
        "managedJobsNamespaceSelector": {"matchExpressions": [{"key": TEAM_LABEL, "operator": "Exists"}]},
    }
    return yaml.safe_dump(config, sort_keys=False)


def kueue_values(pods_ready_timeout_s: int) -> dict[str, Any]:
    """Chart values over the defaults (module docstring)."""
    return {
        "controllerManager": {
            "manager": {
                "image": {"repository": KUEUE_IMAGE, "tag": f"v{KUEUE_CHART_VERSION}", "pullPolicy": "IfNotPresent"}
            },
            "nodeSelector": {ROLE_LABEL: SYSTEM_ROLE},
        },
        "managerConfig": {"controllerManagerConfigYaml": manager_config(pods_ready_timeout_s)},
    }


def team_namespace_labels(team: TeamQueue) -> dict[str, str]:
    """Pod Security as the Ray namespace (baseline enforced: the workers need the EFA and GPU devices), the team."""
    return {**POD_SECURITY_LABELS, TEAM_LABEL: team.name}


def team_network_policy_spec(metrics_from_namespaces: list[str]) -> dict[str, Any]:
    """Every pod of a team namespace takes ingress from the namespace's own pods (a job's head, workers and submitter
    reach each other on every port, as components/ray/raycluster.py ``ray_pods_network_policy_spec`` allows within the
    shared cluster) and on the Ray metrics ports from ``metrics_from_namespaces`` (Prometheus); nothing else. EFA's
    RDMA traffic bypasses the kernel's IP stack and no NetworkPolicy applies to it."""
    ingress: list[dict[str, Any]] = [{"from": [{"podSelector": {}}]}]
    if metrics_from_namespaces:
        ingress.append(
            {
                "from": [
                    {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: ns}}} for ns in metrics_from_namespaces
                ],
                "ports": [{"protocol": "TCP", "port": p} for p in METRICS_PORTS.values()],
            }
        )
    return {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": ingress}


@dataclass
class JobQueuesArgs:
    """Inputs of :class:`JobQueues`."""

    provider: k8s.Provider
    """Kubernetes provider of the cluster Kueue installs into."""
    teams: list[TeamQueue]
    """The teams (``jobQueues``): each gets a namespace, a LocalQueue and ClusterQueue with its GPU quota,
    RBAC for RayJobs and a storage role on its own prefix."""
    instance_type: InstanceType
    """The GPU node group's type: one ResourceFlavor, its GPUs per node turn node quotas into GPUs."""
    cluster_name: pulumi.Input[str]
    """The EKS cluster the teams' Pod Identity associations belong to."""
    cluster_arn: pulumi.Input[str]
    """Its ARN, for the teams' roles' trust policies."""
    bucket_name: pulumi.Input[str]
    """The checkpoint bucket; each team gets ``teams/<team>`` in it."""
    bucket_arn: pulumi.Input[str]
    """Its ARN, for the teams' storage policies."""
    kms_key_arn: pulumi.Input[str] | None = None
    """The bucket's KMS key (SSE-KMS), granted through S3 only; None: SSE-S3."""
    region: str | None = None
    """The bucket's region, for the KMS grant's ``kms:ViaService`` condition."""
    pods_ready_timeout_s: int = 1200
    """How long an admitted job may wait for all its pods (nodes from zero included) before Kueue evicts it."""
    network_policy: bool = True
    """A NetworkPolicy in each team namespace (:func:`team_network_policy_spec`)."""
    metrics_from_namespaces: list[str] = field(default_factory=lambda: [METRICS_NAMESPACE])
    """Namespaces that may scrape the team's Ray pods' metrics ports."""
    tags: dict[str, str] = field(default_factory=dict)
    """AWS tags on the teams' IAM roles."""
    depends_on: list[pulumi.Resource] = field(default_factory=list)
    """What Kueue's release waits for: the system node it runs on."""


class JobQueues(pulumi.ComponentResource):
    """Kueue's release, the queues' objects, and per team its namespace, RBAC and storage role."""

    release: k8s.helm.v3.Release
    namespaces: list[k8s.core.v1.Namespace]
    namespace_names: list[str]
    storage: dict[str, PodStorageAccess]

    def __init__(self, name: str, args: JobQueuesArgs, opts: pulumi.ResourceOptions | None = None):
        if not args.teams:
            raise ValueError("JobQueues: teams is empty; list at least one TeamQueue (or create no JobQueues)")
        super().__init__("ray-efa-eks:index:JobQueues", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)
        kns = k8s.core.v1.Namespace(
            f"{name}-kueue-ns", metadata={"name": KUEUE_NAMESPACE, "labels": dict(POD_SECURITY_LABELS)}, opts=child
        )
        if args.network_policy:  # the VPC CNI's strict mode denies a pod no policy selects (network_policies.py)
            in_kns = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[kns]))
            for policy, spec in (
                ("kueue-default-deny", default_deny_ingress()),
                ("kueue-api-server-calls", from_anywhere(KUEUE_API_PORTS)),
                ("kueue-egress", allow_all_egress()),
            ):
                k8s.networking.v1.NetworkPolicy(
                    f"{name}-{policy}", metadata={"name": policy, "namespace": KUEUE_NAMESPACE}, spec=spec, opts=in_kns
                )
        self.release = k8s.helm.v3.Release(
            f"{name}-kueue",
            chart=KUEUE_CHART,
            version=KUEUE_CHART_VERSION,
            namespace=kns.metadata["name"],
            values=kueue_values(args.pods_ready_timeout_s),
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[kns, *args.depends_on])),
        )
        after_kueue = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[self.release]))
        node_labels = {ROLE_LABEL: GPU_ROLE, "ray-efa-eks/instance-type": args.instance_type.name}
        self.namespaces, self.storage = [], {}
        for t in args.teams:
            ns = k8s.core.v1.Namespace(
                f"{name}-{t.name}-ns", metadata={"name": t.namespace, "labels": team_namespace_labels(t)}, opts=child
            )
            self.namespaces.append(ns)
            in_ns = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[ns]))
            if args.network_policy:
                k8s.networking.v1.NetworkPolicy(
                    f"{name}-{t.name}-netpol",
                    metadata={"name": "team-pods", "namespace": t.namespace},
                    spec=team_network_policy_spec(args.metrics_from_namespaces),
                    opts=in_ns,
                )
                k8s.networking.v1.NetworkPolicy(
                    f"{name}-{t.name}-egress",
                    metadata={"name": "team-egress", "namespace": t.namespace},
                    spec=allow_all_egress(),
                    opts=in_ns,
                )
            k8s.core.v1.ServiceAccount(
                f"{name}-{t.name}-sa", metadata={"name": TEAM_SERVICE_ACCOUNT, "namespace": t.namespace}, opts=in_ns
            )
            role = k8s.rbac.v1.Role(
                f"{name}-{t.name}-role",
                metadata={"name": "rayjob-submitter", "namespace": t.namespace},
                rules=TEAM_RULES,
                opts=in_ns,
            )
            k8s.rbac.v1.RoleBinding(
                f"{name}-{t.name}-binding",
                metadata={"name": "rayjob-submitter", "namespace": t.namespace},
                role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "rayjob-submitter"},
                subjects=[
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": TEAM_GROUP.format(team=t.name)}
                ],
                opts=pulumi.ResourceOptions.merge(in_ns, pulumi.ResourceOptions(depends_on=[role])),
            )
            self.storage[t.name] = PodStorageAccess(
                f"{name}-{t.name}-storage",
                PodStorageAccessArgs(
                    cluster_name=args.cluster_name,
                    cluster_arn=args.cluster_arn,
                    namespace=t.namespace,
                    service_account=TEAM_SERVICE_ACCOUNT,
                    bucket_name=args.bucket_name,
                    bucket_arn=args.bucket_arn,
                    prefix=TEAM_PREFIX.format(team=t.name),
                    kms_key_arn=args.kms_key_arn,
                    region=args.region,
                    tags=args.tags,
                ),
                opts=pulumi.ResourceOptions(parent=self),
            )
        self.namespace_names = [t.namespace for t in args.teams]
        for obj in team_objects(args.teams, args.instance_type.name, args.instance_type.gpus, node_labels):
            meta = obj["metadata"]
            deps = [self.release] + [
                ns for ns, t in zip(self.namespaces, args.teams) if meta.get("namespace") == t.namespace
            ]
            k8s.apiextensions.CustomResource(
                f"{name}-{obj['kind'].lower()}-{meta['name']}",
                api_version=obj["apiVersion"],
                kind=obj["kind"],
                metadata=meta,
                spec=obj["spec"],
                opts=pulumi.ResourceOptions.merge(after_kueue, pulumi.ResourceOptions(depends_on=deps)),
            )
        self.register_outputs({"namespaces": self.namespace_names})
