"""tools.preflight against moto run as a real HTTP server on 127.0.0.1.

moto 5.2.5 limitations handled here:
* Service Quotas only knows ``vpc`` quotas; GetServiceQuota for ``ec2`` answers
  NoSuchResourceException.  Quota values are therefore injected with a
  botocore ``before-call`` handler on the client (the request never leaves the
  client; everything else goes to the emulator).
* moto implements neither CreatePlacementGroup, DescribeCapacityReservations nor
  DescribeCapacityBlockOfferings (it answers HTTP 500): their answers are stubbed the
  same way, in AWS's response shapes; unstubbed, preflight reports them unknown.
* An IAM denial is simulated the same way (handler raises AccessDenied).
"""

from __future__ import annotations

import os
import json
import socket
import subprocess
import sys
from pathlib import Path

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError

ROOT = Path(__file__).resolve().parents[2]

from ray_efa_eks.tools import preflight  # noqa: E402
from ray_efa_eks.tools.preflight import PreflightError, format_table, recommend_az, run_preflight  # noqa: E402

FAKE_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_SECURITY_TOKEN": "testing",
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_CONFIG_FILE": "/dev/null",
    "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture(scope="module", autouse=True)
def fake_env():
    mp = pytest.MonkeyPatch()
    for k, v in FAKE_ENV.items():
        mp.setenv(k, v)
    mp.delenv("AWS_PROFILE", raising=False)
    yield
    mp.undo()


@pytest.fixture(scope="module")
def endpoint(fake_env):
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def _clients(endpoint, region="us-east-1"):
    return {
        "ec2": boto3.client("ec2", region_name=region, endpoint_url=endpoint),
        "service-quotas": boto3.client("service-quotas", region_name=region, endpoint_url=endpoint),
    }


def _stub_quota(sq_client, value):
    def handler(**kwargs):
        resp = AWSResponse("http://stub", 200, {}, None)
        return resp, {"Quota": {"ServiceCode": "ec2", "QuotaCode": "x", "Value": value}}

    sq_client.meta.events.register("before-call.service-quotas.GetServiceQuota", handler)


def _deny_quota(sq_client):
    def handler(**kwargs):
        raise ClientError(
            {"Error": {"Code": "AccessDeniedException", "Message": "denied"}},
            "GetServiceQuota",
        )

    sq_client.meta.events.register("before-call.service-quotas.GetServiceQuota", handler)


def _stub_ec2(ec2_client, operation, parsed=None, error=None):
    """Answer ``operation`` (e.g. DescribeCapacityReservations) at the client: ``parsed`` or a ClientError code."""

    def handler(**kwargs):
        if error:
            raise ClientError({"Error": {"Code": error, "Message": error}}, operation)
        return AWSResponse("http://stub", 200, {}, None), parsed

    ec2_client.meta.events.register(f"before-call.ec2.{operation}", handler)


def _answer_all(c, quota=1000.0, reservations=(), offerings=(), offerings_error=None):
    """Every check answered: quota, placement dry run, reservations and Capacity Block offerings."""
    if quota is not None:
        _stub_quota(c["service-quotas"], quota)
    _stub_ec2(c["ec2"], "CreatePlacementGroup", error="DryRunOperation")
    _stub_ec2(c["ec2"], "DescribeCapacityReservations", {"CapacityReservations": list(reservations)})
    _stub_ec2(
        c["ec2"], "DescribeCapacityBlockOfferings", {"CapacityBlockOfferings": list(offerings)}, error=offerings_error
    )
    return c


def _reservation(rid="cr-0123456789abcdef0", az="us-east-1b", itype="g6.12xlarge", available=2, state="active"):
    return {
        "CapacityReservationId": rid,
        "InstanceType": itype,
        "AvailabilityZone": az,
        "State": state,
        "AvailableInstanceCount": available,
        "TotalInstanceCount": available,
        "InstancePlatform": "Linux/UNIX",
    }


def _offered(ec2, itype):
    pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
        LocationType="availability-zone",
        Filters=[{"Name": "instance-type", "Values": [itype]}],
    )
    return {o["Location"] for p in pages for o in p["InstanceTypeOfferings"]}


