"""docs/security.md's least-privilege table says what the rendered stack does (issue 37, item 9): the names, ports,
versions and rules it quotes are the ones the program and the rule set have."""

from __future__ import annotations

import re
from pathlib import Path

from ray_efa_eks.components.device_plugins import DevicePluginsArgs
from ray_efa_eks.components.raycluster import METRICS_PORTS
from ray_efa_eks.tools import rules

PAGE = (Path(__file__).resolve().parents[1] / "docs" / "security.md").read_text()
TABLE = PAGE[PAGE.index("## Least privilege, item by item"):]
ITEMS = ("EFA gate Job", "NetworkPolicy over every Ray pod", "KubeRay operator", "Ray pods' AWS SDKs",
         "storage proof hints", "image pinning", "device plugins", "Pod Security of the head and the gate",
         "host `/sys` mount")


def test_one_row_per_item():
    rows = [ln.split("|")[1].strip() for ln in TABLE.splitlines() if ln.startswith("| ") and "---" not in ln]
    assert rows[1:] == list(ITEMS)


def test_quoted_names_ports_versions_and_rules_are_the_stacks(default_run):
    policies = {r["metadata"]["name"] for r in default_run.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")}
    assert {p for p in policies if p.startswith("ray-")} <= set(re.findall(r"`(ray-[a-z-]+)`", TABLE))
    assert all(str(p) in TABLE for p in METRICS_PORTS.values())
    args = DevicePluginsArgs(provider=None)
    assert f"chart {args.efa_chart_version}" in TABLE and f"plugin {args.nvidia_chart_version}" in TABLE
    named = set(re.findall(r"rule `([a-z-]+)`", TABLE))
    assert named and named <= set(rules.RULE_IDS)
    assert {"gate-no-api-token", "ray-pods-network-policy", "kuberay-single-namespace", "ray-pods-region",
            "device-plugin-versions", "pod-security-baseline"} <= named
    release = next(r for r in default_run.of_type("kubernetes:helm.sh/v3:Release") if r["chart"] == "kuberay-operator")
    assert f"watchNamespace: [{release['values']['watchNamespace'][0]}]" in TABLE
