"""Preflight's quota arithmetic and its unanswered paths, with stand-in EC2 / Service Quotas clients:
need = count x vCPUs per node + vCPUs already running in the same quota; ok only when need <= quota."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from botocore.exceptions import ClientError

from ray_efa_eks.tools import preflight as pf
from ray_efa_eks.tools import preflight_aws as aws
from tests.helpers import preflight_ec2 as stub


def _types(extra):
    """describe_instance_types answering only what is asked: the planned type's (stub.g6 with its name, 48 vCPUs)
    and ``extra``'s vCPUs."""

    def answer(InstanceTypes=(), **kw):
        known = {t: {"InstanceType": t, "VCpuInfo": {"DefaultVCpus": n}} for t, n in extra.items()}
        return [
            {
                "InstanceTypes": [
                    known.get(t) or stub.g6(InstanceType=t, SupportedUsageClasses=PLANNED[t])
                    for t in InstanceTypes
                    if t in known or t in PLANNED
                ]
            }
        ]

    return answer


PLANNED = {"g6.12xlarge": ["on-demand", "spot"], "p5.48xlarge": ["on-demand", "capacity-block"]}


def EC2(instances=(), types=None, **answers):
    """The stand-in EC2 with ``instances`` running (one reservation) and their types' vCPUs in ``types``."""
    return stub.EC2(
        **{
            "describe_instances": [{"Reservations": [{"Instances": [{"InstanceType": t} for t in instances]}]}],
            "describe_instance_types": _types(types or {}),
            **answers,
        }
    )


class SQ:
    def __init__(self, value=None, error=None):
        self.value, self.error = value, error

    def get_service_quota(self, **kw):
        if self.error:
            raise ClientError({"Error": {"Code": self.error, "Message": "x"}}, "GetServiceQuota")
        return {"Quota": {"Value": self.value}} if self.value is not None else {"Quota": {}}


def _preflight(ec2=None, sq=None, itype="g6.12xlarge", count=2, az=None, reservation_id=None):
    """preflight's result, as ``ray-efa-eks preflight`` computes it, with stand-in clients passed in."""
    return pf.run_preflight(
        {"ec2": ec2 or EC2(), "servicequotas": sq or SQ(value=1000.0)}, itype, count, az, True, reservation_id
    )


def _rows(res, name):
    return [c for c in res.checks if c["name"] == name]


def _quota(ec2, sq, itype="g6.12xlarge", count=2):
    return _preflight(ec2, sq, itype, count)


@pytest.mark.parametrize(
    "itype, code",
    [
        ("g6.12xlarge", pf.QUOTA_G_VT),
        ("gr6.4xlarge", pf.QUOTA_G_VT),
        ("vt1.3xlarge", pf.QUOTA_G_VT),
        ("p5.48xlarge", pf.QUOTA_P),
        ("m7i.xlarge", pf.QUOTA_STANDARD),
        ("z1d.metal", pf.QUOTA_STANDARD),
        ("trn1.32xlarge", None),  # Trn, Inf, X: quotas of their own
        ("inf2.xlarge", None),
        ("x2idn.32xlarge", None),
        ("u-6tb1.metal", None),
        ("1x.large", None),
    ],
)
def test_quota_code_per_family(itype, code):
    assert pf.quota_code_for(itype) == code


def test_need_equal_to_the_quota_is_ok_one_more_vcpu_is_not():
    running = EC2(["g6.xlarge", "m7i.xlarge"], {"g6.xlarge": 4})  # the m7i counts against another quota
    res = _quota(running, SQ(value=100.0))
    assert res.quota == {"code": pf.QUOTA_G_VT, "status": "ok", "value": 100, "running_vcpus": 4, "required_vcpus": 100}
    assert _rows(res, "vcpu-quota")[0]["status"] == pf.OK
    res = _quota(running, SQ(value=99.0))
    assert res.quota["status"] == "too_small" and res.problems == [
        f"vCPU quota {pf.QUOTA_G_VT} too small: need 2 x 48 + 4 running = 100 vCPUs, quota is 99"
    ]


