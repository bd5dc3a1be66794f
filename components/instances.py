"""Instance catalogue: the EC2 facts every other module sizes from.

Figures mirror EC2 ``DescribeInstanceTypes`` (checked in tests against the
instance data that ``moto`` ships, which is AWS's own output). Prices are
on-demand Linux shared-tenancy USD/hour, held only for the regions in
:data:`PRICED_REGIONS`; another region has no figure (``hourly_usd`` raises
:class:`NoPrice`) rather than a copy of us-east-1's. They only feed the cost
estimate; check the AWS pricing page before budgeting.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PRICED_REGIONS = ("us-east-1",)
"""Regions with price figures. Source: the AWS Price List API (AmazonEC2, on-demand, Linux, shared tenancy) as
of 2026-07-20, as generated into aws/karpenter-provider-aws pkg/providers/pricing/zz_generated.pricing_aws.go
(which holds us-east-1 only); NAT gateway and EKS from their AWS pricing pages. Add a region only with its own
figures for every type below."""

EKS_CONTROL_PLANE_USD_HOUR = 0.10
"""EKS standard-support control plane, per cluster (extended support, past a version's 14 months: $0.60)."""

NAT_GATEWAY_USD_HOUR: dict[str, float] = {"us-east-1": 0.045}
"""One NAT gateway, per hour, before data processing charges."""

NAT_GATEWAY_USD_PER_GB: dict[str, float] = {"us-east-1": 0.045}
"""NAT gateway data processing, per GB in either direction (on top of any data transfer charge)."""


class NoPrice(LookupError):
    """No price figure for ``what`` in ``region``: the estimate says so instead of guessing."""

    def __init__(self, region: str, what: str):
        self.region = region
        self.what = what
        super().__init__(f"no price for {region} ({what}; prices are held for {', '.join(PRICED_REGIONS)} only, "
                         "see components/instances.py)")


def regional(table: dict[str, float], region: str, what: str) -> float:
    """``table[region]`` or :class:`NoPrice`."""
    try:
        return table[region]
    except KeyError:
        raise NoPrice(region, what) from None


@dataclass(frozen=True)
class InstanceType:
    """One EC2 instance type as far as this library cares."""

    name: str
    vcpus: int
    memory_mib: int
    gpus: int = 0
    gpu_model: str | None = None
    gpu_memory_mib: int = 0
    efa_supported: bool = False
    max_efa_interfaces: int = 0
    network_cards: int = 1
    gpudirect_rdma: bool = False
    price_usd_hour: dict[str, float] = field(default_factory=dict)

    @property
    def efa_only_supported(self) -> bool:
        """Every network card after the first can carry an ``efa-only`` interface (EFA without an IP address)."""
        return self.name in EFA_ONLY_TYPES

    @property
    def capacity_blocks(self) -> bool:
        """EC2 sells Capacity Blocks for ML of this type (``SupportedUsageClasses`` has ``capacity-block``)."""
        return self.name in CAPACITY_BLOCK_TYPES

    @property
    def efa_gbps(self) -> float:
        """Network bandwidth per node, Gbit/s, that EFA traffic can use (0 without EFA): the line rate the EFA
        check's large-message busbw is measured against (busbw GB/s * 8 / efa_gbps)."""
        return EFA_GBPS.get(self.name, 0.0) if self.efa_supported else 0.0

    @property
    def family(self) -> str:
        """``g6`` for ``g6.12xlarge``: quota and AMI choices go by family."""
        return self.name.split(".", 1)[0]

    def hourly_usd(self, region: str) -> float:
        """On-demand price in ``region``; :class:`NoPrice` where the catalogue has no figure for it."""
        return regional(self.price_usd_hour, region, self.name)


def _prices(us_east_1: float) -> dict[str, float]:
    return {"us-east-1": us_east_1}


CATALOGUE: dict[str, InstanceType] = {
    it.name: it
    for it in (
        InstanceType("m7i.xlarge", 4, 16384, price_usd_hour=_prices(0.2016)),
        InstanceType("m7i.2xlarge", 8, 32768, price_usd_hour=_prices(0.4032)),
        InstanceType("g6.12xlarge", 48, 196608, 4, "L4", 22888, True, 1, 1, False, _prices(4.6016)),
        InstanceType("g6.48xlarge", 192, 786432, 8, "L4", 22888, True, 1, 1, False, _prices(13.3504)),
        InstanceType("g6e.12xlarge", 48, 393216, 4, "L40S", 45776, True, 1, 1, False, _prices(10.49264)),
        InstanceType("g6e.48xlarge", 192, 1572864, 8, "L40S", 45776, True, 4, 4, False, _prices(30.13118)),
        InstanceType("g5.48xlarge", 192, 786432, 8, "A10G", 22888, True, 1, 1, False, _prices(16.2880)),
        InstanceType("p4d.24xlarge", 96, 1179648, 8, "A100", 40960, True, 4, 4, True, _prices(21.957642)),
        InstanceType("p5.48xlarge", 192, 2097152, 8, "H100", 81920, True, 32, 32, True, _prices(55.0400)),
        InstanceType("p5en.48xlarge", 192, 2097152, 8, "H200", 144384, True, 16, 16, True, _prices(63.2960)),
    )
}


# DescribeInstanceTypes figures for issue 19 (kept beside the table so that other fields can change there freely):
# NetworkCards[].InterfaceTypes lists "efa-only" on every card of these types (AWS: EFA-only interfaces, Oct 2024,
# "available on all EFA supported instances"; secondary interfaces only: card 0 / device 0 stays "efa"), and
# SupportedUsageClasses lists "capacity-block" for these. One EFA interface per network card: max_efa_interfaces
# equals network_cards for every EFA type here (p5.48xlarge: 32 cards, 32 EFA interfaces). tests/test_capacity.py
# checks all three against moto's copy of AWS's data.
EFA_ONLY_TYPES = frozenset({"g6.12xlarge", "g6.48xlarge", "g6e.12xlarge", "g6e.48xlarge", "g5.48xlarge",
                            "p4d.24xlarge", "p5.48xlarge", "p5en.48xlarge"})
CAPACITY_BLOCK_TYPES = frozenset({"p4d.24xlarge", "p5.48xlarge", "p5en.48xlarge"})

# DescribeInstanceTypes NetworkInfo.NetworkPerformance (the node's aggregate; "4x 100 Gigabit" = 400) for the EFA
# types: the line rate of the EFA check (issue 16). Not the sum of NetworkCards[].PeakBandwidthInGbps: g6e.48xlarge
# lists 400 on each of its 4 cards but 400 for the node. g6.12xlarge (40) is not g6.48xlarge (100).
# tests/test_catalogue.py checks these against moto's copy of AWS's data.
EFA_GBPS: dict[str, float] = {
    "g6.12xlarge": 40.0, "g6.48xlarge": 100.0, "g6e.12xlarge": 100.0, "g6e.48xlarge": 400.0, "g5.48xlarge": 100.0,
    "p4d.24xlarge": 400.0, "p5.48xlarge": 3200.0, "p5en.48xlarge": 3200.0,
}


def lookup(name: str, *, key: str = "instance type") -> InstanceType:
    """Catalogue entry for ``name``, or a ValueError that lists what is supported."""
    try:
        return CATALOGUE[name]
    except KeyError:
        raise ValueError(
            f"{key}: unknown instance type {name!r}; supported: {', '.join(sorted(CATALOGUE))}. "
            "Add it to components/instances.py with its DescribeInstanceTypes figures."
        ) from None
