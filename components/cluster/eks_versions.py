"""EKS Kubernetes versions: when each leaves standard and extended support, and what its control plane costs.

Dates: Amazon EKS user guide, "Understand the Kubernetes version lifecycle on EKS", release calendar
(https://docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html, source
awsdocs/amazon-eks-user-guide latest/ug/versioning/kubernetes-versions.adoc; 1.35's row as the calendar gives it:
EKS release January 27, 2026, end of standard support March 27, 2027, end of extended support March 27, 2028).
All dates are UTC. "Billing for extended support starts at the beginning of the day that the version reaches end of
standard support", and "on the end of extended support date, you can no longer create new Amazon EKS clusters with
the unsupported version".

Price per cluster hour: $0.10 in standard support, $0.60 in extended support (Amazon EKS pricing,
https://aws.amazon.com/eks/pricing/). The state is the one on the day the estimate is made (:func:`today`), so the
same stack config prices differently once its version leaves standard support.

The default version is the newest one in this table: 1.35 (standard support until 2027-03-27), which the EKS AL2023
NVIDIA AMI (``AL2023_x86_64_NVIDIA``, the GPU nodes' amiType) is built for (awslabs/amazon-eks-ami releases, e.g.
v20260512 for 1.35). A version newer than the table is accepted with a warning and priced at the standard rate
(a new version is in standard support for its first 14 months); add its row here from the calendar.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timezone

SOURCE = (
    "Amazon EKS user guide, \"Understand the Kubernetes version lifecycle on EKS\" "
    "(https://docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html)"
)
STANDARD_USD_HOUR = 0.10
"""Control plane per cluster hour in standard support (https://aws.amazon.com/eks/pricing/)."""
EXTENDED_USD_HOUR = 0.60
"""Control plane per cluster hour in extended support (https://aws.amazon.com/eks/pricing/)."""

STANDARD, EXTENDED, ENDED, NEWER = "standard", "extended", "ended", "newer"


@dataclass(frozen=True)
class EksVersion:
    """One row of the EKS release calendar."""

    version: str
    eks_release: date
    end_of_standard: date
    """From this day (UTC) the cluster is billed the extended-support rate."""
    end_of_extended: date
    """From this day no new cluster can be created on the version."""


VERSIONS: tuple[EksVersion, ...] = (
    EksVersion("1.29", date(2024, 1, 23), date(2025, 3, 23), date(2026, 3, 23)),
    EksVersion("1.30", date(2024, 5, 23), date(2025, 7, 23), date(2026, 7, 23)),
    EksVersion("1.31", date(2024, 9, 26), date(2025, 11, 26), date(2026, 11, 26)),
    EksVersion("1.32", date(2025, 1, 23), date(2026, 3, 23), date(2027, 3, 23)),
    EksVersion("1.33", date(2025, 5, 29), date(2026, 7, 29), date(2027, 7, 29)),
    EksVersion("1.34", date(2025, 10, 2), date(2026, 12, 2), date(2027, 12, 2)),
    EksVersion("1.35", date(2026, 1, 27), date(2027, 3, 27), date(2028, 3, 27)),
)
BY_VERSION = {v.version: v for v in VERSIONS}
DEFAULT_VERSION = VERSIONS[-1].version


def today() -> date:
    """The UTC date estimates and support checks use (tests pin it)."""
    return datetime.now(timezone.utc).date()


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def support(version: str, on: date | None = None) -> str:
    """``standard`` | ``extended`` | ``ended`` on ``on`` (default today); ``newer`` for a version after the table."""
    on = on or today()
    row = BY_VERSION.get(version)
    if row is None:
        return NEWER if _key(version) > _key(VERSIONS[-1].version) else ENDED
    if on >= row.end_of_extended:
        return ENDED
    return EXTENDED if on >= row.end_of_standard else STANDARD


def control_plane_usd_hour(version: str, on: date | None = None) -> float:
    """What one EKS control plane on ``version`` costs per hour on ``on`` (standard or extended rate)."""
    return EXTENDED_USD_HOUR if support(version, on) == EXTENDED else STANDARD_USD_HOUR


def in_standard(on: date | None = None) -> list[str]:
    """Versions in standard support on ``on``, oldest first."""
    return [v.version for v in VERSIONS if support(v.version, on) == STANDARD]


def version_problem(version: str, on: date | None = None) -> str | None:
    """Why no cluster can be created on ``version`` on ``on`` (the fix included), else None."""
    on = on or today()
    if support(version, on) != ENDED:
        return None
    row = BY_VERSION.get(version)
    when = f"ended {row.end_of_extended.isoformat()}" if row else "is older than every version EKS offers"
    return (
        f"EKS extended support for {version} {when}: EKS creates no cluster on it; use "
        f"{' or '.join(in_standard(on)) or DEFAULT_VERSION} (standard support, ${STANDARD_USD_HOUR:.2f}/h); "
        f"dates: {SOURCE}"
    )


def version_warning(version: str, on: date | None = None) -> str | None:
    """What to tell the deployer about ``version`` on ``on``: extended support (price, end) or an unknown newer one."""
    on = on or today()
    state = support(version, on)
    if state == EXTENDED:
        row = BY_VERSION[version]
        return (
            f"kubernetesVersion {version} is in EKS extended support since {row.end_of_standard.isoformat()}: the "
            f"control plane costs ${EXTENDED_USD_HOUR:.2f}/h instead of ${STANDARD_USD_HOUR:.2f}/h, and EKS "
            f"upgrades it itself after {row.end_of_extended.isoformat()}; use "
            f"{' or '.join(in_standard(on)) or DEFAULT_VERSION} (standard support)"
        )
    if state == NEWER:
        return (
            f"kubernetesVersion {version} is newer than the EKS release calendar this stack holds "
            f"(components/cluster/eks_versions.py, newest {VERSIONS[-1].version}): priced at the standard rate "
            f"${STANDARD_USD_HOUR:.2f}/h; check that EKS and the AL2023 NVIDIA AMI offer it"
        )
    return None
