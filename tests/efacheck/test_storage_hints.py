"""The storage proof's hints name the trust policy the stack builds.

Every condition key a hint or the gate's docs name for the Pod Identity trust policy is one the stack's own
policy (components/cluster/pod_identity.py) uses, and the hint names all of them; a policy written from the hint passes
tools/aws_rules.py ``pod-identity-trust`` and raises neither layout warning (``pod-identity-trust-scoped``,
``pod-identity-trust-keys``). The hint once recommended ``aws:SourceArn``, which Pod Identity is not documented
to send: a policy following it would have been flagged.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ray_efa_eks.components.cluster.pod_identity import pod_identity_trust_policy
from ray_efa_eks.efacheck.storage_proof import CAUSES
from ray_efa_eks.tools import aws_rules

ROOT = Path(__file__).resolve().parents[2]
KEY = re.compile(r"aws:(?:RequestTag/[a-z-]+|[A-Z][A-Za-z]+)")
CLUSTER = "arn:aws:eks:us-east-1:123456789012:cluster/ray-efa-eks"


def stack_policy_keys() -> set[str]:
    (st,) = json.loads(pod_identity_trust_policy("123456789012", CLUSTER, "ray", "ray-train"))["Statement"]
    return {k for kv in st["Condition"].values() for k in kv}


def hint_texts() -> dict[str, str]:
    """Every place that tells a user what the trust policy must hold."""
    texts = {f"CAUSES[{k}]": v for k, v in CAUSES.items() if KEY.search(v)}
    for page in ("docs/efa-gate.md", "docs/security.md"):
        for i, line in enumerate((ROOT / page).read_text().splitlines()):
            if "trust" in line.lower() and KEY.search(line):
                texts[f"{page}:{i + 1}"] = line
    return texts


def test_the_trust_hint_names_exactly_the_keys_the_stack_uses():
    assert "CAUSES[trust_policy]" in hint_texts()
    assert set(KEY.findall(CAUSES["trust_policy"])) == stack_policy_keys()


@pytest.mark.parametrize("where", sorted(hint_texts()))
def test_no_hint_names_a_key_the_stack_does_not_use(where):
    text = hint_texts()[where]
    named = set(KEY.findall(text))
    # a line may name a key only to say the stack does not use it
    extra = {k for k in named - stack_policy_keys() if not re.search(rf"(no|not|never)[^.;]*{re.escape(k)}", text)}
    assert not extra, f"{where} recommends {sorted(extra)}, which the stack's trust policy does not use"


def _rule_findings(keys: set[str]) -> tuple[str | None, set[str]]:
    """aws_rules' refusal (None = accepted) and the layout warnings for a trust statement conditioned on keys."""
    from ray_efa_eks.tools import rules
    from ray_efa_eks.tools.layout import Resource, Stack

    st = {
        "Effect": "Allow",
        "Principal": {"Service": "pods.eks.amazonaws.com"},
        "Action": ["sts:AssumeRole", "sts:TagSession"],
        "Condition": {"StringEquals": {k: "x" for k in keys}},
    }
    policy = json.dumps({"Version": "2012-10-17", "Statement": [st]})
    rule = next(r for r in aws_rules.RULES if r.id == "pod-identity-trust")
    refused = rule.check("role", {"assumeRolePolicy": policy}, None)
    role = Resource(
        type=aws_rules.IAM_ROLE, name="role", urn="urn:role", parent=None, props={"assumeRolePolicy": policy}
    )
    warned = {v.rule for v in rules.check(Stack([role]), only=["pod-identity-trust-scoped", "pod-identity-trust-keys"])}
    return refused, warned


def test_a_policy_written_from_the_hint_passes_the_rules():
    assert _rule_findings(set(KEY.findall(CAUSES["trust_policy"]))) == (None, set())


def test_the_old_hint_would_have_been_flagged():
    old = "sts:AssumeRole and sts:TagSession with aws:SourceAccount/aws:SourceArn of this cluster"
    refused, warned = _rule_findings(set(KEY.findall(old)))
    assert "pod-identity-trust-keys" in warned and "pod-identity-trust-scoped" in warned
    assert set(KEY.findall(old)) != stack_policy_keys()
