"""The default stack under Pulumi mocks: inventory, EFA node group inputs, SG rule, cost, outputs."""

import pytest

from ray_efa_eks.components.config.config import DEFAULT_KUBERNETES_VERSION
from ray_efa_eks.tools.mockrun import run_program

MNG = "eks:index:ManagedNodeGroup"


def test_inventory(default_run):
    types = [r.type for r in default_run.resources]
    for typ, count in [
        ("aws:ec2/vpc:Vpc", 1),
        ("eks:index:Cluster", 1),
        (MNG, 2),
        ("aws:ec2/natGateway:NatGateway", 1),
        ("kubernetes:ray.io/v1:RayCluster", 1),
        ("kubernetes:batch/v1:Job", 1),
        ("kubernetes:helm.sh/v3:Release", 6),
        ("aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule", 1),
    ]:
        assert types.count(typ) == count, typ
    assert types.count("aws:ec2/subnet:Subnet") == 4


def test_components_own_their_children(default_run):
    for r in default_run.resources:
        if r.type.startswith(("aws:", "eks:", "kubernetes:")) and not r.type.startswith("pulumi:providers"):
            assert r.parent and "ray-efa-eks:index:" in r.parent, f"{r.type} {r.name} is not inside a component"


@pytest.mark.parametrize(
    "run_name,itype,efa_ifaces", [("default_run", "g6.12xlarge", 1), ("p5_run", "p5.48xlarge", 32)]
)
def test_gpu_node_group_efa_inputs(request, run_name, itype, efa_ifaces):
    run = request.getfixturevalue(run_name)
    ng = run.one(MNG, "gpu")
    # Our own launch template: pulumi-eks's EFA support stays off, the component does its work.
    assert "enableEfaSupport" not in ng.inputs and ng["launchTemplate"]["id"] == "gpu-lt-id"
    nis = run.one("aws:ec2/launchTemplate:LaunchTemplate", "gpu-lt")["networkInterfaces"]
    assert [n.get("interfaceType") for n in nis] == [None] + ["efa-only"] * efa_ifaces  # the ENA primary first
    assert run.one("aws:ec2/placementGroup:PlacementGroup", "gpu-pg")["strategy"] == "cluster"
    assert ng["capacityType"] == "ON_DEMAND"
    assert ng["instanceTypes"] == [itype]
    assert ng["amiType"] == "AL2023_x86_64_NVIDIA"
    assert ng["scalingConfig"] == {"desiredSize": 0, "minSize": 0, "maxSize": 2}  # from zero
    assert ng["taints"] == [
        {"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"},
        {
            "key": "startup-taint.cluster-autoscaler.kubernetes.io/efa-unproven",
            "value": "true",
            "effect": "NO_SCHEDULE",
        },
    ]  # until the node agent proves the fabric
    assert run.outputs["efaInterfacesPerNode"] == efa_ifaces


@pytest.mark.parametrize("run_name", ["default_run", "p5_run"])
def test_gpu_subnets_all_in_gpu_az(request, run_name):
    run = request.getfixturevalue(run_name)
    az = run.outputs["gpuAvailabilityZone"]
    subnets = {f"subnet-{s.name}": s for s in run.of_type("aws:ec2/subnet:Subnet")}
    ids = run.one(MNG, "gpu")["subnetIds"]
    assert ids and all(subnets[i]["availabilityZone"] == az for i in ids)
    assert all("private" in subnets[i].name for i in ids)


def test_efa_self_egress_on_cluster_security_group(default_run):
    rule = default_run.one("aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule")
    assert rule["securityGroupId"] == rule["referencedSecurityGroupId"] == "sg-ray-efa-dev-cluster"
    assert rule["ipProtocol"] == "-1"
    # EKS's own all-traffic self ingress exists already; a duplicate would fail the update.
    assert not default_run.of_type("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")


