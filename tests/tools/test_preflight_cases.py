"""Every condition of tools/preflight.py, each with its row, figure or exit code asserted, against a
stand-in EC2 / Service Quotas client that answers each API as the test says (AWS's response shapes; an API it is
not told about answers NotImplemented, the way moto's missing actions do). No server: test_preflight.py runs the same
checks against moto over HTTP."""

from __future__ import annotations

import argparse
import json
from types import SimpleNamespace

import botocore.exceptions
import pytest
from botocore.exceptions import ClientError

from ray_efa_eks.tools import preflight as pf
from tests.helpers.preflight_ec2 import EC2, ITYPE, R, RID, err, g6, odcr


class SQ:
    def __init__(self, value=1000.0, error=None):
        self.value, self.error, self.calls = value, error, []

    def get_service_quota(self, **kw):
        self.calls.append(kw)
        if self.error:
            raise self.error
        return {"Quota": {"Value": self.value}}


def run(ec2=None, sq=None, itype=ITYPE, count=2, **kw) -> pf.PreflightResult:
    return pf.run_preflight({"ec2": ec2 or EC2(), "service-quotas": sq or SQ()}, itype, count, **kw)


def row(res, name):
    (r,) = [c for c in res.checks if c["name"] == name]
    return r


# --- the clients passed in, and the questions left unanswered


def test_clients_from_a_session_or_a_dict():
    made, ec2, sq = [], EC2(), SQ()
    session = SimpleNamespace(client=lambda name: made.append(name) or {"ec2": ec2, "service-quotas": sq}[name])
    assert pf.run_preflight(session, ITYPE, 2).ok and made == ["ec2", "service-quotas"] and sq.calls
    for clients, asked in (
        ({"ec2": EC2(), "servicequotas": SQ()}, "servicequotas"),
        ({"ec2": EC2(), "service-quotas": SQ(), "servicequotas": SQ()}, "service-quotas"),
    ):
        assert pf.run_preflight(clients, ITYPE, 2).ok
        assert [k for k in ("service-quotas", "servicequotas") if clients.get(k) and clients[k].calls] == [asked]


OFFERINGS = "ec2:DescribeInstanceTypeOfferings"


def _offerings_row(error):
    """The offerings row when DescribeInstanceTypeOfferings answers ``error``."""
    return row(run(EC2(describe_instance_type_offerings=error)), "offerings")


@pytest.mark.parametrize("code", sorted(pf.DENIED_CODES))
def test_each_denial_is_unanswered_naming_the_action(code):
    assert _offerings_row(err(code, 403)) == {
        "name": "offerings",
        "status": "unknown",
        "needs": OFFERINGS,
        "detail": f"AZ offerings of {ITYPE} unknown (denied: {OFFERINGS})",
    }


@pytest.mark.parametrize(
    "code, status, why",
    [
        ("InternalError", 400, "InternalError"),
        ("InternalFailure", 400, "InternalFailure"),
        ("NotImplemented", 400, "NotImplemented"),
        ("InvalidAction", 400, "InvalidAction"),
        ("UnsupportedOperation", 400, "UnsupportedOperation"),
        ("Throttling", 500, "Throttling"),
        ("", 503, "server error"),
    ],
)
def test_an_endpoint_that_does_not_answer_is_unanswered(code, status, why):
    r = _offerings_row(err(code, status))
    assert (r["status"], r["needs"]) == ("unknown", OFFERINGS)
    assert r["detail"].endswith(f"unknown (not answered by the endpoint ({why}): {OFFERINGS})")


def test_any_other_error_is_no_answer_to_hide():
    with pytest.raises(pf.PreflightError, match="^AWS API error in Op: RequestLimitExceeded: "):
        _offerings_row(err("RequestLimitExceeded", 499))


# --- offerings and AZs


def test_every_check_answered_and_passed_is_ok_exit_0():
    ec2, sq = EC2(), SQ()
    res = run(ec2, sq)
    assert (res.ok, res.status, res.exit_code) == (True, "ok", 0)
    assert [c["status"] for c in res.checks] == ["ok"] * 6 and not res.problems and not res.unknowns
    assert res.recommended_az == "us-east-1a"  # the first offering AZ by name, whatever order EC2 answers in
    assert row(res, "offerings")["detail"] == f"{ITYPE} offered in us-east-1a, us-east-1b"
    assert res.azs == {
        "us-east-1a": {"offered": True, "zone_id": "use1-az6", "eks_cluster_subnets": True},
        "us-east-1b": {"offered": True, "zone_id": "use1-az1", "eks_cluster_subnets": True},
        "us-east-1c": {"offered": False, "zone_id": None, "eks_cluster_subnets": None},
        "us-east-1e": {"offered": False, "zone_id": "use1-az3", "eks_cluster_subnets": False},
    }
    assert list(res.azs) == sorted(res.azs)
    op, kw = ec2.calls[0]
    assert op == "describe_instance_type_offerings" and kw == {
        "LocationType": "availability-zone",
        "Filters": [{"Name": "instance-type", "Values": [ITYPE]}],
    }
    assert (
        "describe_availability_zones",
        {"Filters": [{"Name": "zone-type", "Values": ["availability-zone"]}]},
    ) in ec2.calls
    assert sq.calls == [{"ServiceCode": "ec2", "QuotaCode": pf.QUOTA_G_VT}]
    assert [w.split(":")[0] for w in res.warnings] == [f"no capacity reservation for {ITYPE} in {R}"]
    assert pf.recommend_az(ec2, ITYPE) == "us-east-1a" and pf.offered_azs(ec2, ITYPE) == ["us-east-1a", "us-east-1b"]
    assert pf.recommend_az(ec2, "p4d.24xlarge") is None


def test_offerings_unanswered_is_unknown_and_the_other_checks_still_run():
    res = run(EC2(describe_instance_type_offerings=err("UnauthorizedOperation")))
    r = row(res, "offerings")
    assert r == {
        "name": "offerings",
        "status": "unknown",
        "needs": "ec2:DescribeInstanceTypeOfferings",
        "detail": f"AZ offerings of {ITYPE} unknown (denied: ec2:DescribeInstanceTypeOfferings)",
    }
    assert res.azs == {} and res.recommended_az is None and res.status == "undetermined" and res.exit_code == 2
    assert len(res.checks) == 6 and res.unknowns == [
        f"offerings: {r['detail']} (answered by ec2:DescribeInstanceTypeOfferings)"
    ]


