"""GPU nodes from zero, node side: the GPU managed node group 0..gpuNodeCount with the Cluster Autoscaler's
scale-from-zero tags, the Cluster Autoscaler's Helm release (values judged against the chart's own defaults) and its
Pod Identity role with the permissions the AWS README lists, scoped to this cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ray_efa_eks.components.addons import cluster_autoscaler as ca
from ray_efa_eks.tools.mockrun import run_program

CHART = Path(__file__).parents[1] / "fixtures" / "charts" / "cluster-autoscaler-9.59.0"
DEFAULTS = yaml.safe_load((CHART / "values.yaml").read_text())
TEMPLATE = "k8s.io/cluster-autoscaler/node-template/"


@pytest.fixture(scope="module")
def default_run():
    return run_program({})


def _missing(values: dict, defaults: dict, prefix: str = "") -> list[str]:
    """Keys of ``values`` the chart's defaults lack; a default that is an empty map (nodeSelector, resources) or
    extraArgs (a map of flags, checked below) takes any key."""
    out = []
    for k, v in values.items():
        if k not in defaults:
            out.append(prefix + k)
        elif isinstance(v, dict) and isinstance(defaults[k], dict) and defaults[k] and k != "extraArgs":
            out += _missing(v, defaults[k], f"{prefix}{k}.")
    return out


def test_every_value_we_set_exists_in_the_chart_defaults(default_run):
    (release,) = [
        r
        for r in default_run.resources
        if r.type == "kubernetes:helm.sh/v3:Release" and r.inputs.get("chart") == "cluster-autoscaler"
    ]
    assert (
        release.inputs["version"] == ca.CHART_VERSION == yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]
    )
    values = release.inputs["values"]
    assert _missing(values, DEFAULTS) == []
    assert _missing({"rbac": {"serviceAcount": {}}}, DEFAULTS) == ["rbac.serviceAcount"]  # the check can fail
    # extraArgs is a map of flags: each one we set is one the chart's values document (commented out there)
    raw = (CHART / "values.yaml").read_text()
    for flag in values["extraArgs"]:
        assert f"# {flag}:" in raw or flag in DEFAULTS["extraArgs"], flag
    assert values["autoDiscovery"]["clusterName"] == "ray-efa-dev" and values["awsRegion"] == "us-east-1"
    assert values["resources"]["requests"] == values["resources"]["limits"]


def test_gpu_group_scales_from_zero_with_the_template_tags(default_run):
    (gpu,) = [r for r in default_run.resources if r.type == "eks:index:ManagedNodeGroup" and r.name == "gpu-mng"]
    assert gpu.inputs["scalingConfig"] == {"minSize": 0, "maxSize": 2, "desiredSize": 0}
    assert gpu.inputs["ignoreScalingChanges"] is True  # pulumi up leaves desired to the Cluster Autoscaler
    tags = {
        r.inputs["tag"]["key"]: r.inputs["tag"]["value"]
        for r in default_run.resources
        if r.type == "aws:autoscaling/tag:Tag"
    }
    startup = "startup-taint.cluster-autoscaler.kubernetes.io/efa-unproven"
    assert tags == {
        TEMPLATE + "resources/vpc.amazonaws.com/efa": "1",
        TEMPLATE + "resources/nvidia.com/gpu": "4",
        TEMPLATE + "label/ray-efa-eks/role": "gpu",
        TEMPLATE + "taint/nvidia.com/gpu": "true:NoSchedule",
        TEMPLATE + f"taint/{startup}": "true:NoSchedule",
    }  # nodes join unproven
    # the template's taints are the ones the node group gives its nodes (CA drops the startup one when simulating)
    assert {f"{TEMPLATE}taint/{t['key']}": f"{t['value']}:NoSchedule" for t in gpu.inputs["taints"]} == {
        k: v for k, v in tags.items() if "/taint/" in k
    }


@pytest.mark.parametrize(
    "cfg",
    [
        {"gpuScaleToZero": "false"},
        {
            "gpuCapacity": "reservation",
            "availabilityZone": "us-east-1a",
            "gpuCapacityReservationId": "cr-0123456789abcdef0",
        },
    ],
)
def test_fixed_fleet_keeps_todays_node_group(cfg):
    run = run_program(cfg)
    (gpu,) = [r for r in run.resources if r.type == "eks:index:ManagedNodeGroup" and r.name == "gpu-mng"]
    assert gpu.inputs["scalingConfig"] == {"minSize": 0, "maxSize": 2, "desiredSize": 2}  # min 0
    assert not gpu.inputs.get("ignoreScalingChanges")
    # the fixed fleet's nodes join unproven too (node repair, version updates and new templates replace them)
    assert [t["key"] for t in gpu.inputs["taints"]] == [
        "nvidia.com/gpu",
        "startup-taint.cluster-autoscaler.kubernetes.io/efa-unproven",
    ]
    assert not [
        r for r in run.resources if r.type in ("aws:autoscaling/tag:Tag", "ray-efa-eks:index:ClusterAutoscaler")
    ]


def test_iam_is_the_readme_list_scoped_to_this_cluster(default_run):
    policy = json.loads(ca.autoscaler_policy("ray-efa-dev", "us-east-1", "123456789012"))
    by_sid = {s["Sid"]: s for s in policy["Statement"]}
    assert set(by_sid["Describe"]["Action"]) == set(ca.DESCRIBE_ACTIONS)
    assert not any(
        a.startswith(
            (
                "autoscaling:Set",
                "autoscaling:Terminate",
                "autoscaling:Update",
                "autoscaling:Create",
                "autoscaling:Delete",
                "ec2:Run",
                "ec2:Terminate",
            )
        )
        for a in ca.DESCRIBE_ACTIONS
    )
    scale = by_sid["ScaleOwnGroups"]
    assert set(scale["Action"]) == {"autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"}
    assert scale["Condition"] == {"StringEquals": {"aws:ResourceTag/k8s.io/cluster-autoscaler/ray-efa-dev": "owned"}}
    assert by_sid["DescribeOwnNodegroups"]["Resource"] == "arn:aws:eks:us-east-1:123456789012:nodegroup/ray-efa-dev/*/*"
    (assoc,) = [
        r
        for r in default_run.resources
        if r.type == "aws:eks/podIdentityAssociation:PodIdentityAssociation" and r.name.startswith("cluster-autoscaler")
    ]
    assert (assoc.inputs["namespace"], assoc.inputs["serviceAccount"]) == ("kube-system", "cluster-autoscaler")
    (role,) = [
        r for r in default_run.resources if r.type == "aws:iam/role:Role" and r.name == "cluster-autoscaler-role"
    ]
    trust = json.loads(role.inputs["assumeRolePolicy"])["Statement"][0]["Condition"]["StringEquals"]
    assert trust["aws:RequestTag/kubernetes-namespace"] == "kube-system"
    assert trust["aws:RequestTag/kubernetes-service-account"] == "cluster-autoscaler"
