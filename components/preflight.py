"""Capacity preflight for the multi-node EFA GPU node group (issue 7).

Usage::

    python -m ray_efa_eks.components.preflight [--region R] [--instance-type T] [--count N]
        [--az AZ] [--efa/--no-efa] [--json] [--endpoint-url URL]

Checks, with boto3 only (this module imports nothing from Pulumi):

* per AZ whether EC2 offers the type (DescribeInstanceTypeOfferings,
  LocationType=availability-zone, paginated);
* the type's GPUs, vCPUs, EFA support, network cards (DescribeInstanceTypes);
* the running On-Demand vCPU quota of its family (Service Quotas
  GetServiceQuota, ServiceCode ``ec2``: ``L-DB2E81BA`` G/VT, ``L-417A185B`` P,
  ``L-1216C47A`` standard A/C/D/H/I/M/R/T/Z) against
  ``count * vCPUs + vCPUs of running/pending instances in the same quota``
  (DescribeInstances, paginated);
* whether a cluster placement group could be created (CreatePlacementGroup
  with DryRun=True: ``DryRunOperation`` means ok).

Result semantics (the decision asked for in the issue):

* ``problems`` are definite failures -> ``ok`` is false, exit 1: type not
  offered anywhere / not in the requested AZ, quota too small (numbers given),
  EFA requested but the type lacks EFA, a G/P type without GPUs, an unknown
  instance type, or the offering/type lookups themselves being denied (then
  nothing can be recommended).
* ``warnings`` are things that could not be verified: a denied API
  (AccessDenied / UnauthorizedOperation) or a quota that Service Quotas does not
  return. The row is reported as ``"unknown"`` with the IAM action named (e.g.
  ``servicequotas:GetServiceQuota``); it is *never* reported as ok. Warnings
  alone do not make ``ok`` false (exit 0), because an unverifiable quota is
  common for least-privilege deploy roles and blocking on it is too strict.
* credentials, endpoint and other API errors -> exit 2 with a one-line message.

``run_preflight`` is pure (no printing) and ``recommend_az`` can be reused by
the Pulumi program to pick the AZ.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

import boto3
import botocore.exceptions
from botocore.config import Config
from botocore.parsers import ResponseParserError

DENIED_CODES = {
    "AccessDenied",
    "AccessDeniedException",
    "UnauthorizedOperation",
    "UnauthorizedException",
}

QUOTA_G_VT = "L-DB2E81BA"
QUOTA_P = "L-417A185B"
QUOTA_STANDARD = "L-1216C47A"


class PreflightError(Exception):
    """Credentials, endpoint or unexpected API error (CLI exit code 2)."""


def quota_code_for(instance_type: str) -> str | None:
    """On-Demand vCPU quota code of the family of ``instance_type``, or None."""
    m = re.match(r"[a-z]+", instance_type.split(".")[0].lower())
    prefix = m.group(0) if m else ""
    if prefix in ("g", "vt"):
        return QUOTA_G_VT
    if prefix == "p":
        return QUOTA_P
    if prefix in tuple("acdhimrtz"):
        return QUOTA_STANDARD
    return None


@dataclass
class PreflightResult:
    region: str | None
    instance_type: str
    count: int
    efa: bool
    ok: bool = False
    recommended_az: str | None = None
    azs: dict[str, dict[str, Any]] = field(default_factory=dict)
    instance: dict[str, Any] = field(default_factory=dict)
    quota: dict[str, Any] = field(default_factory=dict)
    placement_group: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _code(err: botocore.exceptions.ClientError) -> str:
    return err.response.get("Error", {}).get("Code", "")


def _is_denied(err: botocore.exceptions.ClientError) -> bool:
    return _code(err) in DENIED_CODES


def _clients(session_or_clients: Any) -> tuple[Any, Any]:
    """Accept a boto3 Session or a dict {"ec2": client, "service-quotas": client}."""
    if isinstance(session_or_clients, dict):
        ec2 = session_or_clients["ec2"]
        sq = session_or_clients.get("service-quotas") or session_or_clients.get(
            "servicequotas"
        )
        return ec2, sq
    return (
        session_or_clients.client("ec2"),
        session_or_clients.client("service-quotas"),
    )


def offered_azs(ec2_client: Any, instance_type: str) -> list[str]:
    """Sorted AZ names where EC2 offers ``instance_type``."""
    pages = ec2_client.get_paginator("describe_instance_type_offerings").paginate(
        LocationType="availability-zone",
        Filters=[{"Name": "instance-type", "Values": [instance_type]}],
    )
    azs = {
        o["Location"]
        for page in pages
        for o in page.get("InstanceTypeOfferings", [])
        if o.get("InstanceType") == instance_type
    }
    return sorted(azs)


def all_azs(ec2_client: Any) -> list[str]:
    resp = ec2_client.describe_availability_zones(
        Filters=[{"Name": "zone-type", "Values": ["availability-zone"]}]
    )
    return sorted(z["ZoneName"] for z in resp.get("AvailabilityZones", []))


def recommend_az(ec2_client: Any, instance_type: str) -> str | None:
    """First AZ (sorted by name) that offers ``instance_type``, or None."""
    azs = offered_azs(ec2_client, instance_type)
    return azs[0] if azs else None


def _describe_types(ec2_client: Any, types: list[str]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    types = sorted(set(types))
    for i in range(0, len(types), 100):
        pages = ec2_client.get_paginator("describe_instance_types").paginate(
            InstanceTypes=types[i : i + 100]
        )
        for page in pages:
            for t in page.get("InstanceTypes", []):
                out[t["InstanceType"]] = t
    return out


def _running_vcpus(ec2_client: Any, quota_code: str) -> int:
    pages = ec2_client.get_paginator("describe_instances").paginate(
        Filters=[{"Name": "instance-state-name", "Values": ["running", "pending"]}]
    )
    counts: dict[str, int] = {}
    explicit = 0
    for page in pages:
        for res in page.get("Reservations", []):
            for inst in res.get("Instances", []):
                itype = inst.get("InstanceType", "")
                if quota_code_for(itype) != quota_code:
                    continue
                counts[itype] = counts.get(itype, 0) + 1
    if not counts:
        return 0
    info = _describe_types(ec2_client, list(counts))
    for itype, n in counts.items():
        vcpus = info.get(itype, {}).get("VCpuInfo", {}).get("DefaultVCpus", 0)
        explicit += n * int(vcpus)
    return explicit


def run_preflight(
    session_or_clients: Any,
    instance_type: str,
    count: int,
    az: str | None = None,
    efa: bool = True,
) -> PreflightResult:
    """Run all checks; raises PreflightError for credential/endpoint/API errors."""
    try:
        return _run(session_or_clients, instance_type, count, az, efa)
    except botocore.exceptions.NoCredentialsError as e:
        raise PreflightError(f"no AWS credentials: {e}") from None
    except botocore.exceptions.EndpointConnectionError as e:
        raise PreflightError(f"cannot reach AWS endpoint: {e}") from None
    except botocore.exceptions.ClientError as e:
        op = getattr(e, "operation_name", "?")
        raise PreflightError(
            f"AWS API error in {op}: {_code(e)}: "
            f"{e.response.get('Error', {}).get('Message', '')}"
        ) from None
    except (botocore.exceptions.BotoCoreError, ResponseParserError) as e:
        raise PreflightError(f"AWS client error: {str(e).splitlines()[0]}") from None


def _run(session_or_clients, instance_type, count, az, efa) -> PreflightResult:
    ec2, sq = _clients(session_or_clients)
    res = PreflightResult(
        region=ec2.meta.region_name, instance_type=instance_type, count=count, efa=efa
    )

    # --- offerings per AZ
    offered: list[str] | None
    try:
        offered = offered_azs(ec2, instance_type)
    except botocore.exceptions.ClientError as e:
        if not _is_denied(e):
            raise
        offered = None
        res.problems.append(
            "cannot list offerings: ec2:DescribeInstanceTypeOfferings denied"
        )
    if offered is not None:
        try:
            zones = all_azs(ec2)
        except botocore.exceptions.ClientError as e:
            if not _is_denied(e):
                raise
            zones = []
            res.warnings.append(
                "ec2:DescribeAvailabilityZones denied; only offering AZs listed"
            )
        for z in sorted(set(zones) | set(offered)):
            res.azs[z] = {"offered": z in offered}
        if not offered:
            res.problems.append(
                f"{instance_type} is not offered in any AZ of {res.region}"
            )
        elif az is not None:
            if az in offered:
                res.recommended_az = az
            else:
                res.problems.append(
                    f"{instance_type} is not offered in {az} "
                    f"(offered in: {', '.join(offered)})"
                )
        else:
            res.recommended_az = offered[0]

    # --- instance type details
    vcpus: int | None = None
    try:
        info = _describe_types(ec2, [instance_type]).get(instance_type)
    except botocore.exceptions.ClientError as e:
        if _is_denied(e):
            info = None
            res.problems.append("cannot describe type: ec2:DescribeInstanceTypes denied")
        elif _code(e).startswith("InvalidInstanceType"):
            info = None
            res.problems.append(f"unknown instance type {instance_type}")
        else:
            raise
    else:
        if info is None:
            res.problems.append(f"unknown instance type {instance_type}")
    if info is not None:
        gpus = sum(g.get("Count", 0) for g in (info.get("GpuInfo") or {}).get("Gpus", []))
        vcpus = int(info.get("VCpuInfo", {}).get("DefaultVCpus", 0))
        net = info.get("NetworkInfo", {})
        res.instance = {
            "gpus": gpus,
            "gpu_names": sorted(
                {g.get("Name", "") for g in (info.get("GpuInfo") or {}).get("Gpus", [])}
            ),
            "vcpus": vcpus,
            "efa_supported": bool(net.get("EfaSupported", False)),
            "max_network_cards": net.get("MaximumNetworkCards"),
        }
        if efa and not res.instance["efa_supported"]:
            res.problems.append(f"EFA requested but {instance_type} does not support EFA")
        if quota_code_for(instance_type) in (QUOTA_G_VT, QUOTA_P) and gpus == 0:
            res.problems.append(f"{instance_type} is a GPU family type but has no GPUs")

    # --- vCPU quota
    qcode = quota_code_for(instance_type)
    res.quota = {"code": qcode, "status": "unknown", "value": None,
                 "running_vcpus": None, "required_vcpus": None}
    if qcode is None:
        res.warnings.append(f"no On-Demand vCPU quota code known for {instance_type}")
    elif vcpus is not None:
        try:
            running = _running_vcpus(ec2, qcode)
        except botocore.exceptions.ClientError as e:
            if not _is_denied(e):
                raise
            running = None
            res.warnings.append("running vCPUs unknown: ec2:DescribeInstances denied")
        res.quota["running_vcpus"] = running
        res.quota["required_vcpus"] = count * vcpus + (running or 0)
        value = None
        try:
            q = sq.get_service_quota(ServiceCode="ec2", QuotaCode=qcode)
            value = q.get("Quota", {}).get("Value")
        except botocore.exceptions.ClientError as e:
            if _is_denied(e):
                res.warnings.append(
                    f"quota {qcode} unknown: servicequotas:GetServiceQuota denied"
                )
            elif _code(e) == "NoSuchResourceException":
                res.warnings.append(f"quota {qcode} unknown: not returned by Service Quotas")
            else:
                raise
        if value is not None:
            value = int(value)
            res.quota["value"] = value
            if running is None:
                res.quota["status"] = "unknown"
            elif res.quota["required_vcpus"] <= value:
                res.quota["status"] = "ok"
            else:
                res.quota["status"] = "too_small"
                res.problems.append(
                    f"vCPU quota {qcode} too small: need {count} x {vcpus} + "
                    f"{running} running = {res.quota['required_vcpus']} vCPUs, "
                    f"quota is {value}"
                )

    # --- cluster placement group (dry run)
    try:
        ec2.create_placement_group(GroupName="preflight-dryrun", Strategy="cluster",
                                   DryRun=True)
        res.placement_group = {"status": "ok"}
    except botocore.exceptions.ClientError as e:
        code = _code(e)
        if code == "DryRunOperation":
            res.placement_group = {"status": "ok"}
        elif _is_denied(e):
            res.placement_group = {"status": "unknown",
                                   "reason": "ec2:CreatePlacementGroup denied"}
            res.warnings.append("placement group unknown: ec2:CreatePlacementGroup denied")
        else:
            res.placement_group = {"status": "unknown", "reason": code or str(e)}
            res.warnings.append(f"placement group unknown: {code or e}")
    except ResponseParserError:
        # e.g. an emulator that does not implement CreatePlacementGroup (HTTP 500)
        res.placement_group = {"status": "unknown",
                               "reason": "unparseable CreatePlacementGroup response"}
        res.warnings.append("placement group unknown: CreatePlacementGroup not answered")

    res.ok = not res.problems
    return res


def format_table(res: PreflightResult) -> str:
    lines = [f"Preflight {res.instance_type} x{res.count} in {res.region} (EFA {'on' if res.efa else 'off'})",
             f"{'AZ':<20} OFFERED"]
    for z, row in res.azs.items():
        mark = " <- recommended" if z == res.recommended_az else ""
        lines.append(f"{z:<20} {'yes' if row['offered'] else 'no'}{mark}")
    i = res.instance
    if i:
        lines.append(f"type: {i['gpus']} GPU(s) {','.join(i['gpu_names'])}, {i['vcpus']} vCPUs, "
                     f"EFA {'yes' if i['efa_supported'] else 'no'}, "
                     f"{i['max_network_cards']} network card(s)")
    q = res.quota
    lines.append(f"quota {q.get('code')}: {q.get('status')} (value {q.get('value')}, "
                 f"needed {q.get('required_vcpus')}, running {q.get('running_vcpus')})")
    lines.append(f"cluster placement group: {res.placement_group.get('status')}")
    for p in res.problems:
        lines.append(f"PROBLEM: {p}")
    for w in res.warnings:
        lines.append(f"WARNING: {w}")
    lines.append("RESULT: " + ("OK" if res.ok else "NOT OK"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ray_efa_eks.components.preflight",
                                description=__doc__.splitlines()[0])
    p.add_argument("--region")
    p.add_argument("--instance-type", default="g6.12xlarge")
    p.add_argument("--count", type=int, default=2)
    p.add_argument("--az")
    p.add_argument("--efa", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--json", action="store_true")
    p.add_argument("--endpoint-url")
    a = p.parse_args(argv)
    cfg = Config(connect_timeout=5, read_timeout=20,
                 retries={"max_attempts": 2, "mode": "standard"})
    try:
        session = boto3.session.Session(region_name=a.region)
        if session.region_name is None:
            raise PreflightError("no AWS region: pass --region or set AWS_REGION")
        clients = {
            "ec2": session.client("ec2", endpoint_url=a.endpoint_url, config=cfg),
            "service-quotas": session.client("service-quotas",
                                             endpoint_url=a.endpoint_url, config=cfg),
        }
        res = run_preflight(clients, a.instance_type, a.count, az=a.az, efa=a.efa)
    except PreflightError as e:
        print(f"preflight error: {e}", file=sys.stderr)
        return 2
    except (botocore.exceptions.BotoCoreError, ValueError) as e:
        print(f"preflight error: {e}", file=sys.stderr)
        return 2
    if a.json:
        print(json.dumps(res.to_dict(), sort_keys=True))
    else:
        print(format_table(res))
    return 0 if res.ok else 1


if __name__ == "__main__":
    sys.exit(main())