def test_zone_ids_unanswered_lists_the_offering_azs_without_ids_and_says_so():
    res = run(EC2(describe_availability_zones=err("UnauthorizedOperation")), az="us-east-1b")
    assert res.azs == {
        "us-east-1a": {"offered": True, "zone_id": None, "eks_cluster_subnets": None},
        "us-east-1b": {"offered": True, "zone_id": None, "eks_cluster_subnets": None},
    }
    assert res.warnings[0] == "ec2:DescribeAvailabilityZones not answered; only offering AZs listed, without zone IDs"
    assert res.recommended_az == "us-east-1b" and res.ok


def test_a_type_offered_nowhere_or_not_in_the_az_fails():
    res = run(EC2(describe_instance_type_offerings=[{"InstanceTypeOfferings": []}]))
    assert row(res, "offerings")["status"] == "failed" and res.recommended_az is None and res.exit_code == 1
    assert res.problems == [f"{ITYPE} is not offered in any AZ of {R}"]
    res = run(az="us-east-1e")
    assert res.problems == [f"{ITYPE} is not offered in us-east-1e (offered in: us-east-1a, us-east-1b)"]
    assert res.recommended_az is None and res.status == "failed"


def test_an_az_where_eks_refuses_the_cluster_is_warned_by_zone_id():
    offered = [{"InstanceTypeOfferings": [{"InstanceType": ITYPE, "Location": "us-east-1e"}]}]
    res = run(EC2(describe_instance_type_offerings=offered))
    assert res.recommended_az == "us-east-1e" and res.ok  # a warning decides nothing
    w = res.warnings[0]
    assert len(res.warnings) == 2 and w.startswith(
        "us-east-1e is zone ID use1-az3 in this account, where EKS creates no cluster subnets"
    )
    assert pf.eks_refuses_cluster_subnets("us-east-1", "use1-az3") is True
    assert pf.eks_refuses_cluster_subnets("us-east-1", "use1-az1") is False
    assert pf.eks_refuses_cluster_subnets("eu-west-1", "use1-az3") is False
    assert pf.eks_refuses_cluster_subnets("us-east-1", None) is False


# --- instance type


def test_instance_type_facts_are_recorded():
    two_kinds = g6(
        GpuInfo={"Gpus": [{"Name": "L4", "Count": 4}, {"Name": "A10G", "Count": 1}, {"Count": 1}]},
        SupportedUsageClasses=["spot", "on-demand"],
    )
    res = run(EC2(describe_instance_types=[{"InstanceTypes": [two_kinds]}]))
    assert res.instance == {
        "gpus": 6,
        "gpu_names": ["", "A10G", "L4"],
        "vcpus": 48,
        "efa_supported": True,
        "max_network_cards": 1,
        "usage_classes": ["on-demand", "spot"],
    }
    assert row(res, "instance-type") == {
        "name": "instance-type",
        "status": "ok",
        "detail": "6 GPU(s), 48 vCPUs, EFA yes",
    }


def test_an_unknown_type_fails_whether_ec2_answers_nothing_or_invalid():
    for ec2 in (
        EC2(describe_instance_types=[{"InstanceTypes": []}]),
        EC2(describe_instance_types=err("InvalidInstanceType")),
    ):
        res = run(ec2)
        assert row(res, "instance-type")["status"] == "failed" and res.instance == {}
        assert f"unknown instance type {ITYPE}" in res.problems and res.exit_code == 1
        assert row(res, "vcpu-quota")["detail"] == "vCPUs per node unknown, so the quota cannot be compared"


def test_instance_type_unanswered_is_unknown_and_another_error_is_an_aws_error():
    res = run(EC2(describe_instance_types=err("UnauthorizedOperation")))
    assert row(res, "instance-type")["needs"] == "ec2:DescribeInstanceTypes" and res.exit_code == 2
    assert row(res, "vcpu-quota")["needs"] == "ec2:DescribeInstanceTypes" and res.quota["status"] == "unknown"
    with pytest.raises(
        pf.PreflightError, match="^AWS API error in Op: RequestLimitExceeded: RequestLimitExceeded message$"
    ):
        run(EC2(describe_instance_types=err("RequestLimitExceeded")))


@pytest.mark.parametrize(
    "efa, info, status, detail",
    [
        (True, g6(NetworkInfo={}), "failed", f"EFA requested but {ITYPE} does not support EFA"),
        (False, g6(NetworkInfo={}), "ok", "4 GPU(s), 48 vCPUs, EFA no"),
        (False, g6(GpuInfo=None), "failed", f"{ITYPE} is a GPU family type but has no GPUs"),
        (
            True,
            g6(InstanceType="p5.48xlarge", GpuInfo={"Gpus": []}),
            "failed",
            "p5.48xlarge is a GPU family type but has no GPUs",
        ),
        (True, g6(InstanceType="m7i.xlarge", GpuInfo=None), "ok", "0 GPU(s), 48 vCPUs, EFA yes"),
        (True, g6(InstanceType="trn1.32xlarge", GpuInfo=None), "ok", "0 GPU(s), 48 vCPUs, EFA yes"),
    ],
)
def test_efa_and_gpus_decide_the_instance_type_row(efa, info, status, detail):
    itype = info["InstanceType"]
    res = run(
        EC2(
            describe_instance_types=[{"InstanceTypes": [info]}],
            describe_instance_type_offerings=[
                {"InstanceTypeOfferings": [{"InstanceType": itype, "Location": "us-east-1a"}]}
            ],
        ),
        itype=itype,
        efa=efa,
    )
    assert row(res, "instance-type") == {"name": "instance-type", "status": status, "detail": detail}


def test_describe_instance_types_asks_100_types_at_a_time():
    """201 running types of the planned type's quota (206 instances): described 100 at a time, each type once."""
    asked = []

    def answer(InstanceTypes):
        asked.append(InstanceTypes)
        return [{"InstanceTypes": [{"InstanceType": t, "VCpuInfo": {"DefaultVCpus": 2}} for t in InstanceTypes]}]

    types = [f"m7i.{n}xlarge" for n in range(201)]
    running = [{"Reservations": [{"Instances": [{"InstanceType": t} for t in types + types[:5]]}]}]
    res = run(EC2(describe_instance_types=answer, describe_instances=running), itype="m7i.48xlarge", efa=False)
    assert asked[0] == ["m7i.48xlarge"]  # the planned type, then the running ones
    assert [len(a) for a in asked[1:]] == [100, 100, 1] and sorted(sum(asked[1:], [])) == sorted(types)
    assert asked[1] == sorted(types)[:100]
    assert res.quota["running_vcpus"] == 206 * 2


# --- quota arithmetic (test_preflight_quota.py has the boundary)


def _described(vcpus):
    """describe_instance_types answering what is asked: ``vcpus``' types with their vCPUs, any other as a g6."""
    return lambda InstanceTypes: [
        {
            "InstanceTypes": [
                {"InstanceType": t, "VCpuInfo": {"DefaultVCpus": vcpus[t]}} if t in vcpus else g6(InstanceType=t)
                for t in InstanceTypes
            ]
        }
    ]


