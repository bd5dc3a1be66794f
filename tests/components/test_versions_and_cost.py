"""Kubernetes version support and price, cost by capacity mode, the system node's disk.

What AWS bills and refuses, from the EKS and EC2 documents cited in components/cluster/eks_versions.py, components/nodes/cost.py
and components/cluster/cluster.py; "today" is pinned to 2026-12-04 where a figure depends on it.
"""

from __future__ import annotations

from datetime import date

import pytest

from ray_efa_eks.components.cluster import eks_versions
from ray_efa_eks.components.config.config import DEFAULT_KUBERNETES_VERSION, ConfigError, StackConfig
from ray_efa_eks.components.nodes.instances import CATALOGUE
from ray_efa_eks.tools.layout import from_mockrun
from ray_efa_eks.tools.mockrun import CAPACITY_RESERVATIONS, MockRun, run_program
from ray_efa_eks.tools.plan_run import make_plan
from ray_efa_eks.tools.plan import main as plan_main

DAY = date(2026, 12, 4)
MNG = "eks:index:ManagedNodeGroup"
LT = "aws:ec2/launchTemplate:LaunchTemplate"
ODCR = "cr-0a1b2c3d4e5f60718"  # mockrun's ODCR: 4 x g6e.48xlarge in us-east-1c
BLOCK = "cr-0123456789abcdef0"  # mockrun's Capacity Block: 4 x p5.48xlarge in us-east-1a
ODCR_CFG = {
    "gpuInstanceType": "g6e.48xlarge",
    "gpuCapacity": "reservation",
    "gpuCapacityReservationId": ODCR,
    "availabilityZone": "us-east-1c",
    "gpuNodeCount": "0",
}
BLOCK_CFG = {
    "gpuInstanceType": "p5.48xlarge",
    "gpuCapacity": "capacity-block",
    "gpuCapacityReservationId": BLOCK,
    "availabilityZone": "us-east-1a",
}
NAT, SYSTEM = 0.045, CATALOGUE["m7i.2xlarge"].hourly_usd("us-east-1")


def endpoints(run) -> float:
    """The ECR interface endpoints' hourly charge: $0.01 per endpoint per AZ (PrivateLink pricing, us-east-1)."""
    return 0.01 * sum(
        len(e["subnetIds"])
        for e in run.of_type("aws:ec2/vpcEndpoint:VpcEndpoint")
        if e["vpcEndpointType"] == "Interface"
    )


@pytest.fixture(autouse=True)
def today(monkeypatch):
    monkeypatch.setattr(eks_versions, "today", lambda: DAY)


@pytest.fixture
def warnings(monkeypatch) -> list[str]:
    import pulumi

    seen: list[str] = []
    monkeypatch.setattr(pulumi.log, "warn", lambda msg, *a, **k: seen.append(msg))
    return seen


def plan_usd(run: MockRun) -> float:
    return make_plan(from_mockrun(run), source="t", stack="dev", region="us-east-1").settings["estimatedHourlyUsd"]


# -- versions ------------------------------------------------------------------------------------------------------


def test_support_windows_from_the_eks_release_calendar():
    s = eks_versions.support
    assert [s(v, DAY) for v in ("1.31", "1.32", "1.33", "1.34", "1.35", "1.36")] == [
        "ended",
        "extended",
        "extended",
        "extended",
        "standard",
        "newer",
    ]
    # extended billing starts at the beginning of the end-of-standard day (UTC); no cluster on the end-of-extended day
    assert s("1.34", date(2026, 12, 1)) == "standard" and s("1.34", date(2026, 12, 2)) == "extended"
    assert s("1.33", date(2027, 7, 28)) == "extended" and s("1.33", date(2027, 7, 29)) == "ended"
    assert s("1.28", DAY) == "ended"  # older than the table
    assert eks_versions.control_plane_usd_hour("1.33", DAY) == 0.60
    assert eks_versions.control_plane_usd_hour("1.35", DAY) == 0.10


def test_default_version_is_in_standard_support_today():
    assert DEFAULT_KUBERNETES_VERSION == "1.35" == eks_versions.DEFAULT_VERSION
    assert eks_versions.support(DEFAULT_KUBERNETES_VERSION) == "standard"
    assert eks_versions.support(DEFAULT_KUBERNETES_VERSION, date.today()) in ("standard", "extended"), (
        "the default left standard support: add the newest version to components/cluster/eks_versions.py"
    )


def test_a_version_past_extended_support_is_refused_before_any_resource():
    record = MockRun()
    with pytest.raises(ConfigError, match=r"EKS extended support for 1\.31 ended 2026-11-26.*use 1\.35") as e:
        run_program({"kubernetesVersion": "1.31"}, record=record)
    assert e.value.key == "kubernetesVersion" and record.resources == []


