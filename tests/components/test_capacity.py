"""Under Pulumi mocks: our own GPU launch template, ODCR and Capacity Block stacks, and the refusals."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import moto
import pytest

from ray_efa_eks.components.nodes.capacity import GpuCapacity, config_problem
from ray_efa_eks.components.config.errors import ArgError
from ray_efa_eks.components.config.config import ConfigError, StackConfig, stack_error
from ray_efa_eks.components.nodes.instances import CATALOGUE
from ray_efa_eks.components.nodes.launch_template import efa_network_interfaces
from ray_efa_eks.tools.mockrun import CAPACITY_BLOCKS, MockRun, run_program
from tests.helpers.mockruns import shared_run

AWS_DATA = json.load(gzip.open(Path(moto.__file__).parent / "ec2/resources/instance_types.json.gz"))
MNG = "eks:index:ManagedNodeGroup"
LT = "aws:ec2/launchTemplate:LaunchTemplate"
PG = "aws:ec2/placementGroup:PlacementGroup"
BLOCK = "cr-0123456789abcdef0"  # mockrun's Capacity Block: 4 x p5.48xlarge in us-east-1a
ODCR = "cr-0a1b2c3d4e5f60718"  # mockrun's ODCR: 4 x g6e.48xlarge in us-east-1c, no placement group
ODCR_IN_PG = "cr-0fedcba9876543210"  # 2 x p5.48xlarge in us-east-1a, made in cluster placement group p5-odcr-pg
GROUP = "arn:aws:resource-groups:us-east-1:123456789012:group/p5-odcrs"
BLOCK_CFG = {
    "gpuInstanceType": "p5.48xlarge",
    "gpuCapacity": "capacity-block",
    "gpuCapacityReservationId": BLOCK,
    "availabilityZone": "us-east-1a",
    "efaCheck": "false",
}


# -- the catalogue's EFA and capacity figures against AWS's DescribeInstanceTypes (moto's copy) ----------------------


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_catalogue_efa_only_capacity_blocks_and_one_efa_per_card(name):
    ours, net = CATALOGUE[name], AWS_DATA[name]["NetworkInfo"]
    cards = net["NetworkCards"]
    efa_cards = [c for c in cards if "efa" in c["InterfaceTypes"]]
    assert ours.efa_only_supported == bool(efa_cards and all("efa-only" in c["InterfaceTypes"] for c in efa_cards))
    assert ours.capacity_blocks == ("capacity-block" in AWS_DATA[name]["SupportedUsageClasses"])
    if ours.efa_supported:  # one EFA per EFA-capable network card
        assert ours.efa_card_indexes == tuple(c["NetworkCardIndex"] for c in efa_cards)
        assert ours.max_efa_interfaces == len(efa_cards)
        assert ours.network_cards == len(cards)
    assert CATALOGUE["p5.48xlarge"].max_efa_interfaces == 32
    assert CATALOGUE["p6-b300.48xlarge"].efa_card_indexes == tuple(range(1, 17))  # card 0: ENA only


# -- the GPU launch template for each EFA type --------------------------------------------------------------------


@pytest.mark.parametrize("itype", sorted(n for n, t in CATALOGUE.items() if t.gpus))
def test_gpu_launch_template_per_type(itype, catalogue_runs):
    run = catalogue_runs[itype][1]  # every catalogue GPU type's stack, shared (tests/conftest.py)
    it, lt, ng = CATALOGUE[itype], run.one(LT, "gpu-lt"), run.one(MNG, "gpu")
    nis = lt["networkInterfaces"]
    efa = [n for n in nis if n.get("interfaceType") in ("efa", "efa-only")]
    assert len(efa) == it.max_efa_interfaces
    assert [n["networkCardIndex"] for n in efa] == list(it.efa_card_indexes)
    # EC2's "Maximize network bandwidth ... multiple network cards": an ENA primary (card 0, device 0), efa-only at
    # card 0 device 1 where card 0 carries EFA, efa-only at device 0 of every further card
    assert it.efa_only_supported, itype  # every GPU type of the catalogue lists efa-only on its EFA cards
    assert (nis[0]["networkCardIndex"], nis[0]["deviceIndex"], nis[0].get("interfaceType")) == (0, 0, None)
    assert [(n["networkCardIndex"], n["deviceIndex"], n["interfaceType"]) for n in nis[1:]] == [
        (c, 1 if c == 0 else 0, "efa-only") for c in it.efa_card_indexes
    ]
    assert len(nis) == it.max_efa_interfaces + 1
    assert all(n["securityGroups"] == ["sg-ray-efa-dev-cluster"] and n["deleteOnTermination"] == "true" for n in nis)
    assert lt["metadataOptions"]["httpPutResponseHopLimit"] == 1 and lt["metadataOptions"]["httpTokens"] == "required"
    assert lt["blockDeviceMappings"][0]["ebs"]["encrypted"] == "true"
    assert "imageId" not in lt.inputs  # EKS bootstraps amiType's NVIDIA AMI and merges our user data (a NodeConfig)
    assert lt["blockDeviceMappings"][0]["ebs"]["iops"] == 16000 and "userData" in lt.inputs  # cold start
    assert lt["placement"] == {"groupName": run.one(PG, "gpu-pg").name + "-id"}
    assert "capacityReservationSpecification" not in lt.inputs and "instanceMarketOptions" not in lt.inputs
    assert ng["launchTemplate"]["id"] == "gpu-lt-id" and ng["capacityType"] == "ON_DEMAND"
    assert "enableEfaSupport" not in ng.inputs
    assert ng["subnetIds"] == [f"subnet-net-private-{run.outputs['gpuAvailabilityZone']}"]
    assert run.outputs["efaInterfacesPerNode"] == it.max_efa_interfaces


def test_secondary_interfaces_fall_back_to_efa_without_efa_only_support():
    it = replace(CATALOGUE["p4d.24xlarge"], name="x9.24xlarge", efa_only_supported=False)
    assert [n["interface_type"] for n in efa_network_interfaces(it, ["sg-1"])] == ["efa"] * 4
    with pytest.raises(ValueError, match="does not support EFA"):
        efa_network_interfaces(CATALOGUE["m7i.xlarge"], ["sg-1"])
    with pytest.raises(ValueError, match="one EFA per card"):
        efa_network_interfaces(replace(it, network_cards=2), ["sg-1"])


# -- capacity modes ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def block_run() -> MockRun:
    return shared_run(BLOCK_CFG)


def test_capacity_block_stack(block_run):
    lt, ng = block_run.one(LT, "gpu-lt"), block_run.one(MNG, "gpu")
    assert lt["instanceMarketOptions"] == {"marketType": "capacity-block"}
    assert lt["capacityReservationSpecification"] == {"capacityReservationTarget": {"capacityReservationId": BLOCK}}
    assert ng["capacityType"] == "CAPACITY_BLOCK"
    # EKS wants a Capacity Block's type in the launch template and none on the node group (capacity-blocks-mng).
    assert lt["instanceType"] == "p5.48xlarge" and not ng.inputs.get("instanceTypes")
    assert not block_run.of_type(PG) and "placement" not in lt.inputs  # EC2 places a block; a PG would conflict
    # the ENA primary and 32 efa-only interfaces (card 0 device 1, cards 1-31 device 0)
    assert len(lt["networkInterfaces"]) == 33 and ng["subnetIds"] == ["subnet-net-private-us-east-1a"]
    end = CAPACITY_BLOCKS[BLOCK]["endDate"]
    assert block_run.outputs["gpuCapacityBlockEnd"] == end
    assert block_run.outputs["teardownOrder"][0].startswith(f"# Capacity Block {BLOCK} ends {end}")
    lookups = [a for t, a in block_run.calls if t == "aws:ec2/getCapacityBlockReservation:getCapacityBlockReservation"]
    assert lookups == [{"id": BLOCK}]


@pytest.mark.parametrize(
    "target,key", [(ODCR, "capacityReservationId"), (GROUP, "capacityReservationResourceGroupArn")]
)
def test_reservation_stack(target, key):
    run = shared_run(
        {
            "gpuInstanceType": "g6e.48xlarge",
            "gpuCapacity": "reservation",
            "gpuCapacityReservationId": target,
            "availabilityZone": "us-east-1c",
            "efaCheck": "false",
        }
    )
    lt, ng = run.one(LT, "gpu-lt"), run.one(MNG, "gpu")
    assert lt["capacityReservationSpecification"] == {"capacityReservationTarget": {key: target}}
    assert "instanceMarketOptions" not in lt.inputs and ng["capacityType"] == "ON_DEMAND"
    assert not run.of_type(PG) and "placement" not in lt.inputs
    assert ng["subnetIds"] == ["subnet-net-private-us-east-1c"] and len(lt["networkInterfaces"]) == 5
    assert "gpuCapacityBlockEnd" not in run.outputs
    reads = run.of_type("aws:ec2/capacityReservation:CapacityReservation")
    if target == ODCR:  # the ODCR is read (nothing created) and checked before the template targets it
        assert [(r.name, r.options.get("read"), run.ids[r.urn]) for r in reads] == [("gpu-odcr", True, ODCR)]
    else:
        assert reads == []  # a group's reservations may differ: not read


def test_reservation_made_in_a_cluster_placement_group_uses_that_group():
    run = shared_run(
        {
            "gpuInstanceType": "p5.48xlarge",
            "gpuCapacity": "reservation",
            "efaCheck": "false",
            "gpuCapacityReservationId": ODCR_IN_PG,
            "availabilityZone": "us-east-1a",
            "gpuPlacementGroupName": "p5-odcr-pg",
        }
    )
    lt = run.one(LT, "gpu-lt")
    assert lt["placement"] == {"groupName": "p5-odcr-pg"} and not run.of_type(PG)
    assert lt["capacityReservationSpecification"] == {
        "capacityReservationTarget": {"capacityReservationId": ODCR_IN_PG}
    }


ODCR_MISMATCHES = [
    (
        {"availabilityZone": "us-east-1a"},
        f"availabilityZone = 'us-east-1a' is invalid: the reservation {ODCR} is in us-east-1c",
    ),
    (
        {"gpuInstanceType": "p5.48xlarge"},
        f"gpuInstanceType = 'p5.48xlarge' is invalid: the reservation {ODCR} holds g6e.48xlarge",
    ),
    ({"gpuNodeCount": 6}, f"gpuNodeCount = 6 is invalid: the reservation {ODCR} holds 4 instances"),
    (
        {"gpuPlacementGroupName": "other-pg"},
        "gpuPlacementGroupName = 'other-pg' is invalid: remove gpuPlacementGroupName",
    ),
    (
        {"gpuCapacityReservationId": ODCR_IN_PG, "gpuInstanceType": "p5.48xlarge", "availabilityZone": "us-east-1a"},
        "gpuPlacementGroupName is not set: set gpuPlacementGroupName: p5-odcr-pg",
    ),
]
CHECK_RUNS = """
import json, sys
from ray_efa_eks.tools.mockrun import run_program
for cfg, program in json.loads(sys.argv[1]):
    try:
        run_program(cfg, **({"program": program} if program else {}))
        print("NO ERROR", flush=True)
    except Exception as e:
        print(str(e).replace(chr(10), " "), flush=True)
