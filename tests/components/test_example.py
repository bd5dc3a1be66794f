"""The "import into another repo" example (docs/components.md): the same file, run under the mocks, layout-rule clean."""

from __future__ import annotations

from pathlib import Path

import pytest

from ray_efa_eks.tools import layout, rules
from ray_efa_eks.tools.mockrun import run_program
from ray_efa_eks.tools.plan_run import make_plan

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "other_instance_type" / "__main__.py"


@pytest.fixture(scope="module")
def example_run():
    return run_program(program=EXAMPLE)


def test_docs_show_the_example_file_verbatim():
    page = (ROOT / "docs/components.md").read_text()
    assert f"```python\n{EXAMPLE.read_text()}```" in page


def test_example_runs_under_mocks_with_p5_and_32_efa_interfaces(example_run):
    ng = example_run.one("eks:index:ManagedNodeGroup", "h100-mng")
    assert ng["instanceTypes"] == ["p5.48xlarge"] and ng["launchTemplate"]["id"] == "h100-lt-id"
    nis = example_run.one("aws:ec2/launchTemplate:LaunchTemplate", "h100-lt")["networkInterfaces"]
    assert len([n for n in nis if n.get("interfaceType") == "efa-only"]) == 32 and len(nis) == 33  # + ENA primary
    assert ng["subnetIds"] == ["subnet-h100-net-private-us-east-1a"]
    assert ng["scalingConfig"] == {"desiredSize": 2, "minSize": 0, "maxSize": 2}  # min 0: docs/upgrades.md
    assert example_run.outputs["efaInterfacesPerNode"] == 32
    worker = example_run.one("kubernetes:ray.io/v1:RayCluster")["spec"]["workerGroupSpecs"][0]
    limits = worker["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "8" and limits["vpc.amazonaws.com/efa"] == "32"
    assert example_run.of_type("aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule")


def test_example_plan_is_rule_clean(example_run):
    resources = layout.from_mockrun(example_run)
    assert rules.check(resources) == []
    plan = make_plan(resources, source="example", stack="dev", region="us-east-1")
    assert plan.settings["nodeGroups"]["h100-mng"]["efaInterfacesPerNode"] == 32
    assert plan.settings["estimatedHourlyUsd"] == pytest.approx(
        2 * 55.04 + 0.2016 + 0.10 + 0.045 + 0.04
    )  # + ECR endpoints


def test_example_instance_type_is_config(tmp_path):
    run = run_program({"gpuInstanceType": "g6e.48xlarge"}, program=EXAMPLE)
    assert run.outputs["efaInterfacesPerNode"] == 4


def test_example_exports_the_ray_token(example_run):
    """Token auth is on by default in RayCluster: a repo built from the blocks must hand its users the token."""
    assert "rayAuthToken" in example_run.outputs


def test_example_launch_templates_keep_pods_off_imds(example_run):
    """The example builds its node groups without ``hardening``: both templates still carry IMDSv2 with hop limit 1
    (pods cannot reach the node role through IMDS), in full, as EC2 gets them."""
    lts = {r.name: r["metadataOptions"] for r in example_run.of_type("aws:ec2/launchTemplate:LaunchTemplate")}
    assert len(lts) == 2, sorted(lts)  # the system group's and the GPU group's own templates
    for name, opts in lts.items():
        assert opts == {"httpEndpoint": "enabled", "httpTokens": "required", "httpPutResponseHopLimit": 1}, name