def test_recommended_az_offers_type(endpoint):
    c = _answer_all(_clients(endpoint))
    res = run_preflight(c, "g6.12xlarge", 2)
    offered = _offered(c["ec2"], "g6.12xlarge")
    assert offered
    assert res.recommended_az == sorted(offered)[0]
    assert res.recommended_az == recommend_az(c["ec2"], "g6.12xlarge")
    assert {z for z, r in res.azs.items() if r["offered"]} == offered
    assert res.instance["gpus"] == 4 and res.instance["vcpus"] == 48
    assert res.instance["efa_supported"] is True
    assert res.quota["status"] == "ok" and res.quota["code"] == "L-DB2E81BA"
    assert res.ok and res.status == "ok" and res.exit_code == 0, res.checks
    assert {c["name"] for c in res.checks} == {
        "offerings",
        "instance-type",
        "vcpu-quota",
        "placement-group",
        "capacity-reservations",
        "capacity-blocks",
    }
    d = res.to_dict()
    json.dumps(d)
    assert d["ok"] is True and d["recommended_az"] == res.recommended_az


def test_requested_az_not_offered(endpoint):
    c = _clients(endpoint)
    _stub_quota(c["service-quotas"], 1000.0)
    res = run_preflight(c, "g6.12xlarge", 2, az="us-east-1-nope")
    assert not res.ok
    assert any("not offered in us-east-1-nope" in p for p in res.problems)


def test_type_not_offered_in_region(endpoint):
    # moto's data lists hpc7g.16xlarge in us-east-1 but not in us-west-2
    assert _offered(_clients(endpoint)["ec2"], "hpc7g.16xlarge")
    c = _clients(endpoint, "us-west-2")
    assert not _offered(c["ec2"], "hpc7g.16xlarge")
    res = run_preflight(c, "hpc7g.16xlarge", 2)
    assert not res.ok
    assert res.recommended_az is None
    assert any("not offered in any AZ of us-west-2" in p for p in res.problems)
    assert recommend_az(c["ec2"], "hpc7g.16xlarge") is None


def test_quota_too_small_with_running_instances(endpoint):
    c = _clients(endpoint, "us-west-2")
    ec2 = c["ec2"]
    ec2.run_instances(
        ImageId="ami-12c6146b", InstanceType="g5.xlarge", MinCount=2, MaxCount=2
    )  # 2 x 4 vCPUs, same G quota
    _stub_quota(c["service-quotas"], 100.0)
    res = run_preflight(c, "g6.12xlarge", 2)  # 96 + 8 = 104 > 100
    assert not res.ok
    assert res.quota["status"] == "too_small"
    assert res.quota["running_vcpus"] == 8
    assert res.quota["required_vcpus"] == 104
    assert any("104" in p and "100" in p for p in res.problems)


def test_non_efa_type_with_efa_fails(endpoint):
    c = _clients(endpoint)
    _stub_quota(c["service-quotas"], 1000.0)
    res = run_preflight(c, "g4dn.xlarge", 2, efa=True)
    assert not res.ok and res.exit_code == 1  # a failure outranks the unknowns
    assert any("does not support EFA" in p for p in res.problems)
    res2 = run_preflight(_answer_all(_clients(endpoint)), "g4dn.xlarge", 2, efa=False)
    assert res2.ok, res2.checks


def test_denied_quota_is_undetermined_not_ok(endpoint):
    c = _answer_all(_clients(endpoint), quota=None)
    _deny_quota(c["service-quotas"])
    res = run_preflight(c, "g6.12xlarge", 2)
    assert res.quota["status"] == "unknown"
    assert not res.ok and res.status == "undetermined" and res.exit_code == 2
    (row,) = [r for r in res.checks if r["status"] == "unknown"]
    assert row["name"] == "vcpu-quota" and row["needs"] == "servicequotas:GetServiceQuota"
    assert "RESULT: UNDETERMINED" in preflight.format_table(res) and "RESULT: OK" not in preflight.format_table(res)