def test_running_vcpus_count_on_demand_instances_of_the_same_quota_only():
    ec2 = EC2(
        describe_instances=[
            {
                "Reservations": [
                    {
                        "Instances": [
                            {"InstanceType": "g5.xlarge"},
                            {"InstanceType": "m7i.xlarge"},
                            {"InstanceType": "g5.xlarge", "InstanceLifecycle": "spot"},
                        ]
                    }
                ]
            },
            {
                "Reservations": [
                    {
                        "Instances": [
                            {"InstanceType": "g6.12xlarge"},
                            {"InstanceType": "gr6.4xlarge", "InstanceLifecycle": "capacity-block"},
                        ]
                    },
                    {},
                ]
            },
        ],
        describe_instance_types=_described({"g5.xlarge": 4, "gr6.4xlarge": 16}),
    )
    assert run(ec2).quota["running_vcpus"] == 4 + 48 + 16  # the spot g5 has the Spot quota
    assert (
        "describe_instances",
        {"Filters": [{"Name": "instance-state-name", "Values": ["running", "pending"]}]},
    ) in ec2.calls
    assert [kw for op, kw in ec2.calls if op == "describe_instance_types"] == [
        {"InstanceTypes": [ITYPE]},
        {"InstanceTypes": ["g5.xlarge", "g6.12xlarge", "gr6.4xlarge"]},
    ]
    p5 = EC2(describe_instances=ec2.answers["describe_instances"], describe_instance_types=_described({}))
    assert run(p5, itype="p5.48xlarge").quota["running_vcpus"] == 0


def test_a_running_type_ec2_does_not_describe_counts_no_vcpus():
    ec2 = EC2(
        describe_instances=[{"Reservations": [{"Instances": [{"InstanceType": "g5.xlarge"}, {}]}]}],
        describe_instance_types=lambda InstanceTypes: [{"InstanceTypes": [g6() for t in InstanceTypes if t == ITYPE]}],
    )
    assert run(ec2).quota["running_vcpus"] == 0


def test_spot_instances_do_not_make_the_on_demand_quota_too_small():
    spot = [{"Reservations": [{"Instances": [{"InstanceType": ITYPE, "InstanceLifecycle": "spot"}] * 2}]}]
    res = run(EC2(describe_instances=spot), SQ(96.0))
    assert res.quota == {"code": pf.QUOTA_G_VT, "status": "ok", "value": 96, "running_vcpus": 0, "required_vcpus": 96}
    assert row(res, "vcpu-quota")["detail"] == f"quota {pf.QUOTA_G_VT} 96 vCPUs >= 96 needed"
    on_demand = [{"Reservations": [{"Instances": [{"InstanceType": ITYPE}]}]}]
    res = run(EC2(describe_instances=on_demand), SQ(96.0))
    assert res.exit_code == 1 and res.problems == [
        f"vCPU quota {pf.QUOTA_G_VT} too small: need 2 x 48 + 48 running = 144 vCPUs, quota is 96"
    ]


@pytest.mark.parametrize(
    "itype",
    [
        "im4gn.large",
        "is4gen.xlarge",
        "i4i.large",
        "a1.large",
        "c7gn.large",
        "d3en.xlarge",
        "h1.2xlarge",
        "m7i-flex.large",
        "r8g.large",
        "t4g.micro",
        "z1d.large",
    ],
)
def test_the_standard_families_share_one_quota(itype):
    assert pf.quota_code_for(itype) == pf.QUOTA_STANDARD


@pytest.mark.parametrize("itype", ["hpc7g.16xlarge", "dl1.24xlarge", "f2.12xlarge", "mac2.metal", "inf2.xlarge"])
def test_families_with_quotas_of_their_own_have_no_code_here(itype):
    assert pf.quota_code_for(itype) is None


def test_quota_denied_or_without_a_value_is_unknown_once():
    res = run(sq=SQ(error=err("AccessDeniedException")))
    assert res.quota == {
        "code": pf.QUOTA_G_VT,
        "status": "unknown",
        "value": None,
        "running_vcpus": 0,
        "required_vcpus": 96,
    }
    assert row(res, "vcpu-quota")["needs"] == "servicequotas:GetServiceQuota" and res.exit_code == 2
    res = run(sq=SQ(value=None))
    assert row(res, "vcpu-quota") == {
        "name": "vcpu-quota",
        "status": "unknown",
        "needs": "servicequotas:GetServiceQuota",
        "detail": f"quota {pf.QUOTA_G_VT} returned no value",
    }
    res = run(EC2(describe_instances=err("UnauthorizedOperation")), SQ(value=None))
    assert [c["detail"] for c in res.checks if c["name"] == "vcpu-quota"] == [
        f"running vCPUs in quota {pf.QUOTA_G_VT} unknown (denied: ec2:DescribeInstances)"
    ]
    assert res.quota["value"] is None and res.quota["required_vcpus"] == 96


# --- placement group dry run


def test_placement_group_dry_run_asks_for_a_cluster_group_without_creating_it():
    ec2 = EC2()
    res = run(ec2)
    assert (
        "create_placement_group",
        {"GroupName": "preflight-dryrun", "Strategy": "cluster", "DryRun": True},
    ) in ec2.calls
    assert res.placement_group == {"status": "ok"} and row(res, "placement-group")["status"] == "ok"


def test_placement_group_refused_fails_and_denied_is_unknown():
    res = run(EC2(create_placement_group=err("PlacementGroupLimitExceeded")))
    assert res.placement_group == {"status": "failed", "reason": "PlacementGroupLimitExceeded"}
    assert res.problems == ["a cluster placement group cannot be created: PlacementGroupLimitExceeded"]
    res = run(EC2(create_placement_group=err("UnauthorizedOperation")))
    assert res.placement_group == {"status": "unknown", "reason": "denied: ec2:CreatePlacementGroup"}
    assert row(res, "placement-group")["needs"] == "ec2:CreatePlacementGroup" and res.exit_code == 2
    created = EC2(create_placement_group={"PlacementGroup": {}})  # an endpoint that ignores DryRun: no error
    assert run(created).placement_group == {"status": "ok"}


# --- a named capacity reservation


def named(r=None, count=2, az=None, error=None, itype=ITYPE):
    answer = error or {"CapacityReservations": [r] if r else []}
    ec2 = EC2(describe_capacity_reservations=answer)
    res = run(ec2, itype=itype, count=count, az=az, capacity_reservation_id=RID)
    return res, ec2


