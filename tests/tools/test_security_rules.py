"""The least-privilege layout rules (tools/security_rules.py): silent on the stack this repo builds, and
each one breaks on the shape the stack had before the fix (or on the known-bad version it refuses)."""

from __future__ import annotations

import copy
from typing import Any, Callable

import pytest

from ray_efa_eks.tools import rules
from ray_efa_eks.tools.layout import Resource, from_mockrun

NEW = (
    "gate-no-api-token",
    "ray-pods-network-policy",
    "kuberay-single-namespace",
    "ray-pods-region",
    "device-plugin-versions",
    "pod-security-baseline",
)
HEAD_ONLY = {
    "podSelector": {"matchLabels": {"ray-efa-eks/role": "head"}},
    "policyTypes": ["Ingress"],
    "ingress": [{"from": [{"podSelector": {}}]}],
}


@pytest.fixture(scope="module")
def default(default_run) -> list[Resource]:
    return from_mockrun(default_run)


def edit(resources: list[Resource], name: str, fn: Callable[[dict[str, Any]], None]) -> list[Resource]:
    out = []
    for r in resources:
        if r.name == name:
            props = copy.deepcopy(r.props)
            fn(props)
            r = Resource(r.type, r.name, r.urn, r.parent, props, r.id, r.deps)
        out.append(r)
    return out


def broken(resources: list[Resource]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for v in rules.check(resources, only=NEW):
        found.setdefault(v.rule, []).append(v.problem)
    return found


def test_check_rules_lists_the_new_rules(capsys):
    from ray_efa_eks.tools.command import main

    assert set(NEW) <= set(rules.RULE_IDS)
    main(["check-rules"])
    out = capsys.readouterr().out
    assert all(rule in out for rule in NEW), out


def test_the_stack_passes(default):
    assert broken(default) == {}


def test_gate_with_a_token(default):
    def old(p):  # the old shape: the namespace's default account, token mounted
        spec = p["spec"]["template"]["spec"]
        for k in ("automountServiceAccountToken", "serviceAccountName", "initContainers"):
            spec.pop(k)

    assert "default" in broken(edit(default, "efa-check-job", old))["gate-no-api-token"][0]

    def shared(p):  # the audit's token mounted into the gate's own container too
        spec = p["spec"]["template"]["spec"]
        spec["containers"][0]["volumeMounts"].append({"name": "image-audit-token", "mountPath": "/var/run/x"})

    assert "efa-check" in broken(edit(default, "efa-check-job", shared))["gate-no-api-token"][0]


def test_head_only_network_policy(default):
    bad = [r for r in default if r.name not in ("ray-pods-ingress", "ray-default-deny")]
    bad = edit(bad, "ray-head-ingress", lambda p: p.update(spec=copy.deepcopy(HEAD_ONLY)))
    (problem,) = broken(bad)["ray-pods-network-policy"]
    assert "worker gpu" in problem


def test_cluster_wide_operator(default):
    bad = edit(default, "kuberay-release", lambda p: p["values"].pop("singleNamespaceInstall"))
    assert "ClusterRole" in broken(bad)["kuberay-single-namespace"][0]
    other = edit(default, "kuberay-release", lambda p: p["values"].update(watchNamespace=["elsewhere"]))
    assert "'ray'" in broken(other)["kuberay-single-namespace"][0]


def test_ray_pod_without_region(default):
    def strip(p):
        c = p["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
        c["env"] = [e for e in c["env"] if not e["name"].startswith("AWS_")]

    (problem,) = broken(edit(default, "ray-raycluster", strip))["ray-pods-region"]
    assert "AWS_REGION" in problem and "AWS_EC2_METADATA_DISABLED" in problem


def test_old_device_plugins(default):
    def old_efa(p):
        p["version"] = "v0.5.7"
        p["values"]["supportedInstanceLabels"]["values"] = ["p6-b200.48xlarge"]

    assert "p6-b200" in broken(edit(default, "device-plugins-efa", old_efa))["device-plugin-versions"][0]
    ok = edit(default, "device-plugins-efa", lambda p: p.update(version="v0.5.7"))  # g6.12xlarge only: works
    assert "device-plugin-versions" not in broken(ok)

    def mofed_on(p):
        p["version"] = "0.19.1"
        p["values"].pop("mofedEnabled")

    assert "#1692" in broken(edit(default, "device-plugins-nvidia", mofed_on))["device-plugin-versions"][0]
    assert "device-plugin-versions" not in broken(
        edit(default, "device-plugins-nvidia", lambda p: p.update(version="0.19.1"))
    )  # mofedEnabled: false kept


def test_privileged_head(default):
    def privileged(p):
        p["spec"]["headGroupSpec"]["template"]["spec"]["hostNetwork"] = True

    (problem,) = broken(edit(default, "ray-raycluster", privileged))["pod-security-baseline"]
    assert "head" in problem and "hostNetwork" in problem
