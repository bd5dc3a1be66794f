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
Pulumi program and other tools. The AWS calls are ``tools/preflight_aws.py``, the checks and the verdict
``tools/preflight_checks.py``; this module parses the command, renders the table and keeps the public names.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

import boto3
import botocore.exceptions
from botocore.config import Config

from ..training.cli import url_problem
from ..efacheck.cli import ArgumentParser, run_cli
from ..efacheck.exit_codes import EXIT_INTERRUPTED
from .cli import positive_int
from .preflight_aws import (
    DENIED_CODES,
    QUOTA_G_VT,
    QUOTA_P,
    QUOTA_STANDARD,
    PreflightError,
    Unanswered,
    capacity_block_offerings,
    eks_refuses_cluster_subnets,
    offered_azs,
    quota_code_for,
    recommend_az,
    reservation_az,
    zone_ids,
)
from .preflight_checks import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_UNDETERMINED,
    FAILED,
    OK,
    UNKNOWN,
    PreflightResult,
    run_preflight,
)

__all__ = [
    "DENIED_CODES",
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_UNDETERMINED",
    "FAILED",
    "OK",
    "QUOTA_G_VT",
    "QUOTA_P",
    "QUOTA_STANDARD",
    "UNKNOWN",
    "PreflightError",
    "PreflightResult",
    "Unanswered",
    "capacity_block_offerings",
    "eks_refuses_cluster_subnets",
    "format_table",
    "main",
    "offered_azs",
    "quota_code_for",
    "recommend_az",
    "reservation_az",
    "run_preflight",
    "usage_problem",
    "zone_ids",
]
"""The public names, importable from here (the AWS calls live in preflight_aws, the checks in preflight_checks)."""


def format_table(res: PreflightResult) -> str:
    lines = [
        f"Preflight {res.instance_type} x{res.count} in {res.region} (EFA {'on' if res.efa else 'off'})",
        f"{'AZ':<20} {'ZONE ID':<10} OFFERED  EKS CLUSTER SUBNETS",
    ]
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
    verdict = {
        "ok": "OK (every check passed)",
        "failed": f"FAILED ({len(res.problems)} check(s) failed)",
        "undetermined": f"UNDETERMINED ({len(res.unknowns)} check(s) could not be answered; not OK)",
    }
    lines.append("RESULT: " + verdict[res.status])
    return "\n".join(lines)


REGION = re.compile(r"[a-z]{2}(-[a-z]+)+-\d+")
"""AWS region names (us-east-1, us-gov-west-1, ap-southeast-2): docs.aws.amazon.com/global-infrastructure/latest/regions/aws-regions.html."""
INSTANCE_TYPE = re.compile(r"[a-z][a-z0-9-]*\.[a-z0-9-]+")
"""EC2 instance type names: FAMILY.SIZE (g6.12xlarge, p5e.48xlarge, u-6tb1.metal)."""
MAX_NODES_PER_NODE_GROUP = 450
"""EKS service quota 'Nodes per managed node group' (docs.aws.amazon.com/eks/latest/userguide/service-quotas.html)."""


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    p = ArgumentParser(
        prog=prog or "python -m ray_efa_eks.tools.preflight",
        description=__doc__.split("\n\n")[0],
        exit_codes="preflight",
    )
    p.add_argument(
        "--region",
        help="AWS region (default: $AWS_REGION, then $AWS_DEFAULT_REGION or your profile's "
        "region; boto3 alone reads only the latter two)",
    )
    p.add_argument("--instance-type", default="g6.12xlarge", help="the GPU instance type (default g6.12xlarge)")
    p.add_argument("--count", type=positive_int, default=2, help="GPU nodes to launch (>= 1)")
    p.add_argument("--az", help="check this availability zone of the region only (e.g. us-east-1a)")
    p.add_argument(
        "--efa",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="check EFA support and the EFA interfaces the type takes (default on)",
    )
    p.add_argument(
        "--capacity-reservation-id",
        metavar="cr-...",
        help="check this ODCR / Capacity Block: type, AZ, state, available count",
    )
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
        return (
            f"--region {a.region!r}: not an AWS region name; e.g. --region us-east-1 (or leave it out to use "
            "AWS_REGION / your profile's region)"
        )
    if a.az is not None:
        region = a.region or boto3.session.Session().region_name
        if not re.fullmatch(r"[a-z]{2}(-[a-z]+)+-\d+[a-z]", a.az) or (region and not a.az.startswith(region)):
            return (
                f"--az {a.az!r}: not an availability zone of {region or 'the region'}; e.g. --az "
                f"{region or 'us-east-1'}a"
            )
    if not INSTANCE_TYPE.fullmatch(a.instance_type):
        return f"--instance-type {a.instance_type!r}: not an EC2 instance type name; e.g. --instance-type g6.12xlarge"
    if a.count > MAX_NODES_PER_NODE_GROUP:
        return (
            f"--count {a.count}: an EKS managed node group holds at most {MAX_NODES_PER_NODE_GROUP} nodes (EKS "
            "service quotas: 'Nodes per managed node group'); e.g. --count 2"
        )
    if a.endpoint_url is not None:
        why = url_problem(a.endpoint_url, "--endpoint-url", example="http://127.0.0.1:5000")
        if why:
            return why
    cr = a.capacity_reservation_id
    if cr is not None and not (RESERVATION_ID.fullmatch(cr) or RESOURCE_GROUP_ARN.fullmatch(cr)):
        return (
            f"--capacity-reservation-id {cr!r}: expected cr- and 8 or 17 hex digits (an ODCR or Capacity Block), "
            "or a reservation resource group ARN"
        )
    return None


AWS_CONNECT_TIMEOUT_S, AWS_READ_TIMEOUT_S, AWS_ATTEMPTS = 5, 10, 2
"""Each EC2 / Service Quotas call: 5 s to connect, 10 s for each read, 2 attempts in all (botocore Config
``total_max_attempts``, standard retry mode), so an endpoint that accepts and never answers ends the command with
exit 2 in about 25 s (the first call without an answer stops it: "nothing was checked")."""


def _main(a: argparse.Namespace) -> int:
    cfg = Config(
        connect_timeout=AWS_CONNECT_TIMEOUT_S,
        read_timeout=AWS_READ_TIMEOUT_S,
        retries={"total_max_attempts": AWS_ATTEMPTS, "mode": "standard"},
    )
    try:
        session = boto3.session.Session(region_name=a.region)
        if session.region_name is None:
            raise PreflightError("no AWS region: pass --region or set AWS_REGION")
        clients = {
            "ec2": session.client("ec2", endpoint_url=a.endpoint_url, config=cfg),
            "service-quotas": session.client("service-quotas", endpoint_url=a.endpoint_url, config=cfg),
        }
        res = run_preflight(
            clients, a.instance_type, a.count, az=a.az, efa=a.efa, capacity_reservation_id=a.capacity_reservation_id
        )
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
