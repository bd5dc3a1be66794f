"""NetworkPolicy specs shared by every namespace of the stack, and the VPC CNI's strict enforcing mode.

Strict mode (``NETWORK_POLICY_ENFORCING_MODE=strict`` in the ``aws-node`` container; EKS user guide, "Restrict Pod
network traffic with Kubernetes network policies", step 1): a new pod starts with a default-deny policy, ingress and
egress, until the network policy agent has applied the policies that select it; in the default ``standard`` mode it
starts default-allow, and a Ray pod (recreated on every spec change, created on every scale from zero) or a
monitoring pod is open to every pod of the cluster for that window. The same page: "in strict mode, you must have a
network policy for every endpoint that your pods need to access in your cluster ... this requirement applies to the
CoreDNS pods", and the default-deny is not set up for host-network pods. A pod no policy selects stays default-deny
(amazon-vpc-cni-k8s README, ``NETWORK_POLICY_ENFORCING_MODE``: "a new pod will be blocked from Egress and Ingress
connections till a qualifying Network Policy is applied"). So with strict mode every namespace the stack runs pods in
gets :func:`allow_all_egress` (DNS, the API server, S3, ECR stay reachable as before; egress is not what these
policies narrow), and ``kube-system``, whose pods we do not own, :func:`allow_all_ingress` as well.
"""

from __future__ import annotations

from typing import Any
from ..kube import NAMESPACE_NAME_LABEL

STRICT = "strict"
STANDARD = "standard"
ENFORCING_MODES = (STRICT, STANDARD)
ENFORCING_MODE_ENV = "NETWORK_POLICY_ENFORCING_MODE"
"""The ``aws-node`` container variable (amazon-vpc-cni-k8s README, v1.17.1+), set through the vpc-cni add-on's
``configurationValues.env``; pulumi-eks (nodejs/eks/addons/cni-addon.ts ``mergeConfigurationValues``) merges a
user's ``env`` over the ones it computes."""
KUBE_SYSTEM = "kube-system"


def cni_configuration(mode: str) -> dict[str, Any]:
    """The vpc-cni add-on ``configurationValues`` that set the enforcing mode."""
    if mode not in ENFORCING_MODES:
        raise ValueError(f"network policy enforcing mode {mode!r}: use one of {ENFORCING_MODES}")
    return {"env": {ENFORCING_MODE_ENV: mode}}


def allow_all_egress() -> dict[str, Any]:
    """Selects every pod of the namespace and lets it reach anything: under strict mode a pod no policy selects
    stays default-deny (its DNS lookups and API calls included); ingress is left to the other policies."""
    return {"podSelector": {}, "policyTypes": ["Egress"], "egress": [{}]}


def allow_all_ingress() -> dict[str, Any]:
    """Selects every pod of the namespace and admits everything: what standard mode did for pods the stack does not
    own (CoreDNS on port 53 for every pod, metrics-server for the API server, the charts' webhooks)."""
    return {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{}]}


def default_deny_ingress() -> dict[str, Any]:
    """Selects every pod of the namespace and admits nothing; the namespace's other policies add what is needed."""
    return {"podSelector": {}, "policyTypes": ["Ingress"]}


def same_namespace_ingress() -> dict[str, Any]:
    """Every pod of the namespace admits every other pod of it, on any port."""
    return {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{"from": [{"podSelector": {}}]}]}


def from_namespaces(pod_labels: dict[str, str], namespaces: list[str], ports: list[int]) -> dict[str, Any]:
    """Pods labelled ``pod_labels`` (all, when empty) admit ``namespaces``' pods on ``ports`` (TCP) only."""
    return {
        "podSelector": {"matchLabels": dict(pod_labels)} if pod_labels else {},
        "policyTypes": ["Ingress"],
        "ingress": [
            {
                "from": [
                    {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: ns}}} for ns in sorted(set(namespaces))
                ],
                "ports": [{"protocol": "TCP", "port": p} for p in ports],
            }
        ],
    }


def from_anywhere(ports: list[int]) -> dict[str, Any]:
    """Every pod of the namespace admits any source on ``ports`` (TCP) only: an admission webhook, which the API
    server calls from its own addresses (no pod or namespace selector can name it)."""
    return {
        "podSelector": {},
        "policyTypes": ["Ingress"],
        "ingress": [{"ports": [{"protocol": "TCP", "port": p} for p in ports]}],
    }
