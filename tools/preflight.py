"""Capacity preflight for the multi-node EFA GPU node group: can these GPUs be had, here, now?

Usage::

    python -m ray_efa_eks.tools.preflight [--region R] [--instance-type T] [--count N]
        [--az AZ] [--efa/--no-efa] [--capacity-reservation-id cr-...] [--json] [--endpoint-url URL]

Checks, with boto3 only (this module imports nothing from Pulumi), each one a row with status
``ok``, ``failed`` or ``unknown`` (and for ``unknown`` the IAM action / API that would answer it):

* ``offerings``: per AZ whether EC2 offers the type (DescribeInstanceTypeOfferings, paginated);
* ``instance-type``: GPUs, vCPUs, EFA support, network cards, usage classes (DescribeInstanceTypes);
* ``vcpu-quota``: the running On-Demand vCPU quota of the family (Service Quotas GetServiceQuota,
  ``L-DB2E81BA`` G/VT, ``L-417A185B`` P, ``L-1216C47A`` standard) against ``count * vCPUs + vCPUs of
  running/pending instances in the same quota`` (DescribeInstances; Spot instances have quotas of their own);
* ``placement-group``: whether a cluster placement group could be created (CreatePlacementGroup, DryRun);
* ``capacity-reservations``: active On-Demand Capacity Reservations of the type in the region/AZ
  (DescribeCapacityReservations): none is not a failure, but then on-demand launches compete for free
  capacity (InsufficientInstanceCapacity is possible); with ``--capacity-reservation-id`` that
  reservation must exist, be active, be of the type, sit in ``--az`` (its AZ is printed and recommended:
  :func:`reservation_az`) and have ``count`` instances available, else the check fails;
* ``capacity-blocks``: Capacity Block for ML offerings of ``count`` x the type for 24 hours
  (DescribeCapacityBlockOfferings), for types whose ``SupportedUsageClasses`` list ``capacity-block``.

Verdict and exit codes: **0** every check passed; **1** a check failed (type not offered / not in the AZ,
quota too small, EFA unsupported, reservation missing/elsewhere/too small...); **2** no check failed but
one could not be answered (denied, or the endpoint does not implement the API: the row names the action)
or AWS could not be reached at all (credentials, endpoint); **64** usage error (e.g. ``--count 0``, ``--region ""``,
an ``--az`` outside the region: checked before any AWS call); **130** interrupted (Ctrl-C).
Preflight never prints OK for something it did not check.

``run_preflight`` is pure (no printing) and ``recommend_az`` / ``reservation_az`` can be reused by the
Pulumi program and other tools.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

import boto3
import botocore.exceptions
from botocore.config import Config
from botocore.parsers import ResponseParserError

from .cli import ArgumentParser, positive_int, run_cli
from ..training.cli import url_problem

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


STANDARD_FAMILIES = frozenset(("a", "c", "d", "h", "i", "m", "r", "t", "z", "im", "is"))
"""Family letters of "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances"; Im4gn and Is4gen are I."""


def quota_code_for(instance_type: str) -> str | None:
    """On-Demand vCPU quota code of the family of ``instance_type`` (its leading letters), or None."""
    prefix = re.match(r"[a-z]*", instance_type.lower()).group(0)  # always matches, perhaps empty
    if prefix in ("g", "gr", "vt"):  # "Running On-Demand G and VT instances": Gr6 is a G6 variant (its L4 GPUs)
        return QUOTA_G_VT
    if prefix == "p":
        return QUOTA_P
    if prefix in STANDARD_FAMILIES:
        return QUOTA_STANDARD
    return None


OK, FAILED, UNKNOWN = "ok", "failed", "unknown"
EXIT_OK, EXIT_FAILED, EXIT_UNDETERMINED = 0, 1, 2


@dataclass
class PreflightResult:
    region: str | None
    instance_type: str
    count: int
    efa: bool
    ok: bool = False
    """True only when every check passed."""
    status: str = UNKNOWN
    """ok | failed (a check failed) | undetermined (none failed, one could not be answered)."""
    recommended_az: str | None = None
    azs: dict[str, dict[str, Any]] = field(default_factory=dict)
    instance: dict[str, Any] = field(default_factory=dict)
    quota: dict[str, Any] = field(default_factory=dict)
    placement_group: dict[str, Any] = field(default_factory=dict)
    capacity_reservations: dict[str, Any] = field(default_factory=dict)
    capacity_blocks: dict[str, Any] = field(default_factory=dict)
    checks: list[dict[str, Any]] = field(default_factory=list)
    """One row per check: name, status (ok/failed/unknown), detail, and for unknown ``needs`` (the action)."""
    problems: list[str] = field(default_factory=list)
    unknowns: list[str] = field(default_factory=list)
    """What could not be answered, each naming the IAM action / API that would answer it."""
    warnings: list[str] = field(default_factory=list)
    """Facts worth knowing that decide nothing (e.g. no capacity reservation: launches compete for capacity)."""

    def check(self, name: str, status: str, detail: str, needs: str | None = None) -> None:
        row: dict[str, Any] = {"name": name, "status": status, "detail": detail}
        if status == FAILED:
            self.problems.append(detail)
        elif status == UNKNOWN:
            row["needs"] = needs
            self.unknowns.append(f"{name}: {detail}" + (f" (answered by {needs})" if needs else ""))
        self.checks.append(row)

    @property
    def exit_code(self) -> int:
        return {"ok": EXIT_OK, "failed": EXIT_FAILED}.get(self.status, EXIT_UNDETERMINED)

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


def zone_ids(ec2_client: Any) -> dict[str, str | None]:
    """AZ name -> zone ID (``zone-type availability-zone``), as DescribeAvailabilityZones answers for this account:
    the same name is another zone ID in another account."""
    resp = ec2_client.describe_availability_zones(
        Filters=[{"Name": "zone-type", "Values": ["availability-zone"]}]
    )
    return {z["ZoneName"]: z.get("ZoneId") for z in sorted(resp.get("AvailabilityZones", []),
                                                           key=lambda z: z["ZoneName"])}


def eks_refuses_cluster_subnets(region: str, zone_id: str | None) -> bool:
    """EKS creates no control plane in this zone ID (components/placement.EKS_UNSUPPORTED_ZONE_IDS, network-reqs)."""
    from ..components.network.placement import EKS_UNSUPPORTED_ZONE_IDS

    return zone_id in EKS_UNSUPPORTED_ZONE_IDS.get(region, frozenset())


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
                # Spot instances count against the Spot quotas, not the On-Demand ones (EC2 user guide, "Spot
                # Instance quotas", docs.aws.amazon.com/AWSEC2/latest/UserGuide/using-spot-limits.html).
                if quota_code_for(itype) != quota_code or inst.get("InstanceLifecycle") == "spot":
                    continue
                counts[itype] = counts.get(itype, 0) + 1
    if not counts:
        return 0
    info = _describe_types(ec2_client, list(counts))
    for itype, n in counts.items():
        vcpus = info.get(itype, {}).get("VCpuInfo", {}).get("DefaultVCpus", 0)
        explicit += n * int(vcpus)
    return explicit


class Unanswered(Exception):
    """An API call that got no usable answer: denied, or not implemented by the endpoint."""

    def __init__(self, action: str, why: str):
        self.action = action
        super().__init__(f"{why}: {action}")


def _ask(action: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(...)``, or :class:`Unanswered` naming ``action`` when denied or not answered; other errors propagate."""
    try:
        return fn(*args, **kwargs)
    except botocore.exceptions.ClientError as e:
        code = _code(e)
        if _is_denied(e):
            raise Unanswered(action, "denied") from None
        if code in ("InternalError", "InternalFailure", "NotImplemented", "InvalidAction", "UnsupportedOperation") \
                or e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) >= 500:
            raise Unanswered(action, f"not answered by the endpoint ({code or 'server error'})") from None
        raise
    except ResponseParserError:  # e.g. an emulator that does not implement the action (HTTP 500 page)
        raise Unanswered(action, "not answered by the endpoint (unparseable response)") from None