def test_efa_off_has_no_efa_inputs():
    run = run_program({"efa": "false", "efaCheck": "false"})
    ng = run.one(MNG, "gpu")
    assert "enableEfaSupport" not in ng.inputs and "placementGroupAvailabilityZone" not in ng.inputs
    assert "networkInterfaces" not in run.one("aws:ec2/launchTemplate:LaunchTemplate", "gpu-lt").inputs
    assert not run.of_type("aws:ec2/placementGroup:PlacementGroup")
    assert not run.of_type("aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule")
    # registration order follows input resolution (threads), so compare as a set
    assert sorted(r.name for r in run.of_type("kubernetes:helm.sh/v3:Release")) == [
        "cluster-autoscaler-release",
        "device-plugins-nvidia",
        "kuberay-release",
        "observability-dcgm",
        "observability-kps",
    ]


def test_park_gpu_nodes():
    run = run_program({"gpuNodeCount": "0"})
    assert run.one(MNG, "gpu")["scalingConfig"] == {"desiredSize": 0, "minSize": 0, "maxSize": 1}
    assert not run.of_type("kubernetes:batch/v1:Job")
    assert run.outputs["estimatedHourlyUsd"] == pytest.approx(0.4032 + 0.10 + 0.045 + 0.04)  # + ECR endpoints


def test_system_node_group(default_run):
    ng = default_run.one(MNG, "system")
    assert ng["instanceTypes"] == ["m7i.2xlarge"] and ng["labels"] == {"ray-efa-eks/role": "system"}


def test_cluster_settings(default_run):
    c = default_run.one("eks:index:Cluster")
    assert c["skipDefaultNodeGroup"] is True and c["authenticationMode"] == "API"
    assert c["createOidcProvider"] is True and c["version"] == DEFAULT_KUBERNETES_VERSION
    assert c["nodeAssociatePublicIpAddress"] is False
    assert c["endpointPrivateAccess"] is True and c["publicAccessCidrs"] == ["0.0.0.0/0"]


def test_estimated_cost_default(default_run):
    # + the ECR interface endpoints: 2 endpoints x 2 AZs x $0.01/h
    assert default_run.outputs["estimatedHourlyUsd"] == pytest.approx(2 * 4.6016 + 0.4032 + 0.10 + 0.045 + 0.04)
    assert 9.5 < default_run.outputs["estimatedHourlyUsd"] < 9.9


def test_outputs(default_run):
    out = default_run.outputs
    assert (
        out["clusterName"] == "ray-efa-dev" and out["gpuNodeCount"] == 2 and out["gpuAvailabilityZone"] == "us-east-1a"
    )
    assert "gpuNodeCount 0" in out["teardownOrder"][0]
    assert out["rayDashboard"].startswith("kubectl -n ray port-forward svc/ray-head-svc")


def test_az_choice_respects_offerings():
    run = run_program({"efaCheck": "false"}, offerings={"us-east-1": ["us-east-1c", "us-east-1d"]})
    assert run.outputs["gpuAvailabilityZone"] == "us-east-1c"
    with pytest.raises(Exception, match="availabilityZone"):
        run_program({"availabilityZone": "us-east-1a"}, offerings={"us-east-1": ["us-east-1c"]})


def test_cluster_azs_are_availability_zones_only(default_run):
    """DescribeAvailabilityZones also returns opted-in Local and Wavelength Zones (the mocked account has both, and
    ``us-east-1-atl-2a`` sorts first); EKS refuses cluster subnets there, so the lookup filters the zone type."""
    lookups = [a for t, a in default_run.calls if t == "aws:index/getAvailabilityZones:getAvailabilityZones"]
    assert lookups and all(
        {"name": "zone-type", "values": ["availability-zone"]} in (a.get("filters") or []) for a in lookups
    )
    assert {s["availabilityZone"] for s in default_run.of_type("aws:ec2/subnet:Subnet")} == {"us-east-1a", "us-east-1b"}