def test_extended_support_warns_and_costs_50_cents_more(warnings):
    run = run_program({"kubernetesVersion": "1.33", "efaCheck": "false"})
    assert [w for w in warnings if "1.33 is in EKS extended support since 2026-07-29" in w and "$0.60/h" in w]
    base = run_program({"efaCheck": "false"})
    assert run.outputs["estimatedHourlyUsd"] - base.outputs["estimatedHourlyUsd"] == pytest.approx(0.50)
    assert (
        "EKS control plane: $0.60/h (1.33 in extended support since 2026-07-29; priced on 2026-12-04)"
        in run.outputs["costNotes"]
    )
    assert plan_usd(run) - plan_usd(base) == pytest.approx(0.50)


def test_plan_config_133_raises_estimated_hourly_usd_by_050(capsys):
    """Acceptance: `ray-efa-eks plan --config kubernetesVersion=1.33` vs the default."""
    import json

    def usd(*argv: str) -> float:
        assert plan_main(["--json", *argv]) == 0
        return json.loads(capsys.readouterr().out)["settings"]["estimatedHourlyUsd"]

    assert usd("--config", "kubernetesVersion=1.33") - usd() == pytest.approx(0.50)
    assert plan_main(["--config", "kubernetesVersion=1.33"]) == 0
    text = capsys.readouterr().out
    assert "warning: kubernetesVersion 1.33 is in EKS extended support since 2026-07-29" in text


def test_a_newer_version_than_the_table_warns(warnings):
    StackConfig.from_mapping({"kubernetesVersion": "1.36"})
    assert eks_versions.version_warning(
        "1.36"
    ) and "newer than the EKS release calendar" in eks_versions.version_warning("1.36")


# -- cost by capacity mode -----------------------------------------------------------------------------------------


def test_odcr_bills_every_reserved_instance_even_parked():
    run = run_program(ODCR_CFG)
    reserved = CAPACITY_RESERVATIONS[ODCR]["instanceCount"]
    gpu = CATALOGUE["g6e.48xlarge"].hourly_usd("us-east-1")
    want = reserved * gpu + SYSTEM + 0.10 + NAT + endpoints(run)
    assert run.outputs["estimatedHourlyUsd"] == pytest.approx(want) and plan_usd(run) == pytest.approx(want)
    notes = " ".join(run.outputs["costNotes"])
    assert f"all {reserved} reserved g6e.48xlarge are billed" in notes and "gpuNodeCount 0 does not stop it" in notes
    assert any(
        f"aws ec2 cancel-capacity-reservation --capacity-reservation-id {ODCR}" in t
        for t in run.outputs["teardownOrder"]
    )


def test_capacity_block_is_paid_up_front_not_per_hour():
    run = run_program({**BLOCK_CFG, "efaCheck": "false"})
    want = SYSTEM + 0.10 + NAT + endpoints(run)  # the block's p5 nodes: paid when the block was bought
    assert run.outputs["estimatedHourlyUsd"] == pytest.approx(want) and plan_usd(run) == pytest.approx(want)
    notes = " ".join(run.outputs["costNotes"])
    assert f"Capacity Block {BLOCK}: paid up front" in notes and "refunds" in notes
    assert any("paid up front" in t for t in run.outputs["teardownOrder"])


def test_idle_cost_beside_the_all_up_cost():
    """estimatedHourlyUsd is every GPU node up; estimatedIdleHourlyUsd what runs with no job (system node,
    control plane, NAT), the same as the all-up figure for a fixed fleet; the plan shows both."""
    run = run_program({})
    assert run.outputs["estimatedIdleHourlyUsd"] == pytest.approx(SYSTEM + 0.10 + NAT + endpoints(run))
    assert run.outputs["estimatedHourlyUsd"] == pytest.approx(plan_usd(run)) and run.outputs["estimatedHourlyUsd"] > 9
    assert "0 to 2 x g6.12xlarge" in run.outputs["costNotes"][0]
    fixed = run_program({"gpuScaleToZero": "false"})
    assert fixed.outputs["estimatedIdleHourlyUsd"] == pytest.approx(fixed.outputs["estimatedHourlyUsd"])


def test_on_demand_gpu_nodes_stop_billing_when_parked():
    run = run_program({"gpuNodeCount": "0"})
    assert run.outputs["estimatedHourlyUsd"] == pytest.approx(SYSTEM + 0.10 + NAT + endpoints(run)) == plan_usd(run)
    assert "gpuNodeCount 0 stops it" in run.outputs["costNotes"][0]


# -- system node disk ----------------------------------------------------------------------------------------------


def test_system_root_volume_is_stack_config_of_at_least_100_gib():
    assert StackConfig().systemRootVolumeGiB == 100
    run = run_program({"systemRootVolumeGiB": "150", "efaCheck": "false"})
    ng = run.one(MNG, "system")
    (lt,) = [r for r in run.of_type(LT) if run.ids.get(r.urn) == ng["launchTemplate"]["id"]]
    assert lt["blockDeviceMappings"][0]["ebs"]["volumeSize"] == 150
    with pytest.raises(ConfigError, match="systemRootVolumeGiB = 50 is invalid: must be >= 100"):
        StackConfig.from_mapping({"systemRootVolumeGiB": 50})


# -- the deployer's access entry: tests/components/test_lifecycle_cluster.py ---------------------------------------
