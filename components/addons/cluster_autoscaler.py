"""ClusterAutoscaler: the Kubernetes Cluster Autoscaler, which adds and removes GPU nodes for Ray's worker pods.

Ray's autoscaler (components/ray/ray_autoscaler.py) creates a worker pod when a job asks for GPUs; the pod is pending
until a node fits it; the Cluster Autoscaler sees the pending pod and raises the GPU managed node group's desired
size (its Auto Scaling group), and when Ray has removed an idle worker it removes the empty node
(``--scale-down-unneeded-time``, 10 min by default). The managed node group and its launch template stay the one
definition of a GPU node (EFA interfaces, ODCR targeting, hardening); Karpenter would need a second one (its own
NodePool/EC2NodeClass), which is why this stack uses the Cluster Autoscaler.

Chart: ``cluster-autoscaler`` 9.59.0 (app v1.35.0) from kubernetes.github.io/autoscaler, values checked against the
chart's own defaults in tests. Auto-discovery finds the ASGs tagged ``k8s.io/cluster-autoscaler/enabled`` and
``k8s.io/cluster-autoscaler/<cluster>``: EKS tags every managed node group's ASG with both ("Managed node groups":
"automatically tagged for auto-discovery by the Kubernetes Cluster Autoscaler"), so the system group is found too,
but its min = max = 1 keeps it fixed.

At size 0 there is no node to copy, so the Cluster Autoscaler builds a template node: CPU, memory and GPU from the
instance type, labels and taints of a managed node group from ``eks:DescribeNodegroup``, and anything else from
``k8s.io/cluster-autoscaler/node-template/...`` tags on the ASG (cloudprovider/aws/README.md). EFA is not derived
from the instance type, so the GPU group's ASG gets ``.../resources/vpc.amazonaws.com/efa`` (components/nodes/node_groups.py
:func:`scale_from_zero_tags`); EKS does not copy node group tags onto its ASG, hence ``aws.autoscaling.Tag``.

IAM through EKS Pod Identity (the chart documents IRSA only; the v1.35 binary's AWS SDK for Go v2 default chain reads
Pod Identity credentials: /work/shared/charts/README.md). The permissions are the ones the AWS README lists
(:data:`DESCRIBE_ACTIONS`, :data:`SCALE_ACTIONS`); the two that change capacity are allowed only on ASGs tagged
``k8s.io/cluster-autoscaler/<this cluster>: owned`` (EKS's tag), ``eks:DescribeNodegroup`` only on this cluster's node
groups. The Describe calls support no resource scoping (Service Authorization Reference, Amazon EC2 Auto Scaling).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from ..kube import ROLE_LABEL, SYSTEM_ROLE, pod_resources
from ..cluster.pod_identity import pod_identity_trust_policy

CHART = "cluster-autoscaler"
CHART_VERSION = "9.59.0"
CHART_REPO = "https://kubernetes.github.io/autoscaler"
NAMESPACE = "kube-system"
SERVICE_ACCOUNT = "cluster-autoscaler"
DESCRIBE_ACTIONS = (
    "autoscaling:DescribeAutoScalingGroups",
    "autoscaling:DescribeAutoScalingInstances",
    "autoscaling:DescribeLaunchConfigurations",
    "autoscaling:DescribeScalingActivities",
    "autoscaling:DescribeTags",
    "ec2:DescribeImages",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeLaunchTemplateVersions",
    "ec2:GetInstanceTypesFromInstanceRequirements",
)
"""Read-only calls (cloudprovider/aws/README.md "IAM Policy", plus DescribeTags for auto-discovery and
DescribeLaunchTemplateVersions for launch-template ASGs, as it says)."""
SCALE_ACTIONS = ("autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup")
"""The two calls that change capacity: only on this cluster's ASGs (tag condition)."""