def test_unknown_family_or_vcpus_is_undetermined():
    res = _quota(EC2(), SQ(value=1000.0), itype="x2idn.32xlarge")
    assert res.quota["status"] == pf.UNKNOWN and _rows(res, "vcpu-quota")[0]["detail"].startswith(
        "no On-Demand vCPU quota code"
    )
    res = _quota(EC2(describe_instance_types=stub.err("UnauthorizedOperation")), SQ(value=1000.0))
    assert [u for u in res.unknowns if u.startswith("vcpu-quota")] == [
        "vcpu-quota: vCPUs per node unknown, so the quota cannot be compared (answered by ec2:DescribeInstanceTypes)"
    ]


def test_a_quota_without_a_value_or_not_returned_is_undetermined_never_ok():
    res = _quota(EC2(), SQ(value=None))
    assert res.quota["status"] == pf.UNKNOWN and res.unknowns[-1].endswith(
        "returned no value (answered by servicequotas:GetServiceQuota)"
    )
    res = _quota(EC2(), SQ(error="NoSuchResourceException"))
    assert res.quota["status"] == pf.UNKNOWN and "not returned by Service Quotas" in res.unknowns[-1]
    with pytest.raises(pf.PreflightError, match="ValidationException"):
        _quota(EC2(), SQ(error="ValidationException"))


def test_running_vcpus_unanswered_keeps_the_quota_value_but_no_verdict():
    res = _quota(EC2(describe_instances=stub.err("UnauthorizedOperation")), SQ(value=500.0))
    assert res.quota["status"] == pf.UNKNOWN and res.quota["value"] == 500 and res.quota["running_vcpus"] is None
    assert len([c for c in res.checks if c["name"] == "vcpu-quota"]) == 1
    assert "running vCPUs in quota" in _rows(res, "vcpu-quota")[0]["detail"]


@pytest.mark.parametrize(
    "error, says",
    [
        (
            ClientError({"Error": {"Code": "Throttled"}, "ResponseMetadata": {"HTTPStatusCode": 503}}, "X"),
            "not answered by the endpoint (Throttled)",
        ),
        (
            ClientError({"Error": {}, "ResponseMetadata": {"HTTPStatusCode": 500}}, "X"),
            "not answered by the endpoint (server error)",
        ),
        (stub.err("InternalError"), "not answered by the endpoint (InternalError)"),
        (aws.ResponseParserError("html"), "not answered by the endpoint (unparseable response)"),
    ],
)
def test_server_errors_and_unparseable_answers_are_unanswered(error, says):
    res = _quota(EC2(describe_instances=error), SQ(value=500.0))
    assert res.status == "undetermined" and res.quota["value"] == 500
    assert _rows(res, "vcpu-quota") == [
        {
            "name": "vcpu-quota",
            "status": "unknown",
            "detail": f"running vCPUs in quota {pf.QUOTA_G_VT} unknown ({says}: ec2:DescribeInstances)",
            "needs": "ec2:DescribeInstances",
        }
    ]


def test_a_client_error_that_is_no_unanswered_question_stops_preflight():
    with pytest.raises(pf.PreflightError, match="AWS API error in Op: InvalidParameterValue"):
        _quota(EC2(describe_instances=stub.err("InvalidParameterValue")), SQ(value=500.0))


# -- conditions only a mutation run found unasserted --

META = {"ResponseMetadata": {"RequestId": "r", "HTTPStatusCode": 200, "HTTPHeaders": {}}}
"""A page as botocore parses an EC2 answer whose list element is absent: the model makes no output member required
and botocore's XML parser sets only the keys of elements present (an empty ``<reservationSet/>`` parses to [])."""


def test_a_quota_service_quotas_denies_is_one_row_naming_the_quota_and_the_action():
    """The row a user reads, and the action to grant: not a second 'returned no value' row."""
    res = _quota(EC2(), SQ(error="AccessDeniedException"))
    assert _rows(res, "vcpu-quota") == [
        {
            "name": "vcpu-quota",
            "status": "unknown",
            "detail": f"quota {pf.QUOTA_G_VT} unknown (denied: servicequotas:GetServiceQuota)",
            "needs": "servicequotas:GetServiceQuota",
        }
    ]
    assert [u for u in res.unknowns if u.startswith("vcpu-quota")] == [
        f"vcpu-quota: quota {pf.QUOTA_G_VT} unknown (denied: servicequotas:GetServiceQuota) "
        "(answered by servicequotas:GetServiceQuota)"
    ]