def reservation_az(ec2_client: Any, reservation_id: str) -> str:
    """The AZ of On-Demand Capacity Reservation (or Capacity Block) ``reservation_id``.

    Raises :class:`Unanswered` (denied / not implemented) or LookupError (no such reservation).
    """
    found = _ask("ec2:DescribeCapacityReservations", _describe_reservation, ec2_client, reservation_id)
    if found is None:
        raise LookupError(f"capacity reservation {reservation_id} not found in {ec2_client.meta.region_name}")
    return found["AvailabilityZone"]


def _describe_reservation(ec2_client: Any, reservation_id: str) -> dict[str, Any] | None:
    try:
        resp = ec2_client.describe_capacity_reservations(CapacityReservationIds=[reservation_id])
    except botocore.exceptions.ClientError as e:
        if _code(e) in ("InvalidCapacityReservationId.NotFound", "InvalidCapacityReservationId.Malformed"):
            return None
        raise
    found = resp.get("CapacityReservations")  # absent or empty: none
    return found[0] if found else None


def run_preflight(
    session_or_clients: Any,
    instance_type: str,
    count: int,
    az: str | None = None,
    efa: bool = True,
    capacity_reservation_id: str | None = None,
) -> PreflightResult:
    """Run all checks; raises PreflightError when AWS cannot be reached at all (credentials, endpoint)."""
    if count < 1:
        raise ValueError(f"count must be >= 1 (got {count}): preflight checks nodes to launch; "
                         "0 parked nodes need no capacity")
    try:
        return _run(session_or_clients, instance_type, count, az, efa, capacity_reservation_id)
    except botocore.exceptions.NoCredentialsError as e:
        raise PreflightError(f"no AWS credentials: {e}") from None
    except botocore.exceptions.EndpointConnectionError as e:
        raise PreflightError(f"cannot reach AWS endpoint: {e}") from None
    except botocore.exceptions.ClientError as e:
        op = e.operation_name  # botocore's ClientError always has it (its __init__)
        raise PreflightError(
            f"AWS API error in {op}: {_code(e)}: "
            f"{e.response.get('Error', {}).get('Message', '')}"
        ) from None
    except (botocore.exceptions.BotoCoreError, ResponseParserError) as e:
        raise PreflightError(f"AWS client error: {str(e).splitlines()[0]}") from None


