"""Every condition of components/nodes/cost.py through its public functions, each with its figure or the note's
figures and words asserted (tables of cases): what each capacity mode
bills per hour, the control plane's rate by support state, what the figure leaves out, and a region without prices.
Pure arithmetic on the catalogue, no Pulumi program (the program's outputs are test_versions_and_cost.py's)."""

from __future__ import annotations

from datetime import date

import pytest

from ray_efa_eks.components.nodes import cost
from ray_efa_eks.components.nodes.instances import CATALOGUE, NoPrice

G6, M7I = CATALOGUE["g6.12xlarge"], CATALOGUE["m7i.xlarge"]
GPU_H, SYS_H, NAT_H, PLANE = 4.6016, 0.2016, 0.045, 0.10  # us-east-1, catalogue.json and instances.py
IN_STANDARD, IN_EXTENDED = date(2025, 1, 1), date(2025, 6, 1)  # 1.29: standard until 2025-03-23


def test_the_catalogue_figures_these_tests_use():
    assert (G6.hourly_usd("us-east-1"), M7I.hourly_usd("us-east-1")) == (GPU_H, SYS_H)


# --- hourly_usd


def test_hourly_usd_adds_nodes_nat_gateways_and_control_planes():
    assert cost.hourly_usd("us-east-1", [(G6, 2), (M7I, 1)]) == round(2 * GPU_H + SYS_H + NAT_H + PLANE, 4)
    assert cost.hourly_usd("us-east-1", [(G6, 2)], eks_clusters=2, nat_gateways=3) == round(
        2 * GPU_H + 3 * NAT_H + 2 * PLANE, 4
    )
    assert cost.hourly_usd("us-east-1", [(G6, 1)], control_plane_usd_hour=0.60) == round(GPU_H + NAT_H + 0.60, 4)
    assert cost.hourly_usd("us-east-1", [], eks_clusters=0, nat_gateways=0) == 0


def test_no_nat_gateway_needs_no_nat_price_and_zero_nodes_need_no_node_price():
    assert cost.hourly_usd("eu-west-1", [(G6, 0)], nat_gateways=0) == PLANE  # neither priced there
    with pytest.raises(NoPrice, match="NAT gateway"):
        cost.hourly_usd("eu-west-1", [(G6, 0)], nat_gateways=1)
    with pytest.raises(NoPrice, match="g6.12xlarge"):
        cost.hourly_usd("eu-west-1", [(G6, 1)], nat_gateways=0)


def test_the_figure_is_rounded_to_four_places():
    assert cost.hourly_usd("us-east-1", [(G6, 3)], nat_gateways=0, eks_clusters=0) == 13.8048  # 13.804799999...


# --- billed_gpu_nodes


@pytest.mark.parametrize(
    "mode, nodes, reserved, billed",
    [
        (cost.ON_DEMAND, 2, None, 2),
        (cost.ON_DEMAND, 0, 4, 0),
        (cost.RESERVATION, 0, 4, 4),  # the whole ODCR, parked or not
        (cost.RESERVATION, 2, 4, 4),
        (cost.RESERVATION, 5, 4, 5),  # more nodes than reserved: the rest on demand
        (cost.RESERVATION, 2, None, 2),  # reservation size unknown: at least the nodes
        (cost.CAPACITY_BLOCK, 2, 2, 0),
    ],
)  # paid up front
def test_each_capacity_mode_bills_its_gpu_instances(mode, nodes, reserved, billed):
    assert cost.billed_gpu_nodes(mode, nodes, reserved) == billed


# --- capacity_notes


def test_on_demand_note_names_count_rate_and_what_stops_it():
    assert cost.capacity_notes(cost.ON_DEMAND, G6, "us-east-1", 2) == [
        "GPU nodes on demand: 2 x g6.12xlarge at $4.60/h while they run; gpuNodeCount 0 stops it"
    ]
    (note,) = cost.capacity_notes(cost.ON_DEMAND, G6, "us-east-1", 2, scale_from_zero=True)
    assert note.startswith(
        "GPU nodes on demand: 0 to 2 x g6.12xlarge at $4.60/h each while they run; they run only "
        "while Ray's jobs need them"
    )


def test_a_region_without_a_price_says_so_instead_of_a_rate():
    (note,) = cost.capacity_notes(cost.ON_DEMAND, G6, "eu-west-1", 2)
    assert "2 x g6.12xlarge at the on-demand rate (no price for eu-west-1)" in note and "$" not in note
    assert note.endswith("gpuNodeCount 0 stops it")