def test_unknown_quota_and_unknown_placement_never_print_ok(endpoint):
    """The issue's case: moto answers neither the ec2 quota nor the placement dry run."""
    res = run_preflight(_clients(endpoint), "g6.12xlarge", 2)
    assert res.quota["status"] == "unknown" and res.quota["value"] is None
    unknown = {r["name"]: r["needs"] for r in res.checks if r["status"] == "unknown"}
    assert unknown == {
        "vcpu-quota": "servicequotas:GetServiceQuota (ServiceCode ec2) on AWS",
        "placement-group": "ec2:CreatePlacementGroup",
        "capacity-reservations": "ec2:DescribeCapacityReservations",
    }
    assert not res.ok and res.exit_code == 2


def test_capacity_reservation_checked_and_its_az_recommended(endpoint):
    c = _answer_all(_clients(endpoint), reservations=[_reservation(az="us-east-1b")])
    assert preflight.reservation_az(c["ec2"], "cr-0123456789abcdef0") == "us-east-1b"
    res = run_preflight(c, "g6.12xlarge", 2, capacity_reservation_id="cr-0123456789abcdef0")
    assert res.ok, res.checks
    assert res.recommended_az == "us-east-1b" and res.capacity_reservations["availability_zone"] == "us-east-1b"


@pytest.mark.parametrize(
    "reservation,az,message",
    [
        (
            _reservation(az="us-east-1b"),
            "us-east-1a",
            "is in us-east-1b, not us-east-1a (set availabilityZone us-east-1b)",
        ),
        (_reservation(available=1), None, "has 1 instance(s) available, 2 needed"),
        (_reservation(itype="p5.48xlarge"), None, "is for p5.48xlarge, not g6.12xlarge"),
        (_reservation(state="expired"), None, "is expired, not active"),
    ],
)
def test_capacity_reservation_that_cannot_serve_fails(endpoint, reservation, az, message):
    c = _answer_all(_clients(endpoint), reservations=[reservation])
    res = run_preflight(c, "g6.12xlarge", 2, az=az, capacity_reservation_id="cr-0123456789abcdef0")
    assert res.exit_code == 1 and any(message in p for p in res.problems), res.problems


def _block(state, start="2026-12-20T11:30:00Z"):
    return {
        **_reservation(itype="p5.48xlarge", az="us-east-1a", available=0, state=state),
        "ReservationType": "capacity-block",
        "TotalInstanceCount": 2,
        "StartDate": start,
    }


def test_a_scheduled_capacity_block_is_not_a_failure_and_says_when_it_starts(endpoint):
    """EKS accepts a node group on a block before it starts (capacity-blocks-mng); its instances come at the start."""
    c = _answer_all(_clients(endpoint), reservations=[_block("scheduled")])
    res = run_preflight(c, "p5.48xlarge", 2, capacity_reservation_id="cr-0123456789abcdef0")
    row = next(r for r in res.checks if r["name"] == "capacity-reservation")
    assert (
        row["status"] == "ok"
        and "is scheduled: 2 x p5.48xlarge in us-east-1a from 2026-12-20T11:30:00Z" in row["detail"]
    ), row
    assert any("starts 2026-12-20T11:30:00Z: deploy with gpuNodeCount 0" in w for w in res.warnings)
    assert res.recommended_az == "us-east-1a" and res.exit_code != 1


def test_a_payment_failed_capacity_block_fails(endpoint):
    c = _answer_all(_clients(endpoint), reservations=[_block("payment-failed")])
    res = run_preflight(c, "p5.48xlarge", 2, capacity_reservation_id="cr-0123456789abcdef0")
    assert res.exit_code == 1 and any("is payment-failed: EC2 never starts it" in p for p in res.problems)


def test_capacity_block_offerings_follow_next_token():
    """Every page of DescribeCapacityBlockOfferings is read (botocore Stubber: EC2's own request/response shapes)."""
    from botocore.stub import Stubber

    ec2 = boto3.client("ec2", region_name="us-east-1")
    offer = {
        "CapacityBlockOfferingId": "cb-0123456789abcdef0",
        "InstanceType": "p5.48xlarge",
        "AvailabilityZone": "us-east-1a",
        "InstanceCount": 2,
        "CapacityBlockDurationHours": 24,
        "UpfrontFee": "2641.92",
        "CurrencyCode": "USD",
    }
    want = {"InstanceType": "p5.48xlarge", "InstanceCount": 2, "CapacityDurationHours": 24}
    with Stubber(ec2) as stub:
        stub.add_response(
            "describe_capacity_block_offerings", {"CapacityBlockOfferings": [offer], "NextToken": "page-2"}, want
        )
        stub.add_response(
            "describe_capacity_block_offerings",
            {
                "CapacityBlockOfferings": [
                    {**offer, "CapacityBlockOfferingId": "cb-0fedcba9876543210", "AvailabilityZone": "us-east-1b"}
                ]
            },
            {**want, "NextToken": "page-2"},
        )
        found = preflight.capacity_block_offerings(ec2, "p5.48xlarge", 2)
        stub.assert_no_pending_responses()
    assert [o["AvailabilityZone"] for o in found] == ["us-east-1a", "us-east-1b"]