def _run(session_or_clients, instance_type, count, az, efa, reservation_id) -> PreflightResult:
    ec2, sq = _clients(session_or_clients)
    res = PreflightResult(
        region=ec2.meta.region_name, instance_type=instance_type, count=count, efa=efa
    )

    # --- offerings per AZ
    offered: list[str] | None = None
    try:
        offered = _ask("ec2:DescribeInstanceTypeOfferings", offered_azs, ec2, instance_type)
    except Unanswered as u:
        res.check("offerings", UNKNOWN, f"AZ offerings of {instance_type} unknown ({u})", u.action)
    if offered is not None:
        try:
            zones = _ask("ec2:DescribeAvailabilityZones", zone_ids, ec2)
        except Unanswered as u:
            zones = {}
            res.warnings.append(f"{u.action} not answered; only offering AZs listed, without zone IDs")
        for z in sorted(set(zones) | set(offered)):
            zid = zones.get(z)
            res.azs[z] = {"offered": z in offered, "zone_id": zid,
                          "eks_cluster_subnets": None if zid is None else not eks_refuses_cluster_subnets(res.region, zid)}
        if not offered:
            res.check("offerings", FAILED, f"{instance_type} is not offered in any AZ of {res.region}")
        elif az is not None and az not in offered:
            res.check("offerings", FAILED, f"{instance_type} is not offered in {az} (offered in: {', '.join(offered)})")
        else:
            res.recommended_az = az or offered[0]
            res.check("offerings", OK, f"{instance_type} offered in {', '.join(offered)}")
            chosen = res.azs[res.recommended_az]  # an offering AZ: every one is listed above
            if chosen.get("eks_cluster_subnets") is False:
                res.warnings.append(
                    f"{res.recommended_az} is zone ID {chosen['zone_id']} in this account, where EKS creates no "
                    "cluster subnets (UnsupportedAvailabilityZoneException; EKS user guide, network-reqs): the stack "
                    "puts the cluster in two other AZs and gives the GPU nodes their own subnet here, which no EKS "
                    "document confirms for managed node groups; another AZ avoids the question")

    # --- instance type details
    vcpus: int | None = None
    info = None
    try:
        info = _ask("ec2:DescribeInstanceTypes", _describe_types, ec2, [instance_type]).get(instance_type)
        if info is None:
            res.check("instance-type", FAILED, f"unknown instance type {instance_type}")
    except Unanswered as u:
        res.check("instance-type", UNKNOWN, f"GPUs/vCPUs/EFA of {instance_type} unknown ({u})", u.action)
    except botocore.exceptions.ClientError as e:
        if not _code(e).startswith("InvalidInstanceType"):
            raise
        res.check("instance-type", FAILED, f"unknown instance type {instance_type}")
    if info is not None:
        gpus = sum(g.get("Count", 0) for g in (info.get("GpuInfo") or {}).get("Gpus", []))
        vcpus = int(info.get("VCpuInfo", {}).get("DefaultVCpus", 0))
        net = info.get("NetworkInfo", {})
        res.instance = {
            "gpus": gpus,
            "gpu_names": sorted({g.get("Name", "") for g in (info.get("GpuInfo") or {}).get("Gpus", [])}),
            "vcpus": vcpus,
            "efa_supported": bool(net.get("EfaSupported")),
            "max_network_cards": net.get("MaximumNetworkCards"),
            "usage_classes": sorted(info.get("SupportedUsageClasses", [])),
        }
        if efa and not res.instance["efa_supported"]:
            res.check("instance-type", FAILED, f"EFA requested but {instance_type} does not support EFA")
        elif quota_code_for(instance_type) in (QUOTA_G_VT, QUOTA_P) and gpus == 0:
            res.check("instance-type", FAILED, f"{instance_type} is a GPU family type but has no GPUs")
        else:
            res.check("instance-type", OK, f"{gpus} GPU(s), {vcpus} vCPUs, EFA "
                                           f"{'yes' if res.instance['efa_supported'] else 'no'}")

    _check_quota(res, ec2, sq, instance_type, count, vcpus)
    _check_placement_group(res, ec2, efa, reservation_id)
    _check_reservations(res, ec2, instance_type, count, az, reservation_id)
    _check_capacity_blocks(res, ec2, instance_type, count, az)

    statuses = {c["status"] for c in res.checks}
    res.status = "failed" if FAILED in statuses else ("undetermined" if UNKNOWN in statuses else "ok")
    res.ok = res.status == "ok"
    return res