def test_odcr_note_bills_every_reserved_instance_until_cancelled():
    (note,) = cost.capacity_notes(cost.RESERVATION, G6, "us-east-1", 2, reserved=4, reservation="cr-0123abcd")
    assert note.startswith("ODCR cr-0123abcd: all 4 reserved g6.12xlarge are billed at $4.60/h each whether")
    assert note.endswith("(aws ec2 cancel-capacity-reservation --capacity-reservation-id cr-0123abcd)")
    (note,) = cost.capacity_notes(cost.RESERVATION, G6, "us-east-1", 2)
    assert note.startswith("ODCR : every instance (at least 2) reserved g6.12xlarge")
    assert note.endswith("--capacity-reservation-id ID)")


def test_capacity_block_note_is_paid_up_front_with_or_without_an_end():
    (note,) = cost.capacity_notes(
        cost.CAPACITY_BLOCK, G6, "us-east-1", 2, reservation="cr-0123abcd", block_end="2026-12-21T11:30:00Z"
    )
    assert note.startswith(
        "Capacity Block cr-0123abcd: paid up front when bought, for its whole duration until "
        "2026-12-21T11:30:00Z; its g6.12xlarge nodes add nothing per hour here"
    )
    (note,) = cost.capacity_notes(cost.CAPACITY_BLOCK, G6, "us-east-1", 2)
    assert "for its whole duration; its g6.12xlarge" in note and note.startswith("Capacity Block : ")


# --- control_plane_note


@pytest.mark.parametrize(
    "version, on, rate, says",
    [
        (None, None, "$0.10/h", "(standard support)"),
        ("1.29", IN_STANDARD, "$0.10/h", "(1.29 in standard support until 2025-03-23; priced on 2025-01-01)"),
        ("1.29", IN_EXTENDED, "$0.60/h", "(1.29 in extended support since 2025-03-23; priced on 2025-06-01)"),
        ("1.29", date(2026, 6, 1), "$0.10/h", "(1.29: ended; priced on 2026-06-01)"),
        ("9.99", IN_STANDARD, "$0.10/h", "(9.99: newer; priced on 2025-01-01)"),
    ],
)
def test_control_plane_note_per_support_state(version, on, rate, says):
    note = cost.control_plane_note(version, on) if on else cost.control_plane_note(version)
    assert note.startswith(f"EKS control plane: {rate} ") and note.endswith(says)


def test_control_plane_note_prices_on_today_by_default(monkeypatch):
    monkeypatch.setattr(cost.eks_versions, "today", lambda: IN_EXTENDED)
    assert cost.control_plane_note("1.29").endswith("(1.29 in extended support since 2025-03-23; priced on 2025-06-01)")


# --- cost_notes


def test_cost_notes_with_nat_and_s3_endpoint():
    nat, s3, logs, left_out = cost.cost_notes("us-east-1")
    assert nat.startswith("NAT gateway data processing: $0.045/GB through each of the 1 NAT gateway(s)")
    assert "S3 gateway VPC endpoint: no endpoint charge and no NAT processing" in s3
    assert logs == cost.CONTROL_PLANE_LOGS_NOTE
    assert left_out.startswith("not included: EBS volumes, S3 storage and requests, KMS keys")


def test_cost_notes_without_s3_endpoint_route_s3_through_nat_unless_there_is_none():
    notes = cost.cost_notes("eu-west-1", nat_gateways=2, s3_gateway_endpoint=False)
    assert notes[0].startswith("NAT gateway data processing: per GB (no price for eu-west-1) through each of the 2")
    assert "goes through the NAT gateway at per GB (no price for eu-west-1)" in notes[1]
    assert notes[1].endswith("set s3GatewayEndpoint true to route it through a free gateway endpoint")
    assert cost.cost_notes("us-east-1", nat_gateways=0, s3_gateway_endpoint=False) == [
        "no NAT gateway: no per-GB NAT processing",
        cost.CONTROL_PLANE_LOGS_NOTE,
        "not included: EBS volumes, S3 storage and requests, KMS keys, data transfer out",
    ]


# --- estimate


def test_estimate_of_the_reference_layout():
    e = cost.estimate("us-east-1", G6, 2, M7I, on=IN_STANDARD)
    assert e.hourly_usd == round(2 * GPU_H + SYS_H + NAT_H + PLANE, 4) and e.missing is None
    assert (
        e.notes[0].startswith("GPU nodes on demand: 2 x g6.12xlarge")
        and e.notes[1] == "EKS control plane: $0.10/h (standard support)"
    )
    assert e.notes[2:] == cost.cost_notes("us-east-1")


