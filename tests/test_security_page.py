"""docs/security.md's least-privilege table says what the rendered stack does: the names, ports,
versions and rules it quotes are the ones the program and the rule set have."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from ray_efa_eks.components.addons.device_plugins import DevicePluginsArgs
from ray_efa_eks.components.kube import METRICS_PORTS
from ray_efa_eks.tools import rules

PAGE = (Path(__file__).resolve().parents[1] / "docs" / "security.md").read_text()
TABLE = PAGE[PAGE.index("## Least privilege, item by item") : PAGE.index("## The node agent's token")]
HOSTS = PAGE[PAGE.index("## Host access, namespaces and NetworkPolicies") :]
ITEMS = (
    "EFA gate Job",
    "NetworkPolicy over every Ray pod",
    "KubeRay operator",
    "Ray pods' AWS SDKs",
    "storage proof hints",
    "image pinning",
    "device plugins",
    "Pod Security of the head and the gate",
    "host `/sys` mount",
    "GPU worker pods",
    "monitoring",
    "NetworkPolicy enforcing mode",
    "audit trail",
)


def test_one_row_per_item():
    rows = [ln.split("|")[1].strip() for ln in TABLE.splitlines() if ln.startswith("| ") and "---" not in ln]
    assert rows[1:] == list(ITEMS)


def test_quoted_names_ports_versions_and_rules_are_the_stacks(default_run):
    policies = {r["metadata"]["name"] for r in default_run.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")}
    assert {p for p in policies if p.startswith("ray-")} <= set(re.findall(r"`(ray-[a-z-]+)`", TABLE + HOSTS))
    assert all(str(p) in TABLE for p in METRICS_PORTS.values())
    args = DevicePluginsArgs(provider=None)
    assert f"chart {args.efa_chart_version}" in TABLE and f"plugin {args.nvidia_chart_version}" in TABLE
    named = set(re.findall(r"rule `([a-z-]+)`", TABLE))
    assert named and named <= set(rules.RULE_IDS)
    assert {
        "gate-no-api-token",
        "ray-pods-network-policy",
        "kuberay-single-namespace",
        "ray-pods-region",
        "device-plugin-versions",
        "pod-security-baseline",
        "monitoring-hardened",
    } <= named
    release = next(r for r in default_run.of_type("kubernetes:helm.sh/v3:Release") if r["chart"] == "kuberay-operator")
    assert f"watchNamespace: [{release['values']['watchNamespace'][0]}]" in TABLE


def _rows(heading: str) -> list[list[str]]:
    """The cells of the table that follows ``heading`` (a line of the host-access section) in that section."""
    part = HOSTS[HOSTS.index(heading) :]
    lines = part[part.index("\n|") :].strip().splitlines()
    table = []
    for ln in lines:
        if not ln.startswith("|"):
            break
        if "---" not in ln:
            table.append([c.strip() for c in ln.strip("|").split("|")])
    return table[1:]


def test_every_network_policy_of_the_stack_is_listed_with_its_namespace(default_run):
    rendered = {
        (r["metadata"]["namespace"], r["metadata"]["name"])
        for r in default_run.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
    }
    listed = {(row[0].strip("`"), row[1].strip("`")) for row in _rows("NetworkPolicies (with")}
    assert listed == rendered


def test_every_namespace_is_listed_with_the_level_it_enforces(default_run):
    rendered = {
        r["metadata"]["name"]: r["metadata"]["labels"]["pod-security.kubernetes.io/enforce"]
        for r in default_run.of_type("kubernetes:core/v1:Namespace")
    }
    listed = {row[0].strip("`"): row[1] for row in _rows("Pod Security level enforced")}
    assert listed == rendered


def test_every_host_user_is_listed_and_the_charts_say_so(default_run):
    """Our DaemonSet's hostPath, and each chart release whose pinned values make its pod privileged or mount the
    host: the page lists each one, in its namespace."""
    from ray_efa_eks.components.kube import merge

    listed = {row[0].split("`")[1]: (row[1].strip("`"), row[2]) for row in _rows("Every pod of the stack")}
    for ds in default_run.of_type("kubernetes:apps/v1:DaemonSet"):
        spec = ds["spec"]["template"]["spec"]
        if any("hostPath" in v for v in spec.get("volumes", [])):
            assert listed[ds["metadata"]["name"]][0] == ds["metadata"]["namespace"]
    charts = Path(__file__).resolve().parent / "fixtures" / "charts"
    for rel in default_run.of_type("kubernetes:helm.sh/v3:Release"):
        folder = charts / f"{rel['chart']}-{rel['version']}"
        if not folder.exists():
            continue
        values = merge(yaml.safe_load((folder / "values.yaml").read_text()), rel["values"])
        ctx = values.get("securityContext") or {}
        host = ctx.get("privileged") or "kubeletPath" in values or rel["chart"].endswith("device-plugin")
        if host:
            assert listed[rel["chart"]][0] == rel["namespace"], rel["chart"]
            assert ("privileged" in listed[rel["chart"]][1]) == bool(ctx.get("privileged")), rel["chart"]


def test_the_audit_logs_are_the_stacks(default_run):
    cluster = default_run.one("eks:index:Cluster")
    (group,) = default_run.of_type("aws:cloudwatch/logGroup:LogGroup")
    assert f"Audit logs: {' and '.join(f'`{t}`' for t in cluster['enabledClusterLogTypes'])}" in HOSTS
    assert f"{group['retentionInDays']:.0f} days" in HOSTS