def test_capacity_reservation_not_found_or_unanswered(endpoint):
    c = _answer_all(_clients(endpoint))
    _stub_ec2(c["ec2"], "DescribeCapacityReservations", error="InvalidCapacityReservationId.NotFound")
    res = run_preflight(c, "g6.12xlarge", 2, capacity_reservation_id="cr-0123456789abcdef0")
    assert res.exit_code == 1 and any("not found in us-east-1" in p for p in res.problems)
    c = _clients(endpoint)  # moto: not implemented
    with pytest.raises(preflight.Unanswered, match="ec2:DescribeCapacityReservations"):
        preflight.reservation_az(c["ec2"], "cr-0123456789abcdef0")


def test_capacity_block_offerings_for_types_sold_as_blocks(endpoint):
    offer = {
        "CapacityBlockOfferingId": "cb-0123456789abcdef0",
        "InstanceType": "p5.48xlarge",
        "AvailabilityZone": "us-east-1a",
        "InstanceCount": 2,
        "StartDate": "2026-12-10T11:30:00Z",
        "CapacityBlockDurationHours": 24,
        "UpfrontFee": "2641.92",
        "CurrencyCode": "USD",
    }
    c = _answer_all(_clients(endpoint), offerings=[offer])
    res = run_preflight(c, "p5.48xlarge", 2)
    row = next(r for r in res.checks if r["name"] == "capacity-blocks")
    assert row["status"] == "ok" and "1 offering(s) of 2 x p5.48xlarge" in row["detail"], row
    c = _answer_all(_clients(endpoint), offerings_error="UnauthorizedOperation")
    res = run_preflight(c, "p5.48xlarge", 2)
    row = next(r for r in res.checks if r["name"] == "capacity-blocks")
    assert row["status"] == "unknown" and row["needs"] == "ec2:DescribeCapacityBlockOfferings"
    assert res.exit_code == 2