"""


@pytest.fixture(scope="module")
def failed_runs(tmp_path_factory) -> list[str]:
    """Runs that fail inside an apply, in one interpreter apart from this one (a program failing inside an apply
    leaves this interpreter's later ast.parse calls broken on CPython 3.11): one line each, the error or NO ERROR.
    The ODCR mismatches, then the node group test's program with no subnet in the GPU AZ."""
    program = tmp_path_factory.mktemp("subnets") / "__main__.py"
    program.write_text(PROGRAM)
    base = {
        "gpuInstanceType": "g6e.48xlarge",
        "gpuCapacity": "reservation",
        "gpuCapacityReservationId": ODCR,
        "availabilityZone": "us-east-1c",
        "efaCheck": "false",
    }
    runs = [[{k: str(v) for k, v in {**base, **change}.items()}, None] for change, _ in ODCR_MISMATCHES]
    runs.append([{"gpuAz": "us-east-1c"}, str(program)])
    out = subprocess.run(
        [sys.executable, "-c", CHECK_RUNS, json.dumps(runs)], capture_output=True, text=True, timeout=600
    ).stdout.splitlines()
    assert len(out) == len(runs), out
    return out


def test_the_program_refuses_an_odcr_that_does_not_fit(failed_runs):
    """EC2's description of the ODCR (a read at preview) must fit: the template's target waits for the check, so
    a mismatch fails the preview and no GPU node launches. Run apart: the failure is raised inside an apply."""
    for line, (_, expected) in zip(failed_runs, ODCR_MISMATCHES, strict=False):
        assert expected in line, (line, expected)


def test_on_demand_without_efa_has_no_placement_group_and_no_interfaces():
    run = shared_run({"efa": "false", "efaCheck": "false"})
    lt = run.one(LT, "gpu-lt")
    assert not run.of_type(PG) and "networkInterfaces" not in lt.inputs and "placement" not in lt.inputs


# -- refusals, before any resource exists ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cfg,key,fix",
    [
        (
            {"gpuCapacity": "reservation", "availabilityZone": "us-east-1a"},
            "gpuCapacityReservationId",
            "needs the ODCR id",
        ),
        (
            {"gpuCapacity": "capacity-block", "gpuCapacityReservationId": BLOCK, "availabilityZone": "us-east-1a"},
            "gpuCapacity",
            "EC2 sells no Capacity Blocks of g6.12xlarge",
        ),
        (
            {"gpuInstanceType": "p5.48xlarge", "gpuCapacity": "capacity-block", "gpuCapacityReservationId": BLOCK},
            "availabilityZone",
            "needs the reservation's AZ",
        ),
        (
            {"gpuCapacity": "reservation", "gpuCapacityReservationId": "cr-123", "availabilityZone": "us-east-1a"},
            "gpuCapacityReservationId",
            "must be a reservation id",
        ),
        (
            {
                "gpuInstanceType": "p5.48xlarge",
                "gpuCapacity": "capacity-block",
                "gpuCapacityReservationId": GROUP,
                "availabilityZone": "us-east-1a",
            },
            "gpuCapacityReservationId",
            "not a resource group",
        ),
        (
            {
                "gpuCapacity": "reservation",
                "availabilityZone": "us-east-1a",
                "gpuCapacityReservationId": GROUP.replace("us-east-1", "us-west-2"),
            },
            "gpuCapacityReservationId",
            "in us-west-2",
        ),
        ({"gpuCapacityReservationId": ODCR}, "gpuCapacityReservationId", "gpuCapacity is on-demand"),
        ({"gpuCapacity": "spot"}, "gpuCapacity", "must be one of on-demand, reservation, capacity-block"),
        ({"gpuPlacementGroupName": "my-pg"}, "gpuPlacementGroupName", "only for gpuCapacity reservation"),
        ({**BLOCK_CFG, "gpuPlacementGroupName": "my-pg"}, "gpuPlacementGroupName", "EC2 places a Capacity Block"),
        (
            {
                "gpuCapacity": "reservation",
                "gpuCapacityReservationId": ODCR,
                "availabilityZone": "us-east-1a",
                "gpuPlacementGroupName": "arn:aws:ec2:us-east-1:123456789012:placement-group/pg",
            },
            "gpuPlacementGroupName",
            "not the ARN",
        ),
    ],
)
def test_bad_combinations_are_refused_before_any_resource(cfg, key, fix):
    with pytest.raises(ConfigError, match=fix) as e:
        StackConfig.from_mapping(cfg)
    assert e.value.key == key and (
        f"ray-efa-eks:{key} = " in str(e.value) or f"ray-efa-eks:{key} is not set" in str(e.value)
    )
    record = MockRun()
    with pytest.raises(ConfigError, match=fix):
        run_program(cfg, record=record)
    assert record.resources == []


