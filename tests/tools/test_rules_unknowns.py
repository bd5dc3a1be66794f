"""What ``rules.check`` says about values a preview cannot know and inputs it cannot read, for the monitoring and
node-role rules: a DCGM exporter whose securityContext is still unknown is not judged (``pulumi up`` is), a release
without a namespace is not charged with one, and a role whose trust policy is not JSON is no node role. Each case is
set beside one the rule does flag, so a silent rule cannot pass."""

from __future__ import annotations

import json

import pytest

from ray_efa_eks.tools import rules
from ray_efa_eks.tools.layout import HELM_RELEASE, UNKNOWN, Resource

POLICY = Resource(
    "kubernetes:networking.k8s.io/v1:NetworkPolicy",
    "other-ingress",
    "urn:np",
    None,
    {"metadata": {"namespace": "elsewhere"}, "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}},
)
"""An ingress NetworkPolicy of another namespace: the stack has policies, none of them selects the exporter."""


def dcgm(security_context, namespace: str | None = "monitoring") -> Resource:
    props = {"chart": "dcgm-exporter", "values": {"securityContext": security_context}}
    if namespace is not None:
        props["namespace"] = namespace
    return Resource(HELM_RELEASE, "dcgm", "urn:dcgm", None, props)


HARDENED = {"privileged": False, "capabilities": {"add": [], "drop": ["ALL"]}}


@pytest.mark.parametrize(
    "release, says",
    [
        (dcgm({"capabilities": {"add": UNKNOWN}}), []),  # a preview's unknown: up judges it
        (dcgm({"privileged": UNKNOWN, "capabilities": {"add": ["SYS_ADMIN"]}}), []),
        (
            dcgm({"capabilities": {"add": ["SYS_ADMIN"]}}),
            ["the exporter gets SYS_ADMIN", "no NetworkPolicy of namespace monitoring selects its pods"],
        ),
        (dcgm({"privileged": True}), ["the exporter runs privileged", "no NetworkPolicy of namespace monitoring"]),
        (dcgm(HARDENED, namespace=None), []),  # no namespace to look a policy up in: not charged with one
        (dcgm(HARDENED), ["no NetworkPolicy of namespace monitoring selects its pods"]),
    ],
)
def test_monitoring_hardened_judges_only_what_it_can_read(release, says):
    found = rules.check([release, POLICY], only=["monitoring-hardened"])
    assert [v.rule for v in found] == ["monitoring-hardened"] * len(says)
    for v, fragment in zip(found, says):
        assert fragment in v.problem, v.problem


def node_role(trust) -> list[Resource]:
    role = Resource("aws:iam/role:Role", "gpu-node-role", "urn:role", None, {"assumeRolePolicy": trust})
    cni = Resource(
        "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
        "cni",
        "urn:att",
        None,
        {"role": "gpu-node-role", "policyArn": "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy"},
    )
    return [role, cni]


EC2_TRUST = {
    "Statement": [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]
}


@pytest.mark.parametrize(
    "trust, flagged",
    [
        (json.dumps(EC2_TRUST), True),  # a trust policy as the engine passes it: a JSON string
        (EC2_TRUST, True),
        ('{"Statement": [{"Principal": ', False),  # not JSON: no node role to judge
        (json.dumps({"Statement": [{"Principal": {"Service": "pods.eks.amazonaws.com"}}]}), False),
        (json.dumps(["not", "a", "policy"]), False),
    ],
)
def test_node_role_least_privilege_reads_only_a_trust_policy_it_can_parse(trust, flagged):
    found = rules.check(node_role(trust), only=["node-role-least-privilege"])
    assert [(v.rule, v.severity) for v in found] == ([("node-role-least-privilege", "warning")] if flagged else [])
    if flagged:
        assert found[0].problem.startswith("the node role holds AmazonEKS_CNI_Policy: the VPC CNI's ENI and IP rights")