def autoscaler_policy(cluster_name: str, region: str, account_id: str) -> str:
    """The Cluster Autoscaler's IAM policy, scoped to ``cluster_name`` where AWS allows it (module docstring)."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {"Sid": "Describe", "Effect": "Allow", "Action": list(DESCRIBE_ACTIONS), "Resource": "*"},
                {
                    "Sid": "ScaleOwnGroups",
                    "Effect": "Allow",
                    "Action": list(SCALE_ACTIONS),
                    "Resource": "*",
                    "Condition": {
                        "StringEquals": {f"aws:ResourceTag/k8s.io/cluster-autoscaler/{cluster_name}": "owned"}
                    },
                },
                {
                    "Sid": "DescribeOwnNodegroups",
                    "Effect": "Allow",
                    "Action": "eks:DescribeNodegroup",
                    "Resource": f"arn:aws:eks:{region}:{account_id}:nodegroup/{cluster_name}/*/*",
                },
            ],
        }
    )


def chart_values(cluster_name: str, region: str) -> dict[str, Any]:
    """Values over the chart's defaults (every key exists there: tests/components/test_cluster_autoscaler.py)."""
    return {
        "cloudProvider": "aws",
        "awsRegion": region,
        "autoDiscovery": {"clusterName": cluster_name},
        "rbac": {"serviceAccount": {"create": True, "name": SERVICE_ACCOUNT}},
        "nodeSelector": {ROLE_LABEL: SYSTEM_ROLE},
        "resources": pod_resources("100m", "600Mi"),
        # The binary's default, said explicitly: an empty GPU node goes 10 min after Ray removed its worker.
        "extraArgs": {"scale-down-unneeded-time": "10m"},
    }


@dataclass
class ClusterAutoscalerArgs:
    """Inputs of :class:`ClusterAutoscaler`."""

    provider: k8s.Provider
    """Kubernetes provider of the cluster the chart installs into."""
    cluster_name: pulumi.Input[str]
    """The EKS cluster: the autoscaler finds its node groups by the cluster's auto-discovery tags, and its Pod
    Identity association belongs to it."""
    cluster_arn: pulumi.Input[str]
    """Its ARN: the autoscaler role's trust policy admits ``pods.eks.amazonaws.com`` for this cluster only."""
    region: str
    """The cluster's region (the autoscaler's AWS API calls and the IAM policy's resources)."""
    chart_version: str = CHART_VERSION
    """The ``cluster-autoscaler`` chart (kubernetes/autoscaler) version."""
    tags: dict[str, str] = field(default_factory=dict)
    """AWS tags on the autoscaler's IAM role and Pod Identity association."""
    depends_on: list[pulumi.Resource] = field(default_factory=list)
    """The system node group (its pod runs there) and the Pod Identity agent add-on."""


class ClusterAutoscaler(pulumi.ComponentResource):
    """IAM role (Pod Identity), its association and the Helm release."""

    role: aws.iam.Role
    release: k8s.helm.v3.Release

    def __init__(self, name: str, args: ClusterAutoscalerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ray-efa-eks:index:ClusterAutoscaler", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        account = aws.get_caller_identity_output(opts=pulumi.InvokeOutputOptions(parent=self)).account_id
        trust = pulumi.Output.all(account, args.cluster_arn).apply(
            lambda a: pod_identity_trust_policy(a[0], a[1], NAMESPACE, SERVICE_ACCOUNT)
        )
        self.role = aws.iam.Role(f"{name}-role", assume_role_policy=trust, tags=args.tags, opts=child)
        aws.iam.RolePolicy(
            f"{name}-policy",
            role=self.role.id,
            policy=pulumi.Output.all(args.cluster_name, account).apply(
                lambda a: autoscaler_policy(a[0], args.region, a[1])
            ),
            opts=child,
        )
        association = aws.eks.PodIdentityAssociation(
            f"{name}-pod-identity",
            cluster_name=args.cluster_name,
            namespace=NAMESPACE,
            service_account=SERVICE_ACCOUNT,
            role_arn=self.role.arn,
            tags=args.tags,
            opts=child,
        )
        self.release = k8s.helm.v3.Release(
            f"{name}-release",
            chart=CHART,
            version=args.chart_version,
            repository_opts={"repo": CHART_REPO},
            namespace=NAMESPACE,
            values=pulumi.Output.from_input(args.cluster_name).apply(lambda c: chart_values(c, args.region)),
            opts=pulumi.ResourceOptions(
                parent=self, provider=args.provider, depends_on=[association, *args.depends_on]
            ),
        )
        self.register_outputs({"chartVersion": args.chart_version})
