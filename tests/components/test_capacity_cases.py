"""Every condition of components/nodes/capacity.py, each with its outcome asserted: which capacity mode takes
which target, which placement group, and what EC2's description of a reservation or Capacity Block refuses.
Pure functions, no Pulumi program (the program's use of them is tests/components/test_capacity.py)."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from ray_efa_eks.components.nodes import capacity as cap
from ray_efa_eks.components.config.errors import ArgError
from ray_efa_eks.components.nodes.instances import CATALOGUE

ID8, ID17 = "cr-0123abcd", "cr-0123456789abcdef0"
GROUP = "arn:aws:resource-groups:us-east-1:123456789012:group/odcr-pool"


def _fix(problem: ArgError | None, names: dict[str, str] | None = None, *, value) -> tuple[str, str]:
    """The argument and the fix the problem names, after checking it names the bad value (the message shows it)."""
    assert problem is not None and problem.value == value
    return problem.arg, problem.renamed(names or {}).fix


# --- GpuCapacity: what the launch template and node group get per mode


def test_on_demand_targets_nothing_and_gets_a_cluster_placement_group():
    c = cap.GpuCapacity()
    assert (c.mode, c.reservation, c.placement_group) == (cap.ON_DEMAND, None, None)
    assert c.capacity_reservation_specification() is None and c.instance_market_options() is None
    assert c.node_group_capacity_type == "ON_DEMAND" and c.cluster_placement_group is True and c.is_group is False


def test_an_odcr_is_targeted_by_id_or_by_resource_group_arn():
    by_id = cap.GpuCapacity(cap.RESERVATION, ID17)
    assert by_id.capacity_reservation_specification() == {
        "capacity_reservation_target": {"capacity_reservation_id": ID17}
    }
    assert by_id.is_group is False and by_id.instance_market_options() is None
    assert by_id.node_group_capacity_type == "ON_DEMAND" and by_id.cluster_placement_group is False
    group = cap.GpuCapacity(cap.RESERVATION, GROUP, placement_group="efa-pg")
    assert group.is_group is True and group.placement_group == "efa-pg"
    assert group.capacity_reservation_specification() == {
        "capacity_reservation_target": {"capacity_reservation_resource_group_arn": GROUP}
    }


def test_a_capacity_block_is_its_own_market_and_capacity_type():
    c = cap.GpuCapacity(cap.CAPACITY_BLOCK, ID8)
    assert c.instance_market_options() == {"market_type": "capacity-block"}
    assert c.node_group_capacity_type == "CAPACITY_BLOCK" and c.cluster_placement_group is False
    assert c.capacity_reservation_specification() == {"capacity_reservation_target": {"capacity_reservation_id": ID8}}


def test_a_bad_combination_cannot_be_built():
    with pytest.raises(ArgError) as e:
        cap.GpuCapacity(cap.RESERVATION, None)
    assert e.value.arg == "reservation"
    with pytest.raises(ArgError) as e:
        cap.GpuCapacity(cap.ON_DEMAND, None, placement_group="pg")
    assert e.value.arg == "placement_group"


# --- target_problem: mode x reservation


def test_an_unknown_mode_is_named_with_the_modes():
    assert _fix(cap.target_problem("spot", None), value="spot") == (
        "mode",
        "must be one of on-demand, reservation, capacity-block",
    )


def test_on_demand_with_a_reservation_is_refused_naming_the_mode_key():
    assert cap.target_problem(cap.ON_DEMAND, None) is None and cap.target_problem(cap.ON_DEMAND, "") is None
    arg, fix = _fix(cap.target_problem(cap.ON_DEMAND, ID17), {"mode": "gpuCapacity"}, value=ID17)
    assert arg == "reservation" and fix.startswith("is set but gpuCapacity is on-demand; set gpuCapacity: reservation")


@pytest.mark.parametrize(
    "mode, needs",
    [
        (cap.CAPACITY_BLOCK, "the Capacity Block's reservation id (cr-...)"),
        (cap.RESERVATION, "the ODCR id (cr-...) or its resource group ARN"),
    ],
)
@pytest.mark.parametrize("reservation", [None, ""])
def test_a_reservation_mode_without_a_target_says_what_it_needs(mode, needs, reservation):
    arg, fix = _fix(cap.target_problem(mode, reservation), value=reservation)
    assert arg == "reservation" and fix.startswith(f"mode {mode} needs {needs}")


@pytest.mark.parametrize("rid", [ID8, ID17])
@pytest.mark.parametrize("mode", [cap.RESERVATION, cap.CAPACITY_BLOCK])
def test_reservation_ids_of_8_or_17_hex_digits_are_taken(mode, rid):
    assert cap.target_problem(mode, rid) is None


@pytest.mark.parametrize(
    "rid",
    [
        "cr-0123abc",
        "cr-0123abcd0",
        "cr-0123456789ABCDEF0",
        "cr-0123456789abcdef01",
        "cr-0123456789abcdef",
        "xcr-0123abcd",
        "cr-0123abcd ",
        "odcr-pool",
        GROUP.replace("resource-groups", "ec2"),
        GROUP + "/x y",
    ],
)
def test_anything_else_is_not_a_target(rid):
    arg, fix = _fix(cap.target_problem(cap.RESERVATION, rid), value=rid)
    assert arg == "reservation" and fix == (
        "must be a reservation id (cr- + 8 or 17 hex digits) or a resource group ARN "
        "(arn:aws:resource-groups:REGION:ACCOUNT:group/NAME)"
    )


@pytest.mark.parametrize(
    "arn",
    [
        GROUP,
        "arn:aws-us-gov:resource-groups:us-gov-west-1:123456789012:group/a.b_c-d",
        "arn:aws:resource-groups:eu-west-1:123456789012:group/" + "g" * 300,
    ],
)
def test_a_resource_group_serves_an_odcr_never_a_capacity_block(arn):
    assert cap.target_problem(cap.RESERVATION, arn) is None
    arg, fix = _fix(cap.target_problem(cap.CAPACITY_BLOCK, arn), value=arn)
    assert arg == "reservation" and fix.startswith("a Capacity Block is targeted by its own id (cr-...)")
    assert "aws ec2 describe-capacity-reservations --filters Name=reservation-type,Values=capacity-block" in fix


def test_a_group_name_longer_than_300_or_an_account_not_12_digits_is_no_group():
    for arn in [
        "arn:aws:resource-groups:eu-west-1:123456789012:group/" + "g" * 301,
        "arn:aws:resource-groups:eu-west-1:12345678901:group/g",
    ]:
        assert _fix(cap.target_problem(cap.RESERVATION, arn), value=arn)[1].startswith("must be a reservation id")


# --- placement_problem


def test_no_placement_group_fits_every_mode():
    assert all(cap.placement_problem(m, None) is None for m in cap.CAPACITY_MODES)


@pytest.mark.parametrize(
    "mode, why",
    [
        (cap.ON_DEMAND, "the stack creates its own cluster placement group on demand"),
        (cap.CAPACITY_BLOCK, "EC2 places a Capacity Block itself; a placement group conflicts with it"),
    ],
)
def test_a_placement_group_outside_reservation_mode_is_refused_with_why(mode, why):
    arg, fix = _fix(cap.placement_problem(mode, "efa-pg"), {"mode": "gpuCapacity"}, value="efa-pg")
    assert (arg, fix) == ("placement_group", f"only for gpuCapacity reservation ({why}); remove it")


@pytest.mark.parametrize(
    "name, ok",
    [
        ("efa-pg", True),
        ("A.b_c+d=e@f-g", True),
        ("x" * 255, True),
        ("team/efa-pg", True),
        ("my pg", True),
        ("a", True),
        ("x" * 256, False),
        ("", False),
        ("pg-0123456789abcdef0 ", False),
        (" efa-pg", False),
        ("caf\u00e9", False),
        ("efa\tpg", False),
        ("arn:aws:ec2:us-east-1:123456789012:placement-group/efa-pg", False),
    ],
)
def test_a_reservation_names_its_placement_group_by_name(name, ok):
    problem = cap.placement_problem(cap.RESERVATION, name)
    if ok:
        assert problem is None
    else:
        assert _fix(problem, value=name) == (
            "placement_group",
            "must be a placement group name (up to 255 ASCII "
            "characters: what follows placement-group/ in the "
            "ODCR's PlacementGroupArn), not the ARN",
        )


# --- config_problem: the capacity arguments against the type, AZ and region

P5, G6 = CATALOGUE["p5.48xlarge"], CATALOGUE["g6.12xlarge"]


def test_config_problem_reports_the_target_and_placement_problems_first():
    assert _fix(cap.config_problem("spot", None, G6, None, "us-east-1"), value="spot")[0] == "mode"
    assert _fix(cap.config_problem(cap.ON_DEMAND, None, G6, None, "us-east-1", placement_group="pg"), value="pg") == (
        "placement_group",
        "only for mode reservation (the stack creates its own cluster placement group on demand); remove it",
    )
    assert cap.config_problem(cap.RESERVATION, ID17, G6, "us-east-1a", "us-east-1", placement_group="pg") is None


def test_on_demand_needs_no_az_or_capacity_block_type():
    assert cap.config_problem(cap.ON_DEMAND, None, G6, None, "us-east-1") is None


def test_a_capacity_block_of_a_type_ec2_sells_no_blocks_of_is_refused_naming_those_it_does():
    assert G6.capacity_blocks is False and P5.capacity_blocks is True
    arg, fix = _fix(cap.config_problem(cap.CAPACITY_BLOCK, ID17, G6, "us-east-1a", "us-east-1"), value="capacity-block")
    sold = sorted(n for n, t in CATALOGUE.items() if t.capacity_blocks)
    assert arg == "mode" and fix.startswith("EC2 sells no Capacity Blocks of g6.12xlarge; use one of ")
    assert ", ".join(sold) in fix and "or mode reservation/on-demand" in fix
    assert cap.config_problem(cap.CAPACITY_BLOCK, ID17, P5, "us-east-1a", "us-east-1") is None
    assert cap.config_problem(cap.RESERVATION, ID17, G6, "us-east-1a", "us-east-1") is None  # an ODCR of any type


@pytest.mark.parametrize("mode, itype", [(cap.RESERVATION, G6), (cap.CAPACITY_BLOCK, P5)])
def test_a_reservation_needs_its_az(mode, itype):
    problem = cap.config_problem(mode, ID17, itype, None, "us-east-1")
    assert problem.arg == "availability_zone" and problem.value is None
    assert str(problem).startswith(f"availability_zone is not set: mode {mode} needs the reservation's AZ")
    assert str(problem).endswith(
        "(a reservation lives in one AZ); `ray-efa-eks preflight --capacity-reservation-id ID` prints it"
    )


def test_a_resource_group_of_another_region_is_refused():
    arg, fix = _fix(cap.config_problem(cap.RESERVATION, GROUP, G6, "eu-west-1a", "eu-west-1"), value=GROUP)
    assert arg == "reservation" and "the resource group is in us-east-1, the stack in eu-west-1" in fix
    assert cap.config_problem(cap.RESERVATION, GROUP, G6, "us-east-1a", "us-east-1") is None


# --- block_problem: what EC2 says about the block


def _block(**kw):
    d = dict(
        id=ID17,
        availability_zone="us-east-1a",
        instance_type="p5.48xlarge",
        instance_count=2,
        start_date="2026-12-20T11:30:00Z",
        end_date="2026-12-21T11:30:00Z",
        state="active",
    )
    return cap.CapacityBlock(**{**d, **kw})


def test_a_block_that_fits_has_no_problem_and_unknown_fields_are_not_judged():
    assert cap.block_problem(_block(), "p5.48xlarge", "us-east-1a", 2) is None
    unknown = _block(availability_zone=None, instance_type=None, instance_count=None, state=None)
    assert cap.block_problem(unknown, "p4d.24xlarge", "us-west-2b", 64) is None
    for state in cap.PENDING_BLOCK_STATES:  # bought, not started: the node group may exist parked
        assert cap.block_problem(_block(state=state), "p5.48xlarge", "us-east-1a", 2) is None


def test_a_payment_failed_block_never_starts():
    arg, fix = _fix(
        cap.block_problem(_block(state="payment-failed"), "p5.48xlarge", "us-east-1a", 2),
        {"mode": "gpuCapacity"},
        value=ID17,
    )
    assert arg == "reservation" and fix.startswith("the Capacity Block is payment-failed: EC2 never starts it")
    assert fix.endswith("buy a new block or set gpuCapacity: on-demand")  # the stack's key names the mode


@pytest.mark.parametrize("state", [s for s in cap.DEAD_BLOCK_STATES if s != "payment-failed"])
def test_a_dead_block_is_refused_with_its_state_and_end(state):
    arg, fix = _fix(cap.block_problem(_block(state=state), "p5.48xlarge", "us-east-1a", 2), value=ID17)
    assert arg == "reservation" and f"the Capacity Block is {state} (ended 2026-12-21T11:30:00Z)" in fix
    assert fix.endswith("set mode: on-demand")


def test_a_block_elsewhere_of_another_type_or_too_small_names_the_argument():
    arg, fix = _fix(
        cap.block_problem(_block(), "p5.48xlarge", "us-east-1b", 2), {"availability_zone": "az"}, value="us-east-1b"
    )
    assert (arg, fix) == ("availability_zone", f"the Capacity Block {ID17} is in us-east-1a; set az: us-east-1a")
    arg, fix = _fix(cap.block_problem(_block(), "p5e.48xlarge", "us-east-1a", 2), value="p5e.48xlarge")
    assert (arg, fix) == (
        "instance_type",
        f"the Capacity Block {ID17} holds p5.48xlarge; set instance_type: p5.48xlarge",
    )
    problem = cap.block_problem(_block(), "p5.48xlarge", "us-east-1a", 3)
    assert (problem.arg, problem.value, problem.fix) == (
        "node_count",
        3,
        f"the Capacity Block {ID17} holds 2 instances; use at most 2",
    )


# --- reservation_problem: what EC2 says about the ODCR


def _odcr(**kw):
    return {
        "availability_zone": "us-east-1b",
        "instance_type": "g6.12xlarge",
        "instance_count": 2,
        "placement_group_arn": "",
        **kw,
    }


def test_an_odcr_that_fits_has_no_problem_and_unknown_fields_are_not_judged():
    assert cap.reservation_problem(ID17, _odcr(), "g6.12xlarge", "us-east-1b", 2, None) is None
    assert cap.reservation_problem(ID17, {}, "g6.12xlarge", "us-east-1b", 64, "efa-pg") is None
    assert (
        cap.reservation_problem(
            ID17, _odcr(availability_zone="", instance_type=""), "p5.48xlarge", "us-west-2a", 2, None
        )
        is None
    )


def test_an_odcr_elsewhere_of_another_type_or_too_small_names_the_argument():
    assert _fix(cap.reservation_problem(ID17, _odcr(), "g6.12xlarge", "us-east-1a", 2, None), value="us-east-1a") == (
        "availability_zone",
        f"the reservation {ID17} is in us-east-1b; set availability_zone: us-east-1b",
    )
    assert _fix(cap.reservation_problem(ID17, _odcr(), "g6.48xlarge", "us-east-1b", 2, None), value="g6.48xlarge") == (
        "instance_type",
        f"the reservation {ID17} holds g6.12xlarge; set instance_type: g6.12xlarge",
    )
    problem = cap.reservation_problem(ID17, _odcr(instance_count="2"), "g6.12xlarge", "us-east-1b", 3, None)
    assert (problem.arg, problem.value, problem.fix) == (
        "node_count",
        3,
        f"the reservation {ID17} holds 2 instances; use at most 2",
    )


def test_an_odcr_must_be_launched_into_the_placement_group_it_was_made_in():
    in_group = _odcr(placement_group_arn="arn:aws:ec2:us-east-1:123456789012:placement-group/efa-pg")
    assert cap.reservation_problem(ID17, in_group, "g6.12xlarge", "us-east-1b", 2, "efa-pg") is None
    for given in (None, "other-pg"):
        problem = cap.reservation_problem(ID17, in_group, "g6.12xlarge", "us-east-1b", 2, given)
        assert (problem.arg, problem.value) == ("placement_group", given)
        assert problem.fix.startswith("set placement_group: efa-pg (")
    problem = cap.reservation_problem(ID17, _odcr(), "g6.12xlarge", "us-east-1b", 2, "efa-pg")
    assert problem.fix.startswith("remove placement_group: ")


def test_the_placement_group_is_all_of_the_arn_after_placement_group():
    """EC2 limits a group name only to 255 ASCII characters, so it may hold a '/': its last part is another group."""
    in_group = _odcr(placement_group_arn="arn:aws:ec2:us-east-1:123456789012:placement-group/team/efa-pg")
    problem = cap.reservation_problem(ID17, in_group, "g6.12xlarge", "us-east-1b", 2, "efa-pg")
    assert (problem.arg, problem.value) == ("placement_group", "efa-pg")
    assert problem.fix.startswith("set placement_group: team/efa-pg (")


# --- read_capacity_block: EC2's answer through the provider's invoke, empty strings as unknown


def test_read_capacity_block_maps_the_invoke_answer(monkeypatch):
    seen = {}

    def invoke(answer):
        def get_capacity_block_reservation(id):
            seen["id"] = id
            return answer

        monkeypatch.setitem(
            sys.modules,
            "pulumi_aws",
            SimpleNamespace(ec2=SimpleNamespace(get_capacity_block_reservation=get_capacity_block_reservation)),
        )

    invoke(
        SimpleNamespace(
            availability_zone="us-east-1a",
            instance_type="p5.48xlarge",
            instance_count=2.0,
            start_date="s",
            end_date="e",
            state="active",
        )
    )
    assert cap.read_capacity_block(ID17) == cap.CapacityBlock(ID17, "us-east-1a", "p5.48xlarge", 2, "s", "e", "active")
    assert seen["id"] == ID17
    invoke(
        SimpleNamespace(
            availability_zone="", instance_type="", instance_count=None, start_date="", end_date="", state=""
        )
    )
    assert cap.read_capacity_block(ID8) == cap.CapacityBlock(ID8, None, None, None, None, None, None)
    invoke(
        SimpleNamespace(availability_zone="", instance_type="", instance_count=0, start_date="", end_date="", state="")
    )
    assert cap.read_capacity_block(ID8).instance_count == 0