def test_a_reservation_that_serves_is_ok_and_its_az_recommended():
    res, ec2 = named(odcr(AvailableInstanceCount=3, TotalInstanceCount=4))
    assert ("describe_capacity_reservations", {"CapacityReservationIds": [RID]}) in ec2.calls
    r = row(res, "capacity-reservation")
    assert r["status"] == "ok" and r["detail"] == (
        f"{RID}: 3 x {ITYPE} available in us-east-1b (availabilityZone must be us-east-1b)"
    )
    assert res.recommended_az == "us-east-1b" and res.ok
    assert res.capacity_reservations == {
        "id": RID,
        "availability_zone": "us-east-1b",
        "instance_type": ITYPE,
        "state": "active",
        "available": 3,
        "total": 4,
        "end_date": "",
    }
    assert not [c for c in res.checks if c["name"] == "capacity-reservations"]


def test_exactly_enough_available_serves_one_fewer_does_not():
    assert named(odcr(AvailableInstanceCount=2))[0].ok
    res, _ = named(odcr(AvailableInstanceCount=1))
    assert res.problems == [f"capacity reservation {RID} has 1 instance(s) available, 2 needed"]
    res, _ = named({k: v for k, v in odcr().items() if k != "AvailableInstanceCount"})
    assert res.problems == [f"capacity reservation {RID} has 0 instance(s) available, 2 needed"]


def test_every_reason_a_reservation_cannot_serve_is_listed():
    res, _ = named(
        odcr(InstanceType="p5.48xlarge", State="cancelled", AvailableInstanceCount=0, EndDate="2026-12-01"),
        az="us-east-1a",
    )
    assert res.problems == [
        f"capacity reservation {RID} is for p5.48xlarge, not {ITYPE}; is in us-east-1b, not "
        "us-east-1a (set availabilityZone us-east-1b); is cancelled, not active; has 0 "
        "instance(s) available, 2 needed"
    ]
    assert res.capacity_reservations["end_date"] == "2026-12-01" and res.recommended_az == "us-east-1a"


def block(state, **kw):
    return odcr(
        **{
            "ReservationType": "capacity-block",
            "State": state,
            "AvailableInstanceCount": 0,
            "TotalInstanceCount": 2,
            "StartDate": "2026-12-20T11:30:00Z",
            **kw,
        }
    )


@pytest.mark.parametrize("state", ["scheduled", "payment-pending"])
def test_a_block_not_started_counts_its_total_and_says_when(state):
    res, _ = named(block(state))
    r = row(res, "capacity-reservation")
    assert r["status"] == "ok" and r["detail"] == (
        f"Capacity Block {RID} is {state}: 2 x {ITYPE} in us-east-1b "
        "from 2026-12-20T11:30:00Z (availabilityZone must be us-east-1b)"
    )
    assert (
        res.capacity_reservations["available"] == 2
        and res.capacity_reservations["start_date"] == "2026-12-20T11:30:00Z"
    )
    assert res.warnings == [
        f"Capacity Block {RID} starts 2026-12-20T11:30:00Z: deploy with gpuNodeCount 0 (EKS "
        "accepts the node group now) and raise it once the block is active"
    ]
    assert res.recommended_az == "us-east-1b" and res.ok
    res, _ = named(block(state), count=3)
    assert res.problems == [f"capacity reservation {RID} has 2 instance(s) available, 3 needed"]
    res, _ = named({k: v for k, v in block(state).items() if k != "StartDate"})
    assert "from (start unknown)" in row(res, "capacity-reservation")["detail"]


def test_a_block_not_started_or_an_odcr_scheduled_is_not_active():
    res, _ = named(block("payment-failed"))
    assert res.problems == [
        f"capacity reservation {RID} is payment-failed: EC2 never starts it (buy a new block); "
        "has 0 instance(s) available, 2 needed"
    ]
    res, _ = named(odcr(State="scheduled"))  # only a Capacity Block is accepted before its start
    assert res.problems == [f"capacity reservation {RID} is scheduled, not active"]
    res, _ = named(block("active", AvailableInstanceCount=2))
    assert res.ok and not res.warnings and row(res, "capacity-reservation")["detail"].startswith(f"{RID}: 2 x")
    res, _ = named(block("scheduled", TotalInstanceCount=None), count=1)
    assert res.problems == [f"capacity reservation {RID} has 0 instance(s) available, 1 needed"]


def test_a_reservation_not_found_unanswered_or_a_group_is_said_so():
    for code in ("InvalidCapacityReservationId.NotFound", "InvalidCapacityReservationId.Malformed"):
        res, _ = named(error=err(code))
        assert res.problems == [f"capacity reservation {RID} not found in {R}"] and res.exit_code == 1
    res, _ = named(None)
    assert res.problems == [f"capacity reservation {RID} not found in {R}"]
    res, _ = named(error=err("UnauthorizedOperation"))
    assert res.capacity_reservations == {"id": RID, "status": "unknown"} and res.exit_code == 2
    assert row(res, "capacity-reservation")["detail"] == f"{RID} unknown (denied: ec2:DescribeCapacityReservations)"
    with pytest.raises(pf.PreflightError, match="RequestLimitExceeded"):
        named(error=err("RequestLimitExceeded"))
    group = "arn:aws:resource-groups:us-east-1:123456789012:group/pool"
    ec2 = EC2()
    res = run(ec2, capacity_reservation_id=group)
    assert row(res, "capacity-reservation") == {
        "name": "capacity-reservation",
        "status": "unknown",
        "detail": f"{group} is a resource group: its reservations are not checked",
        "needs": "resource-groups:ListGroupResources + ec2:DescribeCapacityReservations",
    }
    assert not [c for c in ec2.calls if c[0] == "describe_capacity_reservations"] and res.exit_code == 2


def test_reservation_az():
    assert (
        pf.reservation_az(EC2(describe_capacity_reservations={"CapacityReservations": [odcr()]}), RID) == "us-east-1b"
    )
    with pytest.raises(LookupError, match=f"^capacity reservation {RID} not found in us-east-1$"):
        pf.reservation_az(EC2(describe_capacity_reservations={"CapacityReservations": []}), RID)
    with pytest.raises(pf.Unanswered, match="ec2:DescribeCapacityReservations"):
        pf.reservation_az(EC2(describe_capacity_reservations=err("UnauthorizedOperation")), RID)


# --- no reservation named: what is there


