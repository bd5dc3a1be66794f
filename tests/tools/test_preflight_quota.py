"""Preflight's quota arithmetic and its unanswered paths, with stand-in EC2 / Service Quotas clients (issue 40):
need = count x vCPUs per node + vCPUs already running in the same quota; ok only when need <= quota."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from ray_efa_eks.tools import preflight as pf


class Pages:
    def __init__(self, pages):
        self.pages = pages

    def paginate(self, **kw):
        return iter(self.pages)


class EC2:
    def __init__(self, instances=(), types=None):
        self.instances, self.types = list(instances), types or {}

    def get_paginator(self, name):
        if name == "describe_instances":
            return Pages([{"Reservations": [{"Instances": [{"InstanceType": t} for t in self.instances]}]}])
        return Pages([{"InstanceTypes": [{"InstanceType": t, "VCpuInfo": {"DefaultVCpus": n}}
                                         for t, n in self.types.items()]}])


class SQ:
    def __init__(self, value=None, error=None):
        self.value, self.error = value, error

    def get_service_quota(self, **kw):
        if self.error:
            raise ClientError({"Error": {"Code": self.error, "Message": "x"}}, "GetServiceQuota")
        return {"Quota": {"Value": self.value}} if self.value is not None else {"Quota": {}}


def _quota(ec2, sq, itype="g6.12xlarge", count=2, vcpus=48):
    res = pf.PreflightResult(region="us-east-1", instance_type=itype, count=count, efa=True)
    pf._check_quota(res, ec2, sq, itype, count, vcpus)
    return res


@pytest.mark.parametrize("itype, code", [("g6.12xlarge", pf.QUOTA_G_VT), ("gr6.4xlarge", pf.QUOTA_G_VT),
                                         ("vt1.3xlarge", pf.QUOTA_G_VT), ("p5.48xlarge", pf.QUOTA_P),
                                         ("m7i.xlarge", pf.QUOTA_STANDARD), ("z1d.metal", pf.QUOTA_STANDARD),
                                         ("trn1.32xlarge", None),  # Trn, Inf, X: quotas of their own
                                         ("inf2.xlarge", None), ("x2idn.32xlarge", None),
                                         ("u-6tb1.metal", None), ("1x.large", None)])
def test_quota_code_per_family(itype, code):
    assert pf.quota_code_for(itype) == code


def test_need_equal_to_the_quota_is_ok_one_more_vcpu_is_not():
    running = EC2(["g6.xlarge", "m7i.xlarge"], {"g6.xlarge": 4})  # the m7i counts against another quota
    res = _quota(running, SQ(value=100.0))
    assert res.quota == {"code": pf.QUOTA_G_VT, "status": "ok", "value": 100, "running_vcpus": 4,
                         "required_vcpus": 100}
    assert res.checks[-1]["status"] == pf.OK
    res = _quota(running, SQ(value=99.0))
    assert res.quota["status"] == "too_small" and res.problems == [
        f"vCPU quota {pf.QUOTA_G_VT} too small: need 2 x 48 + 4 running = 100 vCPUs, quota is 99"]


def test_unknown_family_or_vcpus_is_undetermined():
    res = _quota(EC2(), SQ(value=1000.0), itype="x2idn.32xlarge")
    assert res.quota["status"] == pf.UNKNOWN and res.unknowns[0].startswith("vcpu-quota: no On-Demand vCPU quota code")
    res = _quota(EC2(), SQ(value=1000.0), vcpus=None)
    assert res.unknowns == ["vcpu-quota: vCPUs per node unknown, so the quota cannot be compared "
                            "(answered by ec2:DescribeInstanceTypes)"]


def test_a_quota_without_a_value_or_not_returned_is_undetermined_never_ok():
    res = _quota(EC2(), SQ(value=None))
    assert res.quota["status"] == pf.UNKNOWN and res.unknowns[0].endswith("returned no value (answered by "
                                                                           "servicequotas:GetServiceQuota)")
    res = _quota(EC2(), SQ(error="NoSuchResourceException"))
    assert res.quota["status"] == pf.UNKNOWN and "not returned by Service Quotas" in res.unknowns[0]
    with pytest.raises(ClientError):
        _quota(EC2(), SQ(error="ValidationException"))


def test_running_vcpus_unanswered_keeps_the_quota_value_but_no_verdict(monkeypatch):
    def denied(*a):
        raise pf.Unanswered("ec2:DescribeInstances", "denied")
    monkeypatch.setattr(pf, "_running_vcpus", denied)
    res = _quota(EC2(), SQ(value=500.0))
    assert res.quota["status"] == pf.UNKNOWN and res.quota["value"] == 500 and res.quota["running_vcpus"] is None
    assert len([c for c in res.checks if c["name"] == "vcpu-quota"]) == 1
    assert "running vCPUs in quota" in res.unknowns[0]


def test_server_errors_and_unparseable_answers_are_unanswered():
    def server(**kw):
        raise ClientError({"Error": {"Code": "Throttled"}, "ResponseMetadata": {"HTTPStatusCode": 503}}, "X")
    with pytest.raises(pf.Unanswered, match="not answered by the endpoint \\(Throttled\\)"):
        pf._ask("ec2:X", server)

    def unparseable(**kw):
        raise pf.ResponseParserError("html")
    with pytest.raises(pf.Unanswered, match="unparseable response"):
        pf._ask("ec2:X", unparseable)