def _check_quota(res: PreflightResult, ec2: Any, sq: Any, instance_type: str, count: int, vcpus: int | None) -> None:
    qcode = quota_code_for(instance_type)
    res.quota = {"code": qcode, "status": UNKNOWN, "value": None, "running_vcpus": None, "required_vcpus": None}
    if qcode is None:
        res.check("vcpu-quota", UNKNOWN, f"no On-Demand vCPU quota code known for {instance_type}",
                  "servicequotas:ListServiceQuotas (find the family's quota code)")
        return
    if vcpus is None:
        res.check("vcpu-quota", UNKNOWN, "vCPUs per node unknown, so the quota cannot be compared",
                  "ec2:DescribeInstanceTypes")
        return
    running = value = None
    try:
        running = _ask("ec2:DescribeInstances", _running_vcpus, ec2, qcode)
    except Unanswered as u:
        res.check("vcpu-quota", UNKNOWN, f"running vCPUs in quota {qcode} unknown ({u})", u.action)
    res.quota["running_vcpus"] = running
    res.quota["required_vcpus"] = count * vcpus + (running or 0)
    try:
        q = _ask("servicequotas:GetServiceQuota", sq.get_service_quota, ServiceCode="ec2", QuotaCode=qcode)
        value = q.get("Quota", {}).get("Value")
    except Unanswered as u:
        res.check("vcpu-quota", UNKNOWN, f"quota {qcode} unknown ({u})", u.action)
    except botocore.exceptions.ClientError as e:
        if _code(e) != "NoSuchResourceException":
            raise
        res.check("vcpu-quota", UNKNOWN, f"quota {qcode} unknown: not returned by Service Quotas",
                  "servicequotas:GetServiceQuota (ServiceCode ec2) on AWS")
    if value is None or running is None:
        if value is not None:
            res.quota["value"] = int(value)
        if not any(c["name"] == "vcpu-quota" for c in res.checks):  # an answer without a value is no answer
            res.check("vcpu-quota", UNKNOWN, f"quota {qcode} returned no value", "servicequotas:GetServiceQuota")
        return
    value = int(value)
    res.quota["value"] = value
    if res.quota["required_vcpus"] <= value:
        res.quota["status"] = OK
        res.check("vcpu-quota", OK, f"quota {qcode} {value} vCPUs >= {res.quota['required_vcpus']} needed")
    else:
        res.quota["status"] = "too_small"
        res.check("vcpu-quota", FAILED, f"vCPU quota {qcode} too small: need {count} x {vcpus} + {running} running = "
                                        f"{res.quota['required_vcpus']} vCPUs, quota is {value}")