def test_active_reservations_are_listed_and_the_largest_named():
    found = [
        {"CapacityReservations": [odcr(CapacityReservationId="cr-1", AvailableInstanceCount=1)]},
        {
            "CapacityReservations": [
                odcr(CapacityReservationId="cr-2", AvailableInstanceCount=5, AvailabilityZone="us-east-1a"),
                {"CapacityReservationId": "cr-3"},
            ]
        },
    ]
    ec2 = EC2(describe_capacity_reservations=found)
    res = run(ec2, az="us-east-1a")
    assert (
        "describe_capacity_reservations",
        {
            "Filters": [
                {"Name": "instance-type", "Values": [ITYPE]},
                {"Name": "state", "Values": ["active"]},
                {"Name": "availability-zone", "Values": ["us-east-1a"]},
            ]
        },
    ) in ec2.calls
    assert res.capacity_reservations == {
        "status": "ok",
        "active": [
            {"id": "cr-1", "availability_zone": "us-east-1b", "available": 1},
            {"id": "cr-2", "availability_zone": "us-east-1a", "available": 5},
            {"id": "cr-3", "availability_zone": None, "available": 0},
        ],
    }
    assert row(res, "capacity-reservations")["detail"] == (
        f"3 active for {ITYPE} in us-east-1a; the largest, cr-2 in us-east-1a, has 5 available (use it: "
        "--capacity-reservation-id)"
    )
    assert not res.warnings and res.ok


def test_no_reservation_is_ok_with_a_warning_and_unanswered_is_unknown():
    ec2 = EC2()
    res = run(ec2)
    assert (
        "describe_capacity_reservations",
        {"Filters": [{"Name": "instance-type", "Values": [ITYPE]}, {"Name": "state", "Values": ["active"]}]},
    ) in ec2.calls
    assert row(res, "capacity-reservations")["detail"] == f"none active for {ITYPE} in {R}"
    assert res.warnings == [
        f"no capacity reservation for {ITYPE} in {R}: on-demand launches compete for free "
        "capacity (InsufficientInstanceCapacity is possible)"
    ]
    res = run(EC2(describe_capacity_reservations=err("UnauthorizedOperation")))
    assert res.capacity_reservations == {"status": "unknown"} and res.exit_code == 2
    assert row(res, "capacity-reservations")["needs"] == "ec2:DescribeCapacityReservations"


# --- Capacity Block offerings

OFFER = {
    "CapacityBlockOfferingId": "cb-1",
    "AvailabilityZone": "us-east-1a",
    "StartDate": "2026-12-10T11:30:00Z",
    "UpfrontFee": "2641.92",
    "CurrencyCode": "USD",
}


def sold_as_blocks(**answers):
    return EC2(
        describe_instance_types=[{"InstanceTypes": [g6(SupportedUsageClasses=["capacity-block", "on-demand"])]}],
        **answers,
    )


def test_a_type_not_sold_as_blocks_is_not_asked():
    ec2 = EC2()
    res = run(ec2)
    assert res.capacity_blocks == {"status": "not sold"}
    assert row(res, "capacity-blocks")["detail"] == f"EC2 sells no Capacity Blocks of {ITYPE} (not needed)"
    assert not [c for c in ec2.calls if c[0] == "describe_capacity_block_offerings"]


def test_block_offerings_are_listed_earliest_first_in_the_az():
    later = {**OFFER, "CapacityBlockOfferingId": "cb-2", "StartDate": "2026-12-11T11:30:00Z"}
    elsewhere = {
        **OFFER,
        "CapacityBlockOfferingId": "cb-3",
        "AvailabilityZone": "us-east-1b",
        "StartDate": "2026-12-09T11:30:00Z",
    }
    ec2 = sold_as_blocks(describe_capacity_block_offerings={"CapacityBlockOfferings": [later, OFFER, elsewhere]})
    res = run(ec2, az="us-east-1a")
    assert (
        "describe_capacity_block_offerings",
        {"InstanceType": ITYPE, "InstanceCount": 2, "CapacityDurationHours": 24},
    ) in ec2.calls
    assert [o["id"] for o in res.capacity_blocks["offerings"]] == ["cb-1", "cb-2"]
    assert res.capacity_blocks["offerings"][0] == {
        "id": "cb-1",
        "availability_zone": "us-east-1a",
        "start": "2026-12-10T11:30:00Z",
        "upfront_fee": "2641.92",
        "currency": "USD",
    }
    assert row(res, "capacity-blocks")["detail"] == (
        f"2 offering(s) of 2 x {ITYPE} for 24 h in us-east-1a; earliest 2026-12-10T11:30:00Z in us-east-1a"
    )
    res = run(sold_as_blocks(describe_capacity_block_offerings={"CapacityBlockOfferings": [later, OFFER, elsewhere]}))
    assert [o["id"] for o in res.capacity_blocks["offerings"]] == ["cb-3", "cb-1", "cb-2"]


def test_block_offerings_follow_next_token_to_the_last_page():
    pages = {
        None: {"CapacityBlockOfferings": [OFFER], "NextToken": "2"},
        "2": {"NextToken": "3"},
        "3": {"CapacityBlockOfferings": [{**OFFER, "CapacityBlockOfferingId": "cb-9"}], "NextToken": ""},
    }
    ec2 = EC2(describe_capacity_block_offerings=lambda NextToken=None, **kw: pages[NextToken])
    assert [o["CapacityBlockOfferingId"] for o in pf.capacity_block_offerings(ec2, ITYPE, 4, hours=48)] == [
        "cb-1",
        "cb-9",
    ]
    assert [kw for _, kw in ec2.calls] == [
        {"InstanceType": ITYPE, "InstanceCount": 4, "CapacityDurationHours": 48},
        {"InstanceType": ITYPE, "InstanceCount": 4, "CapacityDurationHours": 48, "NextToken": "2"},
        {"InstanceType": ITYPE, "InstanceCount": 4, "CapacityDurationHours": 48, "NextToken": "3"},
    ]


def test_no_block_offering_is_ok_and_unanswered_is_unknown():
    res = run(sold_as_blocks())
    assert res.capacity_blocks == {"status": "ok", "offerings": []} and res.ok
    assert row(res, "capacity-blocks")["detail"] == f"no Capacity Block offering of 2 x {ITYPE} for 24 h in {R}"
    res = run(sold_as_blocks(describe_capacity_block_offerings=err("UnauthorizedOperation")))
    assert (
        res.capacity_blocks == {"status": "unknown"}
        and row(res, "capacity-blocks")["needs"] == "ec2:DescribeCapacityBlockOfferings"
    )
    # the type's usage classes unknown: the offerings are asked
    res = run(
        EC2(
            describe_instance_types=err("UnauthorizedOperation"),
            describe_capacity_block_offerings={"CapacityBlockOfferings": [OFFER]},
        )
    )
    assert [o["id"] for o in res.capacity_blocks["offerings"]] == ["cb-1"]


# --- verdict, table, errors


def test_a_failure_outranks_an_unknown():
    res = run(EC2(create_placement_group=err("UnauthorizedOperation")), SQ(10.0))
    assert (res.status, res.ok, res.exit_code) == ("failed", False, 1) and res.unknowns and res.problems