def test_estimate_counts_gpus_as_their_mode_bills_them_and_the_plane_at_its_version_rate():
    odcr = cost.estimate("us-east-1", G6, 0, M7I, capacity_mode=cost.RESERVATION, reserved=4, reservation="cr-0123abcd")
    assert odcr.hourly_usd == round(4 * GPU_H + SYS_H + NAT_H + PLANE, 4) and odcr.notes[0].startswith("ODCR ")
    block = cost.estimate("us-east-1", G6, 2, M7I, capacity_mode=cost.CAPACITY_BLOCK, block_end="x")
    assert block.hourly_usd == round(SYS_H + NAT_H + PLANE, 4) and "until x" in block.notes[0]
    ext = cost.estimate(
        "us-east-1", G6, 2, M7I, 2, 0, False, kubernetes_version="1.29", on=IN_EXTENDED, scale_from_zero=True
    )
    assert ext.hourly_usd == round(2 * GPU_H + 2 * SYS_H + 0.60, 4)
    assert ext.notes[0].startswith("GPU nodes on demand: 0 to 2") and "extended support" in ext.notes[1]
    assert ext.notes[2] == "no NAT gateway: no per-GB NAT processing"
    std = cost.estimate("us-east-1", G6, 2, M7I, kubernetes_version="1.29", on=IN_STANDARD)
    assert std.hourly_usd == round(2 * GPU_H + SYS_H + NAT_H + PLANE, 4)


def test_estimate_in_a_region_without_prices_has_no_figure_and_says_why_first():
    e = cost.estimate("eu-west-1", G6, 2, M7I)
    assert e.hourly_usd is None and e.missing.startswith("no price for eu-west-1")
    assert e.notes[0] == e.missing and e.notes[1].startswith(
        "GPU nodes on demand: 2 x g6.12xlarge at the on-demand rate (no price for eu-west-1)"
    )


# --- mutmut survivors: what a weaker assertion let through


def test_the_figure_is_rounded_to_four_places_not_five():
    assert cost.hourly_usd("us-east-1", [], nat_gateways=0, control_plane_usd_hour=0.123456) == 0.1235


def test_a_nat_gateway_without_a_price_is_named_as_such():
    with pytest.raises(NoPrice) as e:
        cost.hourly_usd("eu-west-1", [], nat_gateways=1)
    assert (e.value.region, e.value.what) == ("eu-west-1", "NAT gateway")


def test_an_odcr_of_unknown_size_with_no_nodes_bills_none():
    assert cost.billed_gpu_nodes(cost.RESERVATION, 0, None) == 0


@pytest.mark.parametrize(
    "mode, kw, says",
    [
        (
            cost.RESERVATION,
            dict(reserved=4, reservation="cr-0123abcd"),
            [
                "ODCR cr-0123abcd: ",
                "all 4 reserved g6.12xlarge are billed at $4.60/h each",
                "whether GPU nodes run in it or not; gpuNodeCount 0 does not stop it, cancelling the reservation "
                "does (aws ec2 cancel-capacity-reservation --capacity-reservation-id cr-0123abcd)",
            ],
        ),
        (
            cost.CAPACITY_BLOCK,
            dict(reservation="cr-0123abcd", block_end="2026-12-21T11:30:00Z"),
            [
                "Capacity Block cr-0123abcd: paid up front",
                "until 2026-12-21T11:30:00Z",
                "add nothing per hour",
                "nor pulumi destroy refunds the block",
            ],
        ),
        (
            cost.ON_DEMAND,
            dict(scale_from_zero=True),
            ["0 to 2 x g6.12xlarge at $4.60/h each", "only while Ray's jobs need them", "gpuScaleToZero"],
        ),
    ],
)
def test_capacity_notes_per_mode_say_what_is_billed_and_what_stops_it(mode, kw, says):
    (note,) = cost.capacity_notes(mode, G6, "us-east-1", 2, **kw)
    for fragment in says:
        assert fragment in note, (fragment, note)


def test_estimate_passes_every_capacity_argument_to_its_note():
    odcr = cost.estimate("us-east-1", G6, 0, M7I, capacity_mode=cost.RESERVATION, reserved=4, reservation="cr-0123abcd")
    assert odcr.notes[0] == cost.capacity_notes(cost.RESERVATION, G6, "us-east-1", 0, 4, "cr-0123abcd")[0]
    assert odcr.notes[0].startswith("ODCR cr-0123abcd: all 4 reserved")
    block = cost.estimate(
        "us-east-1", G6, 2, M7I, capacity_mode=cost.CAPACITY_BLOCK, reservation="cr-0123abcd", block_end="x"
    )
    assert block.notes[0].startswith(
        "Capacity Block cr-0123abcd: paid up front when bought, for its whole duration until x; its g6.12xlarge nodes"
    )