def _check_placement_group(res: PreflightResult, ec2: Any, efa: bool, reservation_id: str | None = None) -> None:
    """Whether a cluster placement group may be created, asked only where the stack creates one: EFA nodes
    (components/nodes/node_groups.py) whose capacity mode gets one (components/nodes/capacity.py; a named reservation, ODCR or
    Capacity Block, never does)."""
    from ..components.nodes.capacity import ON_DEMAND, RESERVATION, own_cluster_placement_group

    if not (efa and own_cluster_placement_group(ON_DEMAND if reservation_id is None else RESERVATION)):
        why = "no EFA" if not efa else "a capacity reservation is targeted"
        res.placement_group = {"status": "not needed", "reason": why}
        res.check("placement-group", OK, f"not needed: the stack creates no cluster placement group with {why}")
        return

    def dry_run() -> None:
        try:
            ec2.create_placement_group(GroupName="preflight-dryrun", Strategy="cluster", DryRun=True)
        except botocore.exceptions.ClientError as e:
            if _code(e) != "DryRunOperation":
                raise

    try:
        _ask("ec2:CreatePlacementGroup", dry_run)
        res.placement_group = {"status": OK}
        res.check("placement-group", OK, "a cluster placement group may be created (dry run)")
    except Unanswered as u:
        res.placement_group = {"status": UNKNOWN, "reason": str(u)}
        res.check("placement-group", UNKNOWN, f"cluster placement group unknown ({u})", u.action)
    except botocore.exceptions.ClientError as e:
        res.placement_group = {"status": FAILED, "reason": _code(e)}
        res.check("placement-group", FAILED, f"a cluster placement group cannot be created: {_code(e)}")