@pytest.mark.parametrize(
    "change,key,fix",
    [
        (
            {"availabilityZone": "us-east-1b"},
            "availabilityZone",
            f"Capacity Block {BLOCK} is in us-east-1a; set availabilityZone: us-east-1a",
        ),
        ({"gpuInstanceType": "p5en.48xlarge"}, "gpuInstanceType", "holds p5.48xlarge"),
        ({"gpuNodeCount": "6"}, "gpuNodeCount", "holds 4 instances"),
    ],
)
def test_the_program_refuses_a_block_that_does_not_fit(change, key, fix):
    """The block's AZ, type and size come from EC2 (an invoke at preview); a mismatch registers nothing."""
    record = MockRun()
    with pytest.raises(ConfigError, match=fix) as e:
        run_program({**BLOCK_CFG, **change}, record=record)
    assert e.value.key == key
    assert record.resources == [], "refused before the component or any child resource was registered"


@pytest.mark.parametrize(
    "state,message",
    [
        ("expired", "the Capacity Block is expired"),
        ("payment-failed", "the Capacity Block is payment-failed: EC2 never starts it"),  # nodes would never launch
    ],
)
def test_a_dead_block_is_refused_before_any_resource(monkeypatch, state, message):
    monkeypatch.setitem(CAPACITY_BLOCKS, BLOCK, {**CAPACITY_BLOCKS[BLOCK], "state": state})
    record = MockRun()
    with pytest.raises(ConfigError, match=message):
        run_program(BLOCK_CFG, record=record)
    assert record.resources == []