def test_a_quota_service_quotas_does_not_return_says_where_it_is_answered():
    res = _quota(EC2(), SQ(error="NoSuchResourceException"))
    assert _rows(res, "vcpu-quota") == [
        {
            "name": "vcpu-quota",
            "status": "unknown",
            "detail": f"quota {pf.QUOTA_G_VT} unknown: not returned by Service Quotas",
            "needs": "servicequotas:GetServiceQuota (ServiceCode ec2) on AWS",
        }
    ]


def test_running_vcpus_denied_names_describe_instances_as_the_action():
    ec2 = EC2(describe_instances=stub.err("UnauthorizedOperation"))
    res = _quota(ec2, SQ(value=500.0))
    assert _rows(res, "vcpu-quota") == [
        {
            "name": "vcpu-quota",
            "status": "unknown",
            "detail": f"running vCPUs in quota {pf.QUOTA_G_VT} unknown (denied: ec2:DescribeInstances)",
            "needs": "ec2:DescribeInstances",
        }
    ]


def test_every_running_instance_of_the_quota_counts_after_one_of_another_quota():
    """Two g6.xlarge behind an m7i in the same reservation: 8 running vCPUs make 2 x 48 too much for 100."""
    res = _quota(EC2(["m7i.xlarge", "g6.xlarge", "g6.xlarge"], {"g6.xlarge": 4}), SQ(value=100.0))
    assert res.quota["running_vcpus"] == 8
    assert _rows(res, "vcpu-quota") == [
        {
            "name": "vcpu-quota",
            "status": "failed",
            "detail": f"vCPU quota {pf.QUOTA_G_VT} too small: need 2 x 48 + 8 running = 104 vCPUs, quota is 100",
        }
    ]


def test_a_describe_instances_page_without_reservations_adds_nothing():
    """A page with no Reservations key (the list element absent) is no instance, not a crash."""
    ec2 = EC2(
        types={"g6.xlarge": 4},
        describe_instances=[META, {"Reservations": [{"Instances": [{"InstanceType": "g6.xlarge"}]}]}],
    )
    assert _quota(ec2, SQ(value=500.0)).quota["running_vcpus"] == 4


@pytest.mark.parametrize(
    "answer, row",
    [
        (
            stub.err("DryRunOperation", 412),
            {"name": "placement-group", "status": "ok", "detail": "a cluster placement group may be created (dry run)"},
        ),
        (
            stub.err("PlacementGroupLimitExceeded"),
            {
                "name": "placement-group",
                "status": "failed",
                "detail": "a cluster placement group cannot be created: PlacementGroupLimitExceeded",
            },
        ),
    ],
)
def test_placement_group_rows_read_as_the_user_sees_them(answer, row):
    assert _rows(_preflight(EC2(create_placement_group=answer)), "placement-group") == [row]


def _reservation(ec2, reservation_id=stub.RID, az=None, count=2):
    res = _preflight(ec2, count=count, az=az, reservation_id=reservation_id)
    res.checks = _rows(res, "capacity-reservation") + _rows(res, "capacity-reservations")
    return res


def test_a_named_reservation_denied_names_the_action():
    res = _reservation(EC2(describe_capacity_reservations=stub.err("UnauthorizedOperation")))
    assert res.checks == [
        {
            "name": "capacity-reservation",
            "status": "unknown",
            "detail": f"{stub.RID} unknown (denied: ec2:DescribeCapacityReservations)",
            "needs": "ec2:DescribeCapacityReservations",
        }
    ]


def test_a_named_reservation_missing_or_unfit_is_a_failed_capacity_reservation_row():
    ec2 = EC2(describe_capacity_reservations={"CapacityReservations": []})
    res = _reservation(ec2)
    assert [c for c in ec2.calls if c[0] == "describe_capacity_reservations"] == [
        ("describe_capacity_reservations", {"CapacityReservationIds": [stub.RID]})
    ]
    assert res.checks == [
        {
            "name": "capacity-reservation",
            "status": "failed",
            "detail": f"capacity reservation {stub.RID} not found in us-east-1",
        }
    ]
    res = _reservation(
        EC2(
            describe_capacity_reservations={
                "CapacityReservations": [
                    stub.odcr(InstanceType="p5.48xlarge", AvailableInstanceCount=1, TotalInstanceCount=3)
                ]
            }
        ),
        az="us-east-1a",
    )
    assert res.checks == [
        {
            "name": "capacity-reservation",
            "status": "failed",
            "detail": f"capacity reservation {stub.RID} is for p5.48xlarge, not g6.12xlarge; is in "
            "us-east-1b, not us-east-1a (set availabilityZone us-east-1b); has 1 "
            "instance(s) available, 2 needed",
        }
    ]