def _check_reservations(res: PreflightResult, ec2: Any, instance_type: str, count: int, az: str | None,
                        reservation_id: str | None) -> None:
    if reservation_id:
        if not reservation_id.startswith("cr-"):
            res.check("capacity-reservation", UNKNOWN, f"{reservation_id} is a resource group: its reservations are "
                      "not checked", "resource-groups:ListGroupResources + ec2:DescribeCapacityReservations")
            return
        try:
            r = _ask("ec2:DescribeCapacityReservations", _describe_reservation, ec2, reservation_id)
        except Unanswered as u:
            res.capacity_reservations = {"id": reservation_id, "status": UNKNOWN}
            res.check("capacity-reservation", UNKNOWN, f"{reservation_id} unknown ({u})", u.action)
            return
        if r is None:
            res.check("capacity-reservation", FAILED, f"capacity reservation {reservation_id} not found in {res.region}")
            return
        r_az, r_type = r.get("AvailabilityZone"), r.get("InstanceType")
        available, state = int(r.get("AvailableInstanceCount", 0)), r.get("State")
        # A Capacity Block bought for later is "scheduled" (or "payment-pending") until its start: EKS accepts a node
        # group on it before then (EKS user guide, "Create a managed node group with Capacity Blocks for ML"), and
        # its instances become available at the start, so it is not a failure; "payment-failed" never starts.
        block = r.get("ReservationType") == "capacity-block"
        upcoming = block and state in ("scheduled", "payment-pending")
        if upcoming:
            available = max(available, int(r.get("TotalInstanceCount") or 0))
        res.capacity_reservations = {"id": reservation_id, "availability_zone": r_az, "instance_type": r_type,
                                     "state": state, "available": available,
                                     "total": r.get("TotalInstanceCount"), "end_date": str(r.get("EndDate") or "")}
        bad = []
        if r_type != instance_type:
            bad.append(f"is for {r_type}, not {instance_type}")
        if az is not None and r_az != az:
            bad.append(f"is in {r_az}, not {az} (set availabilityZone {r_az})")
        if state == "payment-failed":
            bad.append("is payment-failed: EC2 never starts it (buy a new block)")
        elif state != "active" and not upcoming:
            bad.append(f"is {state}, not active")
        if available < count:
            bad.append(f"has {available} instance(s) available, {count} needed")
        if bad:
            res.check("capacity-reservation", FAILED, f"capacity reservation {reservation_id} " + "; ".join(bad))
        elif upcoming:
            start = str(r.get("StartDate") or "(start unknown)")
            res.recommended_az = r_az
            res.capacity_reservations["start_date"] = start
            res.check("capacity-reservation", OK, f"Capacity Block {reservation_id} is {state}: {available} x {r_type} "
                                                  f"in {r_az} from {start} (availabilityZone must be {r_az})")
            res.warnings.append(f"Capacity Block {reservation_id} starts {start}: deploy with gpuNodeCount 0 (EKS "
                                "accepts the node group now) and raise it once the block is active")
        else:
            res.recommended_az = r_az
            res.check("capacity-reservation", OK, f"{reservation_id}: {available} x {r_type} available in {r_az} "
                                                  f"(availabilityZone must be {r_az})")
        return
    filters = [{"Name": "instance-type", "Values": [instance_type]}, {"Name": "state", "Values": ["active"]}]
    if az:
        filters.append({"Name": "availability-zone", "Values": [az]})

    def active() -> list[dict[str, Any]]:
        pages = ec2.get_paginator("describe_capacity_reservations").paginate(Filters=filters)
        return [r for page in pages for r in page.get("CapacityReservations", [])]

    try:
        found = _ask("ec2:DescribeCapacityReservations", active)
    except Unanswered as u:
        res.capacity_reservations = {"status": UNKNOWN}
        res.check("capacity-reservations", UNKNOWN, f"capacity reservations for {instance_type} unknown ({u})",
                  u.action)
        return
    rows = [{"id": r.get("CapacityReservationId"), "availability_zone": r.get("AvailabilityZone"),
             "available": int(r.get("AvailableInstanceCount", 0))} for r in found]
    res.capacity_reservations = {"status": OK, "active": rows}
    where = az or res.region
    if rows:
        best = max(rows, key=lambda r: r["available"])
        res.check("capacity-reservations", OK, f"{len(rows)} active for {instance_type} in {where}; the largest, "
                                               f"{best['id']} in {best['availability_zone']}, has {best['available']} "
                                               "available (use it: --capacity-reservation-id)")
    else:
        res.check("capacity-reservations", OK, f"none active for {instance_type} in {where}")
        res.warnings.append(f"no capacity reservation for {instance_type} in {where}: on-demand launches compete for "
                            "free capacity (InsufficientInstanceCapacity is possible)")


def capacity_block_offerings(ec2: Any, instance_type: str, count: int, hours: int = 24) -> list[dict[str, Any]]:
    """Every page of DescribeCapacityBlockOfferings (it follows NextToken: EC2 may split the offerings)."""
    found, token = [], None
    while True:
        kw = {"NextToken": token} if token else {}
        page = ec2.describe_capacity_block_offerings(InstanceType=instance_type, InstanceCount=count,
                                                     CapacityDurationHours=hours, **kw)
        found += page.get("CapacityBlockOfferings", [])
        token = page.get("NextToken")
        if not token:
            return found


def _check_capacity_blocks(res: PreflightResult, ec2: Any, instance_type: str, count: int, az: str | None) -> None:
    classes = res.instance.get("usage_classes")
    if classes is not None and "capacity-block" not in classes:
        res.capacity_blocks = {"status": "not sold"}
        res.check("capacity-blocks", OK, f"EC2 sells no Capacity Blocks of {instance_type} (not needed)")
        return

    try:
        found = _ask("ec2:DescribeCapacityBlockOfferings", capacity_block_offerings, ec2, instance_type, count)
    except Unanswered as u:
        res.capacity_blocks = {"status": UNKNOWN}
        res.check("capacity-blocks", UNKNOWN, f"Capacity Block offerings for {count} x {instance_type} unknown ({u})",
                  u.action)
        return
    if az:
        found = [o for o in found if o.get("AvailabilityZone") == az]
    rows = sorted(({"id": o.get("CapacityBlockOfferingId"), "availability_zone": o.get("AvailabilityZone"),
                    "start": str(o.get("StartDate")), "upfront_fee": o.get("UpfrontFee"),
                    "currency": o.get("CurrencyCode")} for o in found), key=lambda o: o["start"])
    res.capacity_blocks = {"status": OK, "offerings": rows}
    detail = (f"{len(rows)} offering(s) of {count} x {instance_type} for 24 h in {az or res.region}; earliest "
              f"{rows[0]['start']} in {rows[0]['availability_zone']}" if rows else
              f"no Capacity Block offering of {count} x {instance_type} for 24 h in {az or res.region}")
    res.check("capacity-blocks", OK, detail)