def test_capacity_object_refuses_what_config_refuses():
    assert config_problem("on-demand", None, CATALOGUE["g6.12xlarge"], None, "us-east-1") is None
    with pytest.raises(ArgError, match="^reservation is not set: mode capacity-block needs") as e:  # its own words
        GpuCapacity("capacity-block")
    assert isinstance(e.value, ValueError) and stack_error(e.value).key == "gpuCapacityReservationId"
    assert str(stack_error(e.value)).startswith(
        "ray-efa-eks:gpuCapacityReservationId is not set: gpuCapacity capacity-block needs"
    )
    assert GpuCapacity("reservation", GROUP).capacity_reservation_specification() == {
        "capacity_reservation_target": {"capacity_reservation_resource_group_arn": GROUP}
    }
    assert not GpuCapacity("reservation", ODCR).cluster_placement_group and GpuCapacity().cluster_placement_group


# -- the component filters the subnets to the GPU AZ itself --------------------------------------------------------

PROGRAM = '''
import pulumi
from ray_efa_eks.components.cluster.cluster import Cluster, ClusterArgs
from ray_efa_eks.components.nodes.instances import lookup
from ray_efa_eks.components.network.network import Network, NetworkArgs
from ray_efa_eks.components.nodes.node_groups import EfaGpuNodeGroup, EfaGpuNodeGroupArgs

az = pulumi.Config().get("gpuAz") or "us-east-1b"
net = Network("n", NetworkArgs(cidr="10.0.0.0/16", availability_zones=["us-east-1a", "us-east-1b"],
                                gpu_availability_zone="us-east-1a", cluster_name="c"))
cluster = Cluster("c", ClusterArgs(vpc_id=net.vpc_id, public_subnet_ids=net.public_subnet_ids,
                                   private_subnet_ids=net.private_subnet_ids, kubernetes_version="1.33"))
EfaGpuNodeGroup("g", EfaGpuNodeGroupArgs(cluster=cluster.eks, node_role=cluster.node_role,
                                         cluster_security_group_id=cluster.security_group_id,
                                         subnet_ids=net.private_subnet_ids, instance_type=lookup("p5.48xlarge"),
                                         availability_zone=az))
'''


