"""Preflight's checks: each answer of AWS judged ``ok``, ``failed`` or ``unknown`` into one row of a
:class:`PreflightResult` (offerings, instance type, vCPU quota, placement group, capacity reservations and blocks),
and the verdict; ``run_preflight`` is pure (no printing)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import botocore.exceptions
from botocore.parsers import ResponseParserError

from ..efacheck.exit_codes import EXIT_FAILED, EXIT_OK
from ..efacheck.exit_codes import EXIT_NO_ANSWER as EXIT_UNDETERMINED
from .preflight_aws import (
    QUOTA_G_VT,
    QUOTA_P,
    PreflightError,
    Unanswered,
    ask,
    ec2_and_quota_clients,
    error_code,
    describe_reservation,
    describe_types,
    running_vcpus,
    capacity_block_offerings,
    eks_refuses_cluster_subnets,
    offered_azs,
    quota_code_for,
    zone_ids,
)

OK, FAILED, UNKNOWN = "ok", "failed", "unknown"


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
        raise ValueError(
            f"count must be >= 1 (got {count}): preflight checks nodes to launch; 0 parked nodes need no capacity"
        )
    try:
        return _run(session_or_clients, instance_type, count, az, efa, capacity_reservation_id)
    except botocore.exceptions.NoCredentialsError as e:
        raise PreflightError(f"no AWS credentials: {e}") from None
    except botocore.exceptions.EndpointConnectionError as e:
        raise PreflightError(f"cannot reach AWS endpoint: {e}") from None
    except botocore.exceptions.ClientError as e:
        op = e.operation_name  # botocore's ClientError always has it (its __init__)
        raise PreflightError(
            f"AWS API error in {op}: {error_code(e)}: {e.response.get('Error', {}).get('Message', '')}"
        ) from None
    except (botocore.exceptions.BotoCoreError, ResponseParserError) as e:
        raise PreflightError(f"AWS client error: {str(e).splitlines()[0]}") from None


def _run(session_or_clients, instance_type, count, az, efa, reservation_id) -> PreflightResult:
    ec2, sq = ec2_and_quota_clients(session_or_clients)
    res = PreflightResult(region=ec2.meta.region_name, instance_type=instance_type, count=count, efa=efa)

    # --- offerings per AZ
    offered: list[str] | None = None
    try:
        offered = ask("ec2:DescribeInstanceTypeOfferings", offered_azs, ec2, instance_type)
    except Unanswered as u:
        res.check("offerings", UNKNOWN, f"AZ offerings of {instance_type} unknown ({u})", u.action)
    if offered is not None:
        try:
            zones = ask("ec2:DescribeAvailabilityZones", zone_ids, ec2)
        except Unanswered as u:
            zones = {}
            res.warnings.append(f"{u.action} not answered; only offering AZs listed, without zone IDs")
        for z in sorted(set(zones) | set(offered)):
            zid = zones.get(z)
            res.azs[z] = {
                "offered": z in offered,
                "zone_id": zid,
                "eks_cluster_subnets": None if zid is None else not eks_refuses_cluster_subnets(res.region, zid),
            }
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
                    "document confirms for managed node groups; another AZ avoids the question"
                )

    # --- instance type details
    vcpus: int | None = None
    info = None
    try:
        info = ask("ec2:DescribeInstanceTypes", describe_types, ec2, [instance_type]).get(instance_type)
        if info is None:
            res.check("instance-type", FAILED, f"unknown instance type {instance_type}")
    except Unanswered as u:
        res.check("instance-type", UNKNOWN, f"GPUs/vCPUs/EFA of {instance_type} unknown ({u})", u.action)
    except botocore.exceptions.ClientError as e:
        if not error_code(e).startswith("InvalidInstanceType"):
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
            res.check(
                "instance-type",
                OK,
                f"{gpus} GPU(s), {vcpus} vCPUs, EFA {'yes' if res.instance['efa_supported'] else 'no'}",
            )

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
        res.check(
            "vcpu-quota",
            UNKNOWN,
            f"no On-Demand vCPU quota code known for {instance_type}",
            "servicequotas:ListServiceQuotas (find the family's quota code)",
        )
        return
    if vcpus is None:
        res.check(
            "vcpu-quota",
            UNKNOWN,
            "vCPUs per node unknown, so the quota cannot be compared",
            "ec2:DescribeInstanceTypes",
        )
        return
    running = value = None
    try:
        running = ask("ec2:DescribeInstances", running_vcpus, ec2, qcode)
    except Unanswered as u:
        res.check("vcpu-quota", UNKNOWN, f"running vCPUs in quota {qcode} unknown ({u})", u.action)
    res.quota["running_vcpus"] = running
    res.quota["required_vcpus"] = count * vcpus + (running or 0)
    try:
        q = ask("servicequotas:GetServiceQuota", sq.get_service_quota, ServiceCode="ec2", QuotaCode=qcode)
        value = q.get("Quota", {}).get("Value")
    except Unanswered as u:
        res.check("vcpu-quota", UNKNOWN, f"quota {qcode} unknown ({u})", u.action)
    except botocore.exceptions.ClientError as e:
        if error_code(e) != "NoSuchResourceException":
            raise
        res.check(
            "vcpu-quota",
            UNKNOWN,
            f"quota {qcode} unknown: not returned by Service Quotas",
            "servicequotas:GetServiceQuota (ServiceCode ec2) on AWS",
        )
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
        res.check(
            "vcpu-quota",
            FAILED,
            f"vCPU quota {qcode} too small: need {count} x {vcpus} + {running} running = "
            f"{res.quota['required_vcpus']} vCPUs, quota is {value}",
        )


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
            if error_code(e) != "DryRunOperation":
                raise

    try:
        ask("ec2:CreatePlacementGroup", dry_run)
        res.placement_group = {"status": OK}
        res.check("placement-group", OK, "a cluster placement group may be created (dry run)")
    except Unanswered as u:
        res.placement_group = {"status": UNKNOWN, "reason": str(u)}
        res.check("placement-group", UNKNOWN, f"cluster placement group unknown ({u})", u.action)
    except botocore.exceptions.ClientError as e:
        res.placement_group = {"status": FAILED, "reason": error_code(e)}
        res.check("placement-group", FAILED, f"a cluster placement group cannot be created: {error_code(e)}")


def _check_reservations(
    res: PreflightResult, ec2: Any, instance_type: str, count: int, az: str | None, reservation_id: str | None
) -> None:
    if reservation_id:
        if not reservation_id.startswith("cr-"):
            res.check(
                "capacity-reservation",
                UNKNOWN,
                f"{reservation_id} is a resource group: its reservations are not checked",
                "resource-groups:ListGroupResources + ec2:DescribeCapacityReservations",
            )
            return
        try:
            r = ask("ec2:DescribeCapacityReservations", describe_reservation, ec2, reservation_id)
        except Unanswered as u:
            res.capacity_reservations = {"id": reservation_id, "status": UNKNOWN}
            res.check("capacity-reservation", UNKNOWN, f"{reservation_id} unknown ({u})", u.action)
            return
        if r is None:
            res.check(
                "capacity-reservation", FAILED, f"capacity reservation {reservation_id} not found in {res.region}"
            )
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
        res.capacity_reservations = {
            "id": reservation_id,
            "availability_zone": r_az,
            "instance_type": r_type,
            "state": state,
            "available": available,
            "total": r.get("TotalInstanceCount"),
            "end_date": str(r.get("EndDate") or ""),
        }
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
            res.check(
                "capacity-reservation",
                OK,
                f"Capacity Block {reservation_id} is {state}: {available} x {r_type} "
                f"in {r_az} from {start} (availabilityZone must be {r_az})",
            )
            res.warnings.append(
                f"Capacity Block {reservation_id} starts {start}: deploy with gpuNodeCount 0 (EKS "
                "accepts the node group now) and raise it once the block is active"
            )
        else:
            res.recommended_az = r_az
            res.check(
                "capacity-reservation",
                OK,
                f"{reservation_id}: {available} x {r_type} available in {r_az} (availabilityZone must be {r_az})",
            )
        return
    filters = [{"Name": "instance-type", "Values": [instance_type]}, {"Name": "state", "Values": ["active"]}]
    if az:
        filters.append({"Name": "availability-zone", "Values": [az]})

    def active() -> list[dict[str, Any]]:
        pages = ec2.get_paginator("describe_capacity_reservations").paginate(Filters=filters)
        return [r for page in pages for r in page.get("CapacityReservations", [])]

    try:
        found = ask("ec2:DescribeCapacityReservations", active)
    except Unanswered as u:
        res.capacity_reservations = {"status": UNKNOWN}
        res.check(
            "capacity-reservations", UNKNOWN, f"capacity reservations for {instance_type} unknown ({u})", u.action
        )
        return
    rows = [
        {
            "id": r.get("CapacityReservationId"),
            "availability_zone": r.get("AvailabilityZone"),
            "available": int(r.get("AvailableInstanceCount", 0)),
        }
        for r in found
    ]
    res.capacity_reservations = {"status": OK, "active": rows}
    where = az or res.region
    if rows:
        best = max(rows, key=lambda r: r["available"])
        res.check(
            "capacity-reservations",
            OK,
            f"{len(rows)} active for {instance_type} in {where}; the largest, "
            f"{best['id']} in {best['availability_zone']}, has {best['available']} "
            "available (use it: --capacity-reservation-id)",
        )
    else:
        res.check("capacity-reservations", OK, f"none active for {instance_type} in {where}")
        res.warnings.append(
            f"no capacity reservation for {instance_type} in {where}: on-demand launches compete for "
            "free capacity (InsufficientInstanceCapacity is possible)"
        )


def _check_capacity_blocks(res: PreflightResult, ec2: Any, instance_type: str, count: int, az: str | None) -> None:
    classes = res.instance.get("usage_classes")
    if classes is not None and "capacity-block" not in classes:
        res.capacity_blocks = {"status": "not sold"}
        res.check("capacity-blocks", OK, f"EC2 sells no Capacity Blocks of {instance_type} (not needed)")
        return

    try:
        found = ask("ec2:DescribeCapacityBlockOfferings", capacity_block_offerings, ec2, instance_type, count)
    except Unanswered as u:
        res.capacity_blocks = {"status": UNKNOWN}
        res.check(
            "capacity-blocks",
            UNKNOWN,
            f"Capacity Block offerings for {count} x {instance_type} unknown ({u})",
            u.action,
        )
        return
    if az:
        found = [o for o in found if o.get("AvailabilityZone") == az]
    rows = sorted(
        (
            {
                "id": o.get("CapacityBlockOfferingId"),
                "availability_zone": o.get("AvailabilityZone"),
                "start": str(o.get("StartDate")),
                "upfront_fee": o.get("UpfrontFee"),
                "currency": o.get("CurrencyCode"),
            }
            for o in found
        ),
        key=lambda o: o["start"],
    )
    res.capacity_blocks = {"status": OK, "offerings": rows}
    detail = (
        f"{len(rows)} offering(s) of {count} x {instance_type} for 24 h in {az or res.region}; earliest "
        f"{rows[0]['start']} in {rows[0]['availability_zone']}"
        if rows
        else f"no Capacity Block offering of {count} x {instance_type} for 24 h in {az or res.region}"
    )
    res.check("capacity-blocks", OK, detail)