def format_table(res: PreflightResult) -> str:
    lines = [f"Preflight {res.instance_type} x{res.count} in {res.region} (EFA {'on' if res.efa else 'off'})",
             f"{'AZ':<20} {'ZONE ID':<10} OFFERED  EKS CLUSTER SUBNETS"]
    for z, row in res.azs.items():
        mark = " <- recommended" if z == res.recommended_az else ""
        eks = {True: "yes", False: "no (EKS refuses this zone ID)", None: "?"}[row.get("eks_cluster_subnets")]
        lines.append(f"{z:<20} {row.get('zone_id') or '?':<10} {'yes' if row['offered'] else 'no':<8} {eks}{mark}")
    width = max((len(c["name"]) for c in res.checks), default=0)  # 0: no check, no row to pad
    for c in res.checks:
        needs = f"  [would be answered by {c['needs']}]" if c.get("needs") else ""
        lines.append(f"{c['name']:<{width}}  {c['status'].upper():<7}  {c['detail']}{needs}")
    for w in res.warnings:
        lines.append(f"NOTE: {w}")
    verdict = {"ok": "OK (every check passed)",
               "failed": f"FAILED ({len(res.problems)} check(s) failed)",
               "undetermined": f"UNDETERMINED ({len(res.unknowns)} check(s) could not be answered; not OK)"}
    lines.append("RESULT: " + verdict[res.status])
    return "\n".join(lines)


REGION = re.compile(r"[a-z]{2}(-[a-z]+)+-\d+")
"""AWS region names (us-east-1, us-gov-west-1, ap-southeast-2): docs.aws.amazon.com/global-infrastructure/latest/regions/aws-regions.html."""
INSTANCE_TYPE = re.compile(r"[a-z][a-z0-9-]*\.[a-z0-9-]+")
"""EC2 instance type names: FAMILY.SIZE (g6.12xlarge, p5e.48xlarge, u-6tb1.metal)."""
MAX_NODES_PER_NODE_GROUP = 450
"""EKS service quota 'Nodes per managed node group' (docs.aws.amazon.com/eks/latest/userguide/service-quotas.html)."""
EXIT_INTERRUPTED = 130
"""Ctrl-C (128 + SIGINT)."""


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    p = ArgumentParser(prog=prog or "python -m ray_efa_eks.tools.preflight", description=__doc__.split("\n\n")[0],
                       exit_codes="preflight")
    p.add_argument("--region", help="AWS region (default: $AWS_REGION, then $AWS_DEFAULT_REGION or your profile's "
                                    "region; boto3 alone reads only the latter two)")
    p.add_argument("--instance-type", default="g6.12xlarge", help="the GPU instance type (default g6.12xlarge)")
    p.add_argument("--count", type=positive_int, default=2, help="GPU nodes to launch (>= 1)")
    p.add_argument("--az", help="check this availability zone of the region only (e.g. us-east-1a)")
    p.add_argument("--efa", action=argparse.BooleanOptionalAction, default=True,
                   help="check EFA support and the EFA interfaces the type takes (default on)")
    p.add_argument("--capacity-reservation-id", metavar="cr-...",
                   help="check this ODCR / Capacity Block: type, AZ, state, available count")
    p.add_argument("--json", action="store_true", help="print the checks as one JSON object")
    p.add_argument("--endpoint-url", help="an EC2/Service Quotas endpoint to call instead of AWS's (e.g. moto)")
    a = p.parse_args(argv)
    if a.region is None and os.environ.get("AWS_REGION"):  # the AWS CLI and SDKs honour it; boto3 does not
        a.region = os.environ["AWS_REGION"]
        if not REGION.fullmatch(a.region):
            p.error(f"AWS_REGION={a.region!r}: not an AWS region name; e.g. AWS_REGION=us-east-1")
    problem = usage_problem(a)
    if problem:
        p.error(problem)
    try:
        return _main(a)
    except KeyboardInterrupt:
        print("preflight: interrupted (nothing was changed)", file=sys.stderr)
        return EXIT_INTERRUPTED