def test_node_group_keeps_only_the_gpu_az_subnets(tmp_path, failed_runs):
    program = tmp_path / "__main__.py"
    program.write_text(PROGRAM)
    run = run_program(program=program)
    assert run.one(MNG, "g-mng")["subnetIds"] == ["subnet-n-private-us-east-1b"]
    # no subnet in the AZ: the deployment fails naming it (run apart, with the ODCR mismatches: see failed_runs)
    assert "none of the subnets is in the GPU AZ us-east-1c" in failed_runs[len(ODCR_MISMATCHES)]


def test_a_block_not_started_yet_warns_to_deploy_parked(monkeypatch):
    import pulumi

    warnings: list[str] = []
    monkeypatch.setattr(pulumi.log, "warn", lambda msg, *a, **k: warnings.append(msg))
    monkeypatch.setitem(CAPACITY_BLOCKS, BLOCK, {**CAPACITY_BLOCKS[BLOCK], "state": "scheduled"})
    run_program(BLOCK_CFG)
    assert [w for w in warnings if "is scheduled until 2026-12-01T11:30:00Z" in w and "gpuNodeCount 0" in w]
    warnings.clear()
    run_program({**BLOCK_CFG, "gpuNodeCount": "0"})
    assert not [w for w in warnings if "Capacity Block" in w]