def test_estimate_without_the_s3_endpoint_says_s3_goes_through_the_nat_gateway():
    e = cost.estimate("us-east-1", G6, 2, M7I, s3_gateway_endpoint=False, on=IN_STANDARD)
    assert e.notes[2:] == [
        "NAT gateway data processing: $0.045/GB through each of the 1 NAT gateway(s), on top of the hourly figure "
        "(pulls from public registries, other egress)",
        "S3 (checkpoints, ECR image layers) goes through the NAT gateway at $0.045/GB: set s3GatewayEndpoint true to "
        "route it through a free gateway endpoint",
        cost.CONTROL_PLANE_LOGS_NOTE,
        "not included: EBS volumes, S3 storage and requests, KMS keys, data transfer out",
    ]


# --- the account's ECR behind interface endpoints (ecrPullThroughCache), and the DLC pulled through NAT

ENDPOINT_H = 0.01  # us-east-1 interface endpoint, per endpoint-AZ hour (instances.py)
ECR_NOTE = (
    "ECR interface endpoints (ecr.api, ecr.dkr): 4 endpoint-AZs at $0.01/h each = $0.04/h, in the hourly figure, plus "
    "$0.01/GB processed (registry API and manifests; the layers come from S3{s3}; the pull-through cache's copy "
    "is ECR storage, not included"
)
NAT_NOTE = (
    "NAT gateway data processing: $0.045/GB through each of the 1 NAT gateway(s), on top of the hourly figure ({})"
)


def test_hourly_usd_adds_one_charge_per_interface_endpoint_az():
    assert cost.hourly_usd("us-east-1", [(G6, 1)], interface_endpoint_azs=4) == round(
        GPU_H + NAT_H + 4 * ENDPOINT_H + PLANE, 4
    )
    with pytest.raises(NoPrice) as e:
        cost.hourly_usd("eu-west-1", [], nat_gateways=0, interface_endpoint_azs=2)
    assert (e.value.region, e.value.what) == ("eu-west-1", "interface VPC endpoint")


@pytest.mark.parametrize(
    "kw, first, second",
    [
        # the account's ECR: its images leave NAT out, the endpoints' charge is named
        (
            dict(ecr_endpoint_azs=4, image_gib=40),
            NAT_NOTE.format("other egress; not the stack's images, pulled from the account's ECR"),
            ECR_NOTE.format(s3=" through its gateway endpoint)"),
        ),
        (
            dict(ecr_endpoint_azs=4, s3_gateway_endpoint=False),
            NAT_NOTE.format("other egress; not the stack's images, pulled from the account's ECR"),
            ECR_NOTE.format(s3=")"),
        ),
        # public registries through NAT: what one GPU node's DLC pull costs there (GiB to GB)
        (
            dict(image_gib=40),
            NAT_NOTE.format(
                "pulls from public registries, other egress: about $1.93 per GPU node pulling a 40 GiB DLC"
            ),
            None,
        ),
        (dict(), NAT_NOTE.format("pulls from public registries, other egress"), None),
    ],
)
def test_cost_notes_say_what_image_pulls_cost(kw, first, second):
    notes = cost.cost_notes("us-east-1", **kw)
    assert notes[0] == first
    assert (notes[1] if second else None) == second


def test_cost_notes_in_a_region_without_endpoint_prices():
    notes = cost.cost_notes("eu-west-1", ecr_endpoint_azs=2, image_gib=40)
    assert "about $" not in notes[0]
    assert notes[1].startswith(
        "ECR interface endpoints (ecr.api, ecr.dkr): 2 endpoint-AZs at per hour and per GB (no price for eu-west-1) "
        "(registry API"
    )


def test_estimate_passes_the_ecr_endpoints_and_the_image_size():
    e = cost.estimate("us-east-1", G6, 2, M7I, on=IN_STANDARD, ecr_endpoint_azs=4, image_gib=40)
    assert e.hourly_usd == round(2 * GPU_H + SYS_H + NAT_H + PLANE + 4 * ENDPOINT_H, 4)
    assert ECR_NOTE.format(s3=" through its gateway endpoint)") in e.notes
    pulled = cost.estimate("us-east-1", G6, 2, M7I, on=IN_STANDARD, image_gib=40)
    assert any(n.endswith("about $1.93 per GPU node pulling a 40 GiB DLC)") for n in pulled.notes)