def usage_problem(a: argparse.Namespace) -> str | None:
    """The first argument no AWS call could answer (None when all are well-formed); checked before any call."""
    from ..components.nodes.capacity import RESERVATION_ID, RESOURCE_GROUP_ARN

    if a.region is not None and not REGION.fullmatch(a.region):
        return (f"--region {a.region!r}: not an AWS region name; e.g. --region us-east-1 (or leave it out to use "
                "AWS_REGION / your profile's region)")
    if a.az is not None:
        region = a.region or boto3.session.Session().region_name
        if not re.fullmatch(r"[a-z]{2}(-[a-z]+)+-\d+[a-z]", a.az) or (region and not a.az.startswith(region)):
            return (f"--az {a.az!r}: not an availability zone of {region or 'the region'}; e.g. --az "
                    f"{region or 'us-east-1'}a")
    if not INSTANCE_TYPE.fullmatch(a.instance_type):
        return f"--instance-type {a.instance_type!r}: not an EC2 instance type name; e.g. --instance-type g6.12xlarge"
    if a.count > MAX_NODES_PER_NODE_GROUP:
        return (f"--count {a.count}: an EKS managed node group holds at most {MAX_NODES_PER_NODE_GROUP} nodes (EKS "
                "service quotas: 'Nodes per managed node group'); e.g. --count 2")
    if a.endpoint_url is not None:
        why = url_problem(a.endpoint_url, "--endpoint-url", example="http://127.0.0.1:5000")
        if why:
            return why
    cr = a.capacity_reservation_id
    if cr is not None and not (RESERVATION_ID.fullmatch(cr) or RESOURCE_GROUP_ARN.fullmatch(cr)):
        return (f"--capacity-reservation-id {cr!r}: expected cr- and 8 or 17 hex digits (an ODCR or Capacity Block), "
                "or a reservation resource group ARN")
    return None


AWS_CONNECT_TIMEOUT_S, AWS_READ_TIMEOUT_S, AWS_ATTEMPTS = 5, 10, 2
"""Each EC2 / Service Quotas call: 5 s to connect, 10 s for each read, 2 attempts in all (botocore Config
``total_max_attempts``, standard retry mode), so an endpoint that accepts and never answers ends the command with
exit 2 in about 25 s (the first call without an answer stops it: "nothing was checked")."""


def _main(a: argparse.Namespace) -> int:
    cfg = Config(connect_timeout=AWS_CONNECT_TIMEOUT_S, read_timeout=AWS_READ_TIMEOUT_S,
                 retries={"total_max_attempts": AWS_ATTEMPTS, "mode": "standard"})
    try:
        session = boto3.session.Session(region_name=a.region)
        if session.region_name is None:
            raise PreflightError("no AWS region: pass --region or set AWS_REGION")
        clients = {
            "ec2": session.client("ec2", endpoint_url=a.endpoint_url, config=cfg),
            "service-quotas": session.client("service-quotas",
                                             endpoint_url=a.endpoint_url, config=cfg),
        }
        res = run_preflight(clients, a.instance_type, a.count, az=a.az, efa=a.efa,
                            capacity_reservation_id=a.capacity_reservation_id)
    except (PreflightError, botocore.exceptions.BotoCoreError, ValueError) as e:
        print(f"preflight error: {e} (nothing was checked)", file=sys.stderr)
        return EXIT_UNDETERMINED
    if a.json:
        print(json.dumps(res.to_dict(), sort_keys=True, default=str))
    else:
        print(format_table(res))
    return res.exit_code


if __name__ == "__main__":  # pragma: no cover (run as a subprocess by test_preflight's CLI tests, not measured)
    sys.exit(run_cli(main, None, "python -m ray_efa_eks.tools.preflight"))