def test_the_table_marks_the_recommended_az_zone_ids_and_the_verdict():
    res = run(EC2(create_placement_group=err("UnauthorizedOperation")), az="us-east-1b")
    lines = pf.format_table(res).splitlines()
    assert lines[0] == f"Preflight {ITYPE} x2 in {R} (EFA on)"
    assert lines[2].split() == ["us-east-1a", "use1-az6", "yes", "yes"]
    assert lines[3].split() == ["us-east-1b", "use1-az1", "yes", "yes", "<-", "recommended"]
    assert lines[4].split() == ["us-east-1c", "?", "no", "?"]
    assert lines[5].split()[:4] == ["us-east-1e", "use1-az3", "no", "no"] and "EKS refuses" in lines[5]
    assert (
        "placement-group        UNKNOWN  cluster placement group unknown (denied: ec2:CreatePlacementGroup)  "
        "[would be answered by ec2:CreatePlacementGroup]" in lines
    )
    assert lines[-2].startswith("NOTE: no capacity reservation")
    assert lines[-1] == "RESULT: UNDETERMINED (1 check(s) could not be answered; not OK)"
    assert pf.format_table(run(efa=False)).splitlines()[-1] == "RESULT: OK (every check passed)"
    assert "(EFA off)" in pf.format_table(run(efa=False))
    failed = run(sq=SQ(1.0), az="us-east-1e")
    assert pf.format_table(failed).splitlines()[-1] == "RESULT: FAILED (2 check(s) failed)"
    empty = pf.PreflightResult(R, ITYPE, 2, True, status="ok")
    assert pf.format_table(empty).splitlines()[-1] == "RESULT: OK (every check passed)"


@pytest.mark.parametrize(
    "error, says",
    [
        (botocore.exceptions.NoCredentialsError(), "^no AWS credentials: Unable to locate credentials$"),
        (botocore.exceptions.EndpointConnectionError(endpoint_url="http://x"), "^cannot reach AWS endpoint: "),
        (
            botocore.exceptions.ParamValidationError(report="bad\nsecond line"),
            "^AWS client error: Parameter validation failed:$",
        ),
    ],
)
def test_aws_unreachable_is_a_preflight_error(error, says):
    with pytest.raises(pf.PreflightError, match=says):
        run(EC2(describe_instance_type_offerings=error))


def test_count_below_one_is_refused_before_any_call():
    with pytest.raises(ValueError, match="count must be >= 1 \\(got 0\\)"):
        run(count=0)
    assert run(count=1).quota["required_vcpus"] == 48


# --- main


def _namespace(**kw):
    d = dict(region=None, az=None, instance_type=ITYPE, count=2, endpoint_url=None, capacity_reservation_id=None)
    return argparse.Namespace(**{**d, **kw})


def test_usage_problem_without_a_region_checks_the_az_shape_only(monkeypatch):
    for k in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    assert pf.usage_problem(_namespace(az="eu-west-1a")) is None
    assert pf.usage_problem(_namespace(az="eu-west-1")) == (
        "--az 'eu-west-1': not an availability zone of the region; e.g. --az us-east-1a"
    )
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    assert pf.usage_problem(_namespace(az="eu-west-1a")) is None
    assert pf.usage_problem(_namespace(az="us-east-1a")) == (
        "--az 'us-east-1a': not an availability zone of eu-west-1; e.g. --az eu-west-1a"
    )


def test_usage_problem_at_the_node_group_limit():
    assert pf.usage_problem(_namespace(region=R, count=450)) is None
    assert pf.usage_problem(_namespace(region=R, count=451)).startswith("--count 451: an EKS managed node group")
    assert (
        pf.usage_problem(
            _namespace(
                region="us-gov-west-1",
                instance_type="u-6tb1.metal",
                capacity_reservation_id="arn:aws:resource-groups:us-east-1:123456789012:group/pool",
            )
        )
        is None
    )


