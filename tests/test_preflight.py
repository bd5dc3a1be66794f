"""components.preflight against moto run as a real HTTP server on 127.0.0.1.

moto 5.2.5 limitations handled here:
* Service Quotas only knows ``vpc`` quotas; GetServiceQuota for ``ec2`` answers
  NoSuchResourceException.  Quota values are therefore injected with a
  botocore ``before-call`` handler on the client (the request never leaves the
  client; everything else goes to the emulator).
* An IAM denial is simulated the same way (handler raises AccessDenied).
"""

from __future__ import annotations

import os
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError

ROOT = Path(__file__).resolve().parent.parent

from ray_efa_eks.components import preflight  # noqa: E402
from ray_efa_eks.components.preflight import PreflightError, recommend_az, run_preflight  # noqa: E402

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
        "service-quotas": boto3.client(
            "service-quotas", region_name=region, endpoint_url=endpoint
        ),
    }


def _stub_quota(sq_client, value):
    def handler(**kwargs):
        resp = AWSResponse("http://stub", 200, {}, None)
        return resp, {"Quota": {"ServiceCode": "ec2", "QuotaCode": "x", "Value": value}}

    sq_client.meta.events.register(
        "before-call.service-quotas.GetServiceQuota", handler
    )


def _deny_quota(sq_client):
    def handler(**kwargs):
        raise ClientError(
            {"Error": {"Code": "AccessDeniedException", "Message": "denied"}},
            "GetServiceQuota",
        )

    sq_client.meta.events.register(
        "before-call.service-quotas.GetServiceQuota", handler
    )


def _offered(ec2, itype):
    pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
        LocationType="availability-zone",
        Filters=[{"Name": "instance-type", "Values": [itype]}],
    )
    return {o["Location"] for p in pages for o in p["InstanceTypeOfferings"]}


def test_recommended_az_offers_type(endpoint):
    c = _clients(endpoint)
    _stub_quota(c["service-quotas"], 1000.0)
    t0 = time.monotonic()
    res = run_preflight(c, "g6.12xlarge", 2)
    elapsed = time.monotonic() - t0
    assert elapsed < 5, elapsed
    offered = _offered(c["ec2"], "g6.12xlarge")
    assert offered
    assert res.recommended_az == sorted(offered)[0]
    assert res.recommended_az == recommend_az(c["ec2"], "g6.12xlarge")
    assert {z for z, r in res.azs.items() if r["offered"]} == offered
    assert res.instance["gpus"] == 4 and res.instance["vcpus"] == 48
    assert res.instance["efa_supported"] is True
    assert res.quota["status"] == "ok" and res.quota["code"] == "L-DB2E81BA"
    assert res.ok, res.problems
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
    ec2.run_instances(ImageId="ami-12c6146b", InstanceType="g5.xlarge",
                      MinCount=2, MaxCount=2)  # 2 x 4 vCPUs, same G quota
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
    assert not res.ok
    assert any("does not support EFA" in p for p in res.problems)
    res2 = run_preflight(c, "g4dn.xlarge", 2, efa=False)
    assert res2.ok, res2.problems


def test_denied_quota_is_unknown_not_ok(endpoint):
    c = _clients(endpoint)
    _deny_quota(c["service-quotas"])
    res = run_preflight(c, "g6.12xlarge", 2)
    assert res.quota["status"] == "unknown"
    assert any("servicequotas:GetServiceQuota" in w for w in res.warnings)
    assert res.ok  # documented choice: unknown quota is a warning


def test_moto_missing_ec2_quota_is_unknown(endpoint):
    res = run_preflight(_clients(endpoint), "g6.12xlarge", 2)
    assert res.quota["status"] == "unknown"
    assert res.quota["value"] is None


def test_bad_endpoint_raises_preflight_error():
    port = _free_port()
    from botocore.config import Config

    cfg = Config(connect_timeout=1, retries={"max_attempts": 1})
    c = {
        "ec2": boto3.client("ec2", region_name="us-east-1",
                            endpoint_url=f"http://127.0.0.1:{port}", config=cfg),
        "service-quotas": boto3.client("service-quotas", region_name="us-east-1",
                                       endpoint_url=f"http://127.0.0.1:{port}",
                                       config=cfg),
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
        [sys.executable, "-m", "ray_efa_eks.components.preflight", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )


def test_cli_json_exit_codes(endpoint):
    # moto has no ec2 quota -> warning only -> exit 0
    p = _cli("--region", "us-east-1", "--json", "--endpoint-url", endpoint)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["ok"] is True and out["recommended_az"]
    assert {"ok", "recommended_az", "azs", "quota", "problems"} <= set(out)
    p = _cli("--region", "us-east-1", "--instance-type", "g4dn.xlarge", "--json",
             "--endpoint-url", endpoint)
    assert p.returncode == 1, p.stderr
    out = json.loads(p.stdout)
    assert out["ok"] is False and out["problems"]
    p = _cli("--region", "us-east-1", "--instance-type", "g4dn.xlarge", "--no-efa",
             "--endpoint-url", endpoint)
    assert p.returncode == 0, p.stderr
    assert "RESULT: OK" in p.stdout


def test_cli_bad_endpoint_exit_2():
    p = _cli("--region", "us-east-1", "--json", "--endpoint-url",
             f"http://127.0.0.1:{_free_port()}")
    assert p.returncode == 2
    assert "preflight error" in p.stderr
    assert "Traceback" not in p.stderr
    assert p.stdout == ""


def _pg_error(ec2_client, code):
    def handler(**kwargs):
        raise ClientError({"Error": {"Code": code, "Message": code}},
                          "CreatePlacementGroup")

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
    assert any("ec2:CreatePlacementGroup" in w for w in res.warnings)