def test_active_reservations_listed_across_a_page_without_the_key():
    """The largest active reservation is named (status ok), though one page carries no CapacityReservations key."""
    ec2 = EC2(
        describe_capacity_reservations=[
            META,
            {
                "CapacityReservations": [
                    stub.odcr(AvailableInstanceCount=3, TotalInstanceCount=3),
                    stub.odcr(
                        CapacityReservationId="cr-0fedcba9876543210",
                        AvailabilityZone="us-east-1a",
                        AvailableInstanceCount=1,
                        TotalInstanceCount=3,
                    ),
                ]
            },
        ]
    )
    res = _reservation(ec2, reservation_id=None)
    assert res.checks == [
        {
            "name": "capacity-reservations",
            "status": "ok",
            "detail": f"2 active for g6.12xlarge in us-east-1; the largest, {stub.RID} in us-east-1b, "
            "has 3 available (use it: --capacity-reservation-id)",
        }
    ]


def test_active_reservations_denied_is_an_unknown_row_naming_the_type():
    res = _reservation(EC2(describe_capacity_reservations=stub.err("UnauthorizedOperation")), reservation_id=None)
    assert res.checks == [
        {
            "name": "capacity-reservations",
            "status": "unknown",
            "detail": "capacity reservations for g6.12xlarge unknown (denied: ec2:DescribeCapacityReservations)",
            "needs": "ec2:DescribeCapacityReservations",
        }
    ]


def test_capacity_block_rows_read_as_the_user_sees_them():
    offer = {
        "CapacityBlockOfferingId": "cbr-0123456789abcdef0",
        "InstanceType": "p5.48xlarge",
        "AvailabilityZone": "us-east-1a",
        "InstanceCount": 2,
        "CapacityBlockDurationHours": 24,
        "StartDate": datetime(2026, 12, 7, 11, 30, tzinfo=timezone.utc),
        "UpfrontFee": "2000.00",
        "CurrencyCode": "USD",
    }
    res = _preflight(EC2(describe_capacity_block_offerings={"CapacityBlockOfferings": [offer]}), itype="p5.48xlarge")
    assert _rows(res, "capacity-blocks") == [
        {
            "name": "capacity-blocks",
            "status": "ok",
            "detail": "1 offering(s) of 2 x p5.48xlarge for 24 h in us-east-1; earliest "
            "2026-12-07 11:30:00+00:00 in us-east-1a",
        }
    ]
    res = _preflight(EC2(describe_capacity_block_offerings=stub.err("UnauthorizedOperation")), itype="p5.48xlarge")
    assert _rows(res, "capacity-blocks") == [
        {
            "name": "capacity-blocks",
            "status": "unknown",
            "detail": "Capacity Block offerings for 2 x p5.48xlarge unknown (denied: "
            "ec2:DescribeCapacityBlockOfferings)",
            "needs": "ec2:DescribeCapacityBlockOfferings",
        }
    ]


def test_reservation_az_asks_for_the_reservation_named_and_names_the_action_denied():
    """EC2 answers only the IDs asked for; a caller reads the action to grant from the exception."""
    ec2 = stub.EC2(
        describe_capacity_reservations=lambda CapacityReservationIds: {
            "CapacityReservations": [r for r in [stub.odcr()] if r["CapacityReservationId"] in CapacityReservationIds]
        }
    )
    assert pf.reservation_az(ec2, stub.RID) == "us-east-1b"
    with pytest.raises(pf.Unanswered) as denied:
        pf.reservation_az(stub.EC2(describe_capacity_reservations=stub.err("UnauthorizedOperation")), stub.RID)
    assert denied.value.action == "ec2:DescribeCapacityReservations"
    assert str(denied.value) == "denied: ec2:DescribeCapacityReservations"
