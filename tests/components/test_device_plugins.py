"""Device plugins schedule on the GPU nodes the stack creates, judged against each chart's own default values.

The charts' default ``values.yaml`` (tests/fixtures/charts/, verbatim copies of /work/shared/charts/) are merged
with the values the program passes to its Helm releases the way Helm merges them (maps recursively, lists and
scalars replace), then the DaemonSet pod's scheduling constraints (as each chart's template builds them from the
values) are matched against a GPU node as EKS would label and taint it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from ray_efa_eks.components.nodes.instances import CATALOGUE
from ray_efa_eks.tools.mockrun import MockRun

CHARTS = Path(__file__).parents[1] / "fixtures" / "charts"
NVIDIA = ["nvidia-device-plugin-0.17.1", "nvidia-device-plugin-0.20.0"]
EFA = ["aws-efa-k8s-device-plugin-v0.5.30", "aws-efa-k8s-device-plugin-v0.5.7"]
GPU_TYPES = sorted(n for n, t in CATALOGUE.items() if t.gpus)


def helm_merge(default: Any, override: Any) -> Any:
    """Helm coalescing, written independently of the component: maps merge, lists/scalars replace, null deletes."""
    if not (isinstance(default, dict) and isinstance(override, dict)):
        return override
    out = dict(default)
    for k, v in override.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = helm_merge(out.get(k), v) if k in out else v
    return out


def chart_defaults(folder: str) -> dict:
    return yaml.safe_load((CHARTS / folder / "values.yaml").read_text())


def nvidia_pod(values: dict) -> dict:
    """The device-plugin DaemonSet template passes nodeSelector, affinity and tolerations through unchanged."""
    terms = (
        ((values.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
        or {}
    ).get("nodeSelectorTerms")
    return {
        "nodeSelector": values.get("nodeSelector") or {},
        "terms": terms,
        "tolerations": values.get("tolerations") or [],
    }


def efa_pod(values: dict) -> dict:
    """The EFA DaemonSet template: one required term per allow-list key (key In values, compute-type NotIn auto)."""
    sil = values["supportedInstanceLabels"]
    terms = [
        {
            "matchExpressions": [
                {"key": k, "operator": "In", "values": sil["values"]},
                {"key": "eks.amazonaws.com/compute-type", "operator": "NotIn", "values": ["auto"]},
            ]
        }
        for k in sil["keys"]
    ]
    tolerations = [{"key": "CriticalAddonsOnly", "operator": "Exists"}, *(values.get("tolerations") or [])]
    return {"nodeSelector": values.get("nodeSelector") or {}, "terms": terms, "tolerations": tolerations}


def _expr_ok(e: dict, labels: dict) -> bool:
    op, key = e["operator"], e["key"]
    if op == "In":
        return key in labels and labels[key] in e["values"]
    if op == "NotIn":
        return labels.get(key) not in e["values"]
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    raise AssertionError(f"operator {op} not modelled")


def _tolerates(tols: list[dict], taint: dict) -> bool:
    for t in tols:
        if t.get("effect") not in (None, "", taint["effect"]):
            continue
        if t.get("operator", "Equal") == "Exists" and t.get("key") in (None, taint["key"]):
            return True
        if t.get("key") == taint["key"] and t.get("value") == taint.get("value"):
            return True
    return False


def why_not(pod: dict, node: dict) -> str | None:
    """None when the pod can be scheduled on the node, else the first reason it cannot."""
    labels = node["labels"]
    for k, v in pod["nodeSelector"].items():
        if labels.get(k) != v:
            return f"nodeSelector {k}={v} not on node"
    if pod["terms"] is not None and not any(
        all(_expr_ok(e, labels) for e in t.get("matchExpressions", [])) for t in pod["terms"]
    ):
        return f"no required nodeAffinity term matches: {pod['terms']}"
    for taint in node["taints"]:
        if taint["effect"] in ("NoSchedule", "NoExecute") and not _tolerates(pod["tolerations"], taint):
            return f"taint {taint} not tolerated"
    return None


def gpu_node(run: MockRun, instance_type: str) -> dict:
    """A GPU node as EKS registers it: the node group's labels and taints plus the kubelet's well-known labels."""
    mng = run.one("eks:index:ManagedNodeGroup", "gpu")
    effects = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute", "PREFER_NO_SCHEDULE": "PreferNoSchedule"}
    labels = {
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": instance_type,
        "eks.amazonaws.com/nodegroup": "gpu-mng",
        "eks.amazonaws.com/capacityType": "ON_DEMAND",
        **(mng.inputs.get("labels") or {}),
    }
    taints = [{**t, "effect": effects[t["effect"]]} for t in mng.inputs.get("taints") or []]
    return {"labels": labels, "taints": taints}


@pytest.fixture(scope="module")
def runs(catalogue_runs) -> dict[str, MockRun]:
    """Every catalogue GPU type's stack (tests/conftest.py, shared with tests/components/test_catalogue.py)."""
    return {t: run for t, (_, run) in catalogue_runs.items()}


def _release(run: MockRun, chart: str):
    return next(r for r in run.of_type("kubernetes:helm.sh/v3:Release") if r.inputs["chart"] == chart)


@pytest.mark.parametrize("folder", NVIDIA)
@pytest.mark.parametrize("instance_type", GPU_TYPES)
def test_nvidia_plugin_schedules_on_every_gpu_type(runs: dict, instance_type: str, folder: str) -> None:
    run = runs[instance_type]
    values = helm_merge(chart_defaults(folder), _release(run, "nvidia-device-plugin").inputs["values"])
    assert why_not(nvidia_pod(values), gpu_node(run, instance_type)) is None
    system = {"labels": run.one("eks:index:ManagedNodeGroup", "system").inputs["labels"], "taints": []}
    assert why_not(nvidia_pod(values), system) is not None, "the GPU plugin must stay off the system node"


@pytest.mark.parametrize("folder", EFA)
@pytest.mark.parametrize("instance_type", [t for t in GPU_TYPES if CATALOGUE[t].efa_supported])
def test_efa_plugin_schedules_on_every_efa_type(runs: dict, instance_type: str, folder: str) -> None:
    run = runs[instance_type]
    values = helm_merge(chart_defaults(folder), _release(run, "aws-efa-k8s-device-plugin").inputs["values"])
    assert why_not(efa_pod(values), gpu_node(run, instance_type)) is None


def test_pinned_chart_versions_are_the_ones_checked(runs: dict) -> None:
    run = runs["g6.12xlarge"]
    assert f"nvidia-device-plugin-{_release(run, 'nvidia-device-plugin').inputs['version']}" in NVIDIA
    assert f"aws-efa-k8s-device-plugin-{_release(run, 'aws-efa-k8s-device-plugin').inputs['version']}" in EFA


def test_chart_defaults_alone_schedule_nowhere(runs: dict) -> None:
    """The model can fail: the charts' own defaults reject an EKS GPU node (no NFD label, GPU taint untolerated)."""
    node = gpu_node(runs["g6.12xlarge"], "g6.12xlarge")
    assert "no required nodeAffinity term" in why_not(nvidia_pod(chart_defaults(NVIDIA[0])), node)
    assert "taint" in why_not(efa_pod(chart_defaults(EFA[0])), node)
    unlisted = helm_merge(chart_defaults(EFA[0]), {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]})
    assert why_not(efa_pod(unlisted), gpu_node(runs["g6.12xlarge"], "g7e.2xlarge")) is not None