def test_plan_shows_what_the_gpu_nodes_launch_into(block_run):
    """A reviewer sees a capacity change in the offline plan and its diff (docs/offline-plan.md: Pull requests)."""
    from ray_efa_eks.tools.layout import from_mockrun
    from ray_efa_eks.tools.plan_diff import diff_plans, render_diff
    from ray_efa_eks.tools.plan_run import make_plan

    def plan(run):
        return make_plan(from_mockrun(run), source="test", stack="dev", region="us-east-1")

    before = plan(shared_run({"gpuInstanceType": "p5.48xlarge", "availabilityZone": "us-east-1a", "efaCheck": "false"}))
    after = plan(block_run)
    assert before.settings["nodeGroups"]["gpu-mng"]["capacity"] == "on-demand"
    assert after.settings["nodeGroups"]["gpu-mng"]["capacity"] == f"capacity-block {BLOCK}"
    assert after.settings["nodeGroups"]["gpu-mng"]["placement"] == "none"
    assert after.settings["nodeGroups"]["gpu-mng"]["instanceTypes"] == "p5.48xlarge"  # read from the launch template
    text = render_diff(diff_plans(before, after))
    assert f"| node group `gpu-mng` capacity | on-demand | capacity-block {BLOCK} |" in text
    assert "| node group `gpu-mng` placement strategy | cluster | none |" in text


def test_the_interface_layout_change_replaces_the_gpu_nodes_and_the_plan_diff_says_so(default_run):
    """A stack deployed with the earlier layout (``efa`` at card 0 device 0, efa-only at device 1 of other cards):
    the new template version rolls every GPU node, which ``pulumi up`` (the launch template's before_update hook)
    and the plan diff both announce, naming the interfaces."""
    from ray_efa_eks.tools.plan_diff import LAUNCH_TEMPLATE, hook_verdicts

    new = dict(default_run.one(LT, "gpu-lt").inputs)
    old_nis = [
        {**n, "deviceIndex": 0 if n["networkCardIndex"] == 0 else 1, "interfaceType": "efa"}
        for n in new["networkInterfaces"]
        if n.get("interfaceType")
    ]
    old = {**new, "networkInterfaces": old_nis}
    assert old_nis != new["networkInterfaces"]
    refusals, warnings = hook_verdicts({f"{LAUNCH_TEMPLATE} gpu-lt": old}, {f"{LAUNCH_TEMPLATE} gpu-lt": new})
    assert refusals == [] and len(warnings) == 1
    assert "networkInterfaces" in warnings[0] and "EKS replaces all 2 GPU node(s)" in warnings[0]