def test_bad_endpoint_raises_preflight_error():
    port = _free_port()
    from botocore.config import Config

    cfg = Config(connect_timeout=1, retries={"max_attempts": 1})
    c = {
        "ec2": boto3.client("ec2", region_name="us-east-1", endpoint_url=f"http://127.0.0.1:{port}", config=cfg),
        "service-quotas": boto3.client(
            "service-quotas", region_name="us-east-1", endpoint_url=f"http://127.0.0.1:{port}", config=cfg
        ),
    }
    with pytest.raises(PreflightError):
        run_preflight(c, "g6.12xlarge", 2)


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _cli(*args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(FAKE_ENV)
    return subprocess.run(
        [sys.executable, "-m", "ray_efa_eks.tools.preflight", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_json_exit_codes(endpoint):
    # moto answers no ec2 quota, placement dry run or reservations -> undetermined -> exit 2, never OK
    p = _cli("--region", "us-east-1", "--json", "--endpoint-url", endpoint)
    assert p.returncode == 2, p.stderr
    out = json.loads(p.stdout)
    assert out["ok"] is False and out["status"] == "undetermined" and out["recommended_az"]
    assert {"ok", "recommended_az", "azs", "quota", "problems", "unknowns", "checks"} <= set(out)
    assert any("servicequotas:GetServiceQuota" in u for u in out["unknowns"])
    p = _cli("--region", "us-east-1", "--instance-type", "g4dn.xlarge", "--json", "--endpoint-url", endpoint)
    assert p.returncode == 1, p.stderr
    out = json.loads(p.stdout)
    assert out["ok"] is False and out["problems"]
    p = _cli("--region", "us-east-1", "--instance-type", "g4dn.xlarge", "--no-efa", "--endpoint-url", endpoint)
    assert p.returncode == 2, p.stderr
    assert "RESULT: UNDETERMINED" in p.stdout and "RESULT: OK" not in p.stdout
    # without EFA the stack makes no placement group, so its dry run is not asked (moto does not implement it)
    assert "ec2:CreatePlacementGroup" not in p.stdout
    assert [ln.split(None, 2)[1:] for ln in p.stdout.splitlines() if ln.startswith("placement-group ")] == [
        ["OK", "not needed: the stack creates no cluster placement group with no EFA"]
    ]


def test_cli_exit_0_only_when_every_check_answered(endpoint, monkeypatch, capsys):
    real_client = boto3.session.Session.client

    def client(self, name, *a, **kw):
        c = real_client(self, name, *a, **kw)
        if name == "ec2":
            _answer_all({"ec2": c, "service-quotas": real_client(self, "service-quotas", *a, **kw)})
        else:
            _stub_quota(c, 1000.0)
        return c

    monkeypatch.setattr(boto3.session.Session, "client", client)
    assert preflight.main(["--region", "us-east-1", "--endpoint-url", endpoint]) == 0
    assert "RESULT: OK (every check passed)" in capsys.readouterr().out


@pytest.mark.parametrize("args", [["--count", "0"], ["--count", "-1"], ["--count", "two"], ["--bogus"]])
def test_cli_usage_errors_exit_64(args):
    p = _cli("--region", "us-east-1", *args)
    assert p.returncode == 64, (p.returncode, p.stderr)
    assert "usage:" in p.stderr and "Traceback" not in p.stderr
    with pytest.raises(ValueError, match="count must be >= 1"):
        run_preflight({"ec2": None, "service-quotas": None}, "g6.12xlarge", 0)


def test_cli_bad_endpoint_exit_2():
    p = _cli("--region", "us-east-1", "--json", "--endpoint-url", f"http://127.0.0.1:{_free_port()}")
    assert p.returncode == 2
    assert "preflight error" in p.stderr
    assert "Traceback" not in p.stderr
    assert p.stdout == ""


def _pg_error(ec2_client, code):
    def handler(**kwargs):
        raise ClientError({"Error": {"Code": code, "Message": code}}, "CreatePlacementGroup")

    ec2_client.meta.events.register("before-call.ec2.CreatePlacementGroup", handler)


def test_placement_group_dry_run_ok_and_denied(endpoint):
    # moto does not implement CreatePlacementGroup; real AWS answers DryRunOperation
    c = _clients(endpoint)
    _pg_error(c["ec2"], "DryRunOperation")
    res = run_preflight(c, "g6.12xlarge", 2)
    assert res.placement_group["status"] == "ok"
    c = _clients(endpoint)
    _pg_error(c["ec2"], "UnauthorizedOperation")
    res = run_preflight(c, "g6.12xlarge", 2)
    assert res.placement_group["status"] == "unknown"
    assert any("ec2:CreatePlacementGroup" in u for u in res.unknowns) and res.exit_code == 2


def test_preflight_names_each_az_zone_id_and_where_eks_refuses_the_cluster(endpoint):
    """moto's account maps us-east-1e to use1-az3, a zone ID EKS refuses for cluster subnets (EKS user guide,
    network-reqs): preflight says so by zone ID, and the names map to IDs that are not the names."""
    c = _answer_all(_clients(endpoint))
    res = run_preflight(c, "p5.48xlarge", 2, az="us-east-1e")
    assert res.azs["us-east-1e"]["zone_id"] == "use1-az3" and res.azs["us-east-1e"]["eks_cluster_subnets"] is False
    assert res.azs["us-east-1a"]["zone_id"] == "use1-az6" and res.azs["us-east-1a"]["eks_cluster_subnets"] is True
    assert [w for w in res.warnings if w.startswith("us-east-1e is zone ID use1-az3")]
    table = format_table(res)
    assert any(ln.split()[:2] == ["us-east-1e", "use1-az3"] and "EKS refuses" in ln for ln in table.splitlines())
    ok = run_preflight(c, "p5.48xlarge", 2, az="us-east-1a")
    assert not [w for w in ok.warnings if "zone ID" in w]