def test_main_prints_json_or_the_table_and_exits_with_the_verdict(monkeypatch, capsys):
    monkeypatch.delenv("AWS_REGION", raising=False)
    seen, real = {}, pf.run_preflight

    def fake_run(clients, itype, count, **kw):
        seen.update(clients=clients, itype=itype, count=count, **kw)
        return real({"ec2": EC2(), "service-quotas": SQ(1.0)}, ITYPE, 2)

    monkeypatch.setattr(pf, "run_preflight", fake_run)
    assert (
        pf.main(
            [
                "--region",
                "eu-west-1",
                "--json",
                "--count",
                "3",
                "--az",
                "eu-west-1b",
                "--no-efa",
                "--capacity-reservation-id",
                RID,
            ]
        )
        == 1
    )
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "failed" and out["quota"]["status"] == "too_small"
    assert (seen["itype"], seen["count"], seen["az"], seen["efa"], seen["capacity_reservation_id"]) == (
        ITYPE,
        3,
        "eu-west-1b",
        False,
        RID,
    )
    assert seen["clients"]["ec2"].meta.region_name == "eu-west-1"
    assert seen["clients"]["service-quotas"].meta.service_model.service_name == "service-quotas"
    assert pf.main(["--region", "eu-west-1"]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == "RESULT: FAILED (1 check(s) failed)"


@pytest.mark.parametrize(
    "error",
    [
        pf.PreflightError("no AWS credentials: x"),
        ValueError("no AWS credentials: x"),
        botocore.exceptions.NoRegionError(),
    ],
)
def test_main_reports_what_stopped_it_and_that_nothing_was_checked(monkeypatch, capsys, error):
    def fails(*a, **kw):
        raise error

    monkeypatch.setattr(pf, "run_preflight", fails)
    assert pf.main(["--region", "eu-west-1"]) == pf.EXIT_UNDETERMINED
    captured = capsys.readouterr()
    assert captured.err == f"preflight error: {error} (nothing was checked)\n" and captured.out == ""


# --- what a weaker assertion let through (mutmut survivors)

HELP = {  # option -> its help, as --help prints it
    "--region REGION": "AWS region (default: $AWS_REGION, then $AWS_DEFAULT_REGION or your profile's region; boto3 "
    "alone reads only the latter two)",
    "--instance-type INSTANCE_TYPE": "the GPU instance type (default g6.12xlarge)",
    "--count COUNT": "GPU nodes to launch (>= 1)",
    "--az AZ": "check this availability zone of the region only (e.g. us-east-1a)",
    "--efa, --no-efa": "check EFA support and the EFA interfaces the type takes (default on)",
    "--capacity-reservation-id cr-...": "check this ODCR / Capacity Block: type, AZ, state, available count",
    "--json": "print the checks as one JSON object",
    "--endpoint-url ENDPOINT_URL": "an EC2/Service Quotas endpoint to call instead of AWS's (e.g. moto)",
}


def test_help_names_every_option_with_its_meaning_and_the_exit_codes(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "300")  # one line per option
    with pytest.raises(SystemExit) as e:
        pf.main(["--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and out.startswith("usage: python -m ray_efa_eks.tools.preflight [-h] [--region REGION]")
    assert "\nCapacity preflight for the multi-node EFA GPU node group: can these GPUs be had, here, now?\n" in out
    flat = " ".join(out.split())
    for option, says in HELP.items():
        assert f"{option} {says}" in flat, option
    assert "exit codes: 0 every check passed 1 a check failed" in flat
    with pytest.raises(SystemExit):
        pf.main(["--help"], prog="ray-efa-eks preflight")
    assert capsys.readouterr().out.startswith("usage: ray-efa-eks preflight [-h]")


def test_the_defaults_are_two_g6_nodes_with_efa_as_a_table(monkeypatch):
    monkeypatch.delenv("AWS_REGION", raising=False)
    seen = {}
    monkeypatch.setattr(pf, "_main", lambda a: seen.setdefault("a", a) and 0)
    assert pf.main(["--region", R]) == 0
    assert vars(seen["a"]) == {
        "region": R,
        "instance_type": "g6.12xlarge",
        "count": 2,
        "az": None,
        "efa": True,
        "capacity_reservation_id": None,
        "json": False,
        "endpoint_url": None,
    }


def test_main_gives_up_on_aws_in_seconds_and_calls_the_endpoint_it_is_given(monkeypatch, capsys):
    """connect 5 s, read 20 s, 2 attempts: an unreachable endpoint answers exit 2 in seconds, not minutes."""
    monkeypatch.delenv("AWS_REGION", raising=False)
    seen, real = {}, pf.run_preflight

    def fake_run(clients, itype, count, **kw):
        seen.update(clients)
        return real({"ec2": EC2(), "service-quotas": SQ()}, ITYPE, 2)

    monkeypatch.setattr(pf, "run_preflight", fake_run)
    assert pf.main(["--region", "eu-west-1", "--endpoint-url", "http://127.0.0.1:5000"]) == 0
    for name in ("ec2", "service-quotas"):
        meta = seen[name].meta
        assert meta.endpoint_url == "http://127.0.0.1:5000" and meta.region_name == "eu-west-1"
        assert (meta.config.connect_timeout, meta.config.read_timeout) == (5, 10)
        assert meta.config.retries == {"total_max_attempts": 2, "mode": "standard"}  # botocore: 1 + 1 retry
    assert capsys.readouterr().out.splitlines()[-1] == "RESULT: OK (every check passed)"


def test_the_eks_zone_warning_says_what_the_stack_does_about_it():
    offered = [{"InstanceTypeOfferings": [{"InstanceType": ITYPE, "Location": "us-east-1e"}]}]
    res = run(EC2(describe_instance_type_offerings=offered))
    assert res.warnings[0] == (
        "us-east-1e is zone ID use1-az3 in this account, where EKS creates no cluster subnets "
        "(UnsupportedAvailabilityZoneException; EKS user guide, network-reqs): the stack puts the cluster in two other "
        "AZs and gives the GPU nodes their own subnet here, which no EKS document confirms for managed node groups; "
        "another AZ avoids the question"
    )


def test_an_instance_type_answer_without_the_optional_fields_counts_them_absent():
    bare = {"InstanceType": ITYPE, "GpuInfo": {"Gpus": [{"Name": "L4"}, {"Name": "L4", "Count": 4}]}}
    res = run(EC2(describe_instance_types=[{"InstanceTypes": [bare]}]), efa=False)
    assert res.instance == {
        "gpus": 4,
        "gpu_names": ["L4"],
        "vcpus": 0,
        "efa_supported": False,
        "max_network_cards": None,
        "usage_classes": [],
    }
    assert row(res, "instance-type")["detail"] == "4 GPU(s), 0 vCPUs, EFA no"
    assert res.capacity_blocks == {"status": "not sold"}  # no usage classes listed: none of them is capacity-block


def test_a_family_without_a_known_quota_code_names_the_call_that_finds_it():
    res = run(
        EC2(
            describe_instance_types=[{"InstanceTypes": [g6(InstanceType="x2idn.32xlarge")]}],
            describe_instance_type_offerings=[
                {"InstanceTypeOfferings": [{"InstanceType": "x2idn.32xlarge", "Location": "us-east-1a"}]}
            ],
        ),
        itype="x2idn.32xlarge",
    )
    assert row(res, "vcpu-quota") == {
        "name": "vcpu-quota",
        "status": "unknown",
        "detail": "no On-Demand vCPU quota code known for x2idn.32xlarge",
        "needs": "servicequotas:ListServiceQuotas (find the family's quota code)",
    }
    assert res.quota == {
        "code": None,
        "status": "unknown",
        "value": None,
        "running_vcpus": None,
        "required_vcpus": None,
    }


def test_a_quota_answer_without_a_quota_is_no_value():
    class Empty(SQ):
        def get_service_quota(self, **kw):
            return {}

    res = run(sq=Empty())
    assert row(res, "vcpu-quota")["detail"] == f"quota {pf.QUOTA_G_VT} returned no value" and res.exit_code == 2


def test_the_table_header_names_its_columns():
    lines = pf.format_table(run()).splitlines()
    assert lines[1] == f"{'AZ':<20} {'ZONE ID':<10} OFFERED  EKS CLUSTER SUBNETS"


def test_a_bad_endpoint_url_gets_an_example_of_a_good_one(monkeypatch, capsys):
    monkeypatch.delenv("AWS_REGION", raising=False)
    with pytest.raises(SystemExit):
        pf.main(["--region", R, "--endpoint-url", "ftp://x"])
    assert capsys.readouterr().err.endswith(
        "--endpoint-url 'ftp://x': needs a scheme (http/https) and a host; e.g. --endpoint-url http://127.0.0.1:5000\n"
    )


def test_json_output_has_sorted_keys(monkeypatch, capsys):
    monkeypatch.delenv("AWS_REGION", raising=False)
    real = pf.run_preflight
    monkeypatch.setattr(pf, "run_preflight", lambda *a, **kw: real({"ec2": EC2(), "service-quotas": SQ()}, ITYPE, 2))
    assert pf.main(["--region", R, "--json"]) == 0
    text = capsys.readouterr().out
    assert text == json.dumps(json.loads(text), sort_keys=True) + "\n"  # stable for diffs between runs


# --- conditions only a mutation run found unasserted, this file's share


def test_an_unparseable_answer_is_unanswered_naming_the_action():
    """An emulator's HTML error page (botocore's ResponseParserError) is "not answered", with the action to ask."""
    from botocore.parsers import ResponseParserError

    html = ResponseParserError("Unable to parse response (syntax error), invalid XML received")
    assert row(run(EC2(describe_instances=html)), "vcpu-quota") == {
        "name": "vcpu-quota",
        "status": "unknown",
        "needs": "ec2:DescribeInstances",
        "detail": f"running vCPUs in quota {pf.QUOTA_G_VT} unknown (not answered by the endpoint (unparseable "
        "response): ec2:DescribeInstances)",
    }


def test_an_error_answer_without_code_or_message_is_named_as_it_came():
    """botocore builds ClientError from the parsed error body; one with no Error at all (an empty body) still
    makes a one-line preflight error, with the operation and empty code and message, not a crash."""
    bare = ClientError({}, "DescribeInstanceTypes")
    with pytest.raises(pf.PreflightError) as e:
        run(EC2(describe_instance_types=bare))
    assert str(e.value) == "AWS API error in DescribeInstanceTypes: : "
    no_code = ClientError({"Error": {"Message": "m"}}, "DescribeInstanceTypes")
    with pytest.raises(pf.PreflightError) as e:
        run(EC2(describe_instance_types=no_code))
    assert str(e.value) == "AWS API error in DescribeInstanceTypes: : m"


def test_a_page_without_its_list_counts_as_empty():
    """botocore's XML parser leaves out a member whose element the answer lacks (parsers.py _handle_structure), so
    a page may have no list at all: read as an empty one."""
    ec2 = EC2(
        describe_instance_type_offerings=[
            {},
            {"InstanceTypeOfferings": [{"InstanceType": ITYPE, "Location": "us-east-1a"}]},
        ],
        describe_instance_types=lambda **kw: [{}, {"InstanceTypes": [g6()]}],
    )
    res = run(ec2)
    assert res.ok and list(res.azs) == ["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1e"]
    assert res.instance["vcpus"] == 48
    assert pf.zone_ids(EC2(describe_availability_zones={})) == {}
    assert run(EC2(describe_availability_zones={})).azs == {
        "us-east-1a": {"offered": True, "zone_id": None, "eks_cluster_subnets": None},
        "us-east-1b": {"offered": True, "zone_id": None, "eks_cluster_subnets": None},
    }


def test_no_region_anywhere_is_said_before_any_call(monkeypatch, capsys):
    for k in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    assert pf.main([]) == pf.EXIT_UNDETERMINED
    assert capsys.readouterr().err == (
        "preflight error: no AWS region: pass --region or set AWS_REGION (nothing was checked)\n"
    )


def test_ctrl_c_says_nothing_was_changed(monkeypatch, capsys):
    def interrupted(a):
        raise KeyboardInterrupt

    monkeypatch.setattr(pf, "_main", interrupted)
    assert pf.main(["--region", R]) == 130
    assert capsys.readouterr().err == "preflight: interrupted (nothing was changed)\n"


def test_unanswered_instance_type_says_what_is_unknown():
    res = run(EC2(describe_instance_types=err("UnauthorizedOperation")))
    assert row(res, "instance-type")["detail"] == (
        f"GPUs/vCPUs/EFA of {ITYPE} unknown (denied: ec2:DescribeInstanceTypes)"
    )


def test_an_az_that_does_not_offer_the_type_fails_the_offerings_row():
    res = run(az="us-east-1e")
    assert row(res, "offerings") == {
        "name": "offerings",
        "status": "failed",
        "detail": f"{ITYPE} is not offered in us-east-1e (offered in: us-east-1a, us-east-1b)",
    }


def test_the_table_puts_nothing_after_an_answered_row():
    lines = pf.format_table(run()).splitlines()
    width = max(len(c["name"]) for c in run().checks)
    assert f"{'offerings':<{width}}  OK       {ITYPE} offered in us-east-1a, us-east-1b" in lines


def test_count_below_one_says_why_none_is_needed():
    with pytest.raises(ValueError) as e:
        run(count=0)
    assert (
        str(e.value) == "count must be >= 1 (got 0): preflight checks nodes to launch; 0 parked nodes need no capacity"
    )


def test_usage_problems_are_whole_sentences_with_an_example():
    assert pf.usage_problem(_namespace(region="useast1")) == (
        "--region 'useast1': not an AWS region name; e.g. --region us-east-1 (or leave it out to use AWS_REGION / "
        "your profile's region)"
    )
    assert pf.usage_problem(_namespace(region=R, count=451)) == (
        "--count 451: an EKS managed node group holds at most 450 nodes (EKS service quotas: 'Nodes per managed node "
        "group'); e.g. --count 2"
    )
    assert pf.usage_problem(_namespace(region=R, capacity_reservation_id="cr-12")) == (
        "--capacity-reservation-id 'cr-12': expected cr- and 8 or 17 hex digits (an ODCR or Capacity Block), or a "
        "reservation resource group ARN"
    )


def test_unknowns_name_the_action_only_where_one_would_answer():
    res = pf.PreflightResult(R, ITYPE, 2, True)
    res.check("a", pf.UNKNOWN, "no answer")
    res.check("b", pf.UNKNOWN, "denied", "ec2:X")
    assert res.unknowns == ["a: no answer", "b: denied (answered by ec2:X)"]
    assert [c.get("needs") for c in res.checks] == [None, "ec2:X"]


def test_the_placement_group_is_asked_only_where_the_stack_creates_one():
    """components/nodes/node_groups.py creates a cluster placement group for EFA nodes on demand only
    (capacity.cluster_placement_group): without EFA, or with a reservation named, preflight asked EC2 anyway and
    failed or went undetermined on a group the stack never makes (found by mutmut: ``efa`` was never read)."""
    for kw in ({"efa": False}, {"capacity_reservation_id": RID}):
        ec2 = EC2(
            create_placement_group=err("PlacementGroupLimitExceeded"),
            describe_capacity_reservations={"CapacityReservations": [odcr()]},
        )
        res = run(ec2, **kw)
        assert not [c for c in ec2.calls if c[0] == "create_placement_group"]
        why = "no EFA" if kw.get("efa") is False else "a capacity reservation is targeted"
        assert res.placement_group == {"status": "not needed", "reason": why}
        assert row(res, "placement-group") == {
            "name": "placement-group",
            "status": "ok",
            "detail": (f"not needed: the stack creates no cluster placement group with {why}"),
        }
        assert "cannot be created" not in " ".join(res.problems)
    assert run(EC2(create_placement_group=err("PlacementGroupLimitExceeded"))).exit_code == 1  # EFA on demand: asked


def test_zone_ids_unanswered_names_the_action_in_the_note():
    res = run(EC2(describe_availability_zones=err("UnauthorizedOperation")))
    assert res.warnings[0] == "ec2:DescribeAvailabilityZones not answered; only offering AZs listed, without zone IDs"
