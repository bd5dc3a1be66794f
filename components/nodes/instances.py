"""Instance catalogue: the EC2 facts every other module sizes from.

The figures are generated, not typed: ``tools/dev/gen_catalogue.py`` (``ray-efa-eks catalogue --write``) writes
``catalogue.json`` beside this module from EC2 ``DescribeInstanceTypes`` as moto ships it (AWS's own output), for
every EFA-capable GPU type the pinned image can drive plus the system-node types; the few facts EC2 does not publish
(GPU compute capability, GPUDirect RDMA, an EFA line rate above the cards' bandwidth) come from one hand table there,
each with its source. Types the image cannot drive are listed in :data:`REFUSED` with the reason. A test fails when
the committed file and the generator disagree.

Prices are on-demand Linux shared-tenancy USD/hour, held only for the regions in :data:`PRICED_REGIONS` and only
for the types the price source covers; elsewhere ``hourly_usd`` raises :class:`NoPrice` rather than copying a
figure. They only feed the cost estimate; check the AWS pricing page before budgeting.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CATALOGUE_PATH = Path(__file__).with_name("catalogue.json")
_DATA: dict[str, Any] = json.loads(CATALOGUE_PATH.read_text())

PRICED_REGIONS: tuple[str, ...] = tuple(_DATA["priced_regions"])
"""Regions with price figures. Source (``catalogue.json`` ``price_source``): the AWS Price List API (AmazonEC2,
on-demand, Linux, shared tenancy) as of 2026-07-20, as generated into aws/karpenter-provider-aws
pkg/providers/pricing/zz_generated.pricing_aws.go (which holds us-east-1 only); NAT gateway and EKS from their AWS
pricing pages. A region is added only with its own figures."""

EKS_CONTROL_PLANE_USD_HOUR = 0.10
"""EKS standard-support control plane, per cluster (extended support, past a version's 14 months: $0.60)."""

NAT_GATEWAY_USD_HOUR: dict[str, float] = {"us-east-1": 0.045}
"""One NAT gateway, per hour, before data processing charges."""

NAT_GATEWAY_USD_PER_GB: dict[str, float] = {"us-east-1": 0.045}
"""NAT gateway data processing, per GB in either direction (on top of any data transfer charge)."""

INTERFACE_ENDPOINT_USD_HOUR: dict[str, float] = {"us-east-1": 0.01}
"""One interface VPC endpoint in one AZ, per hour (AWS PrivateLink pricing, https://aws.amazon.com/privatelink/pricing/:
"billed for each hour that your VPC endpoint remains provisioned in each Availability Zone")."""

INTERFACE_ENDPOINT_USD_PER_GB: dict[str, float] = {"us-east-1": 0.01}
"""Data processed by interface endpoints, per GB (the first PB a month; PrivateLink pricing)."""


class NoPrice(LookupError):
    """No price figure for ``what`` in ``region``: the estimate says so instead of guessing."""

    def __init__(self, region: str, what: str):
        self.region = region
        self.what = what
        why = (
            "the price source has no figure for it"
            if region in PRICED_REGIONS
            else f"prices are held for {', '.join(PRICED_REGIONS)} only"
        )
        super().__init__(f"no price for {region} ({what}; {why}, see components/nodes/instances.py)")


def regional(table: dict[str, float], region: str, what: str) -> float:
    """``table[region]`` or :class:`NoPrice`."""
    try:
        return table[region]
    except KeyError:
        raise NoPrice(region, what) from None


@dataclass(frozen=True)
class InstanceType:
    """One EC2 instance type as far as this library cares (fields as in ``catalogue.json``)."""

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
    efa_cards: tuple[int, ...] = ()
    """Network cards whose ``InterfaceTypes`` list ``efa``, one EFA interface each (p6-b300.48xlarge: 1-16; its
    card 0 is ENA only). Empty: the first ``max_efa_interfaces`` cards."""
    efa_only_supported: bool = False
    """Every EFA card also lists ``efa-only`` (an EFA without an IP address; secondary interfaces only)."""
    efa_gbps: float = 0.0
    """Network bandwidth per node, Gbit/s, that EFA traffic can use (0 without EFA): the line rate the EFA
    check's large-message busbw is measured against (busbw GB/s * 8 / efa_gbps). ``NetworkPerformance`` (the
    node's aggregate: g6e.48xlarge lists 400 on each of 4 cards but 400 for the node), or the hand table's figure."""
    capacity_blocks: bool = False
    """EC2 sells Capacity Blocks for ML of this type (``SupportedUsageClasses`` has ``capacity-block``)."""
    gpu_compute_capability: float | None = None
    max_pods: int = 0
    """The kubelet's maxPods on the EKS AL2023 AMI with the VPC CNI's defaults (``tools/dev/gen_catalogue.max_pods``);
    it also sizes the memory the kubelet reserves."""

    @property
    def efa_card_indexes(self) -> tuple[int, ...]:
        """The cards that get an EFA interface."""
        if not self.efa_supported:
            return ()
        return self.efa_cards or tuple(range(self.max_efa_interfaces))

    @property
    def family(self) -> str:
        """``g6`` for ``g6.12xlarge``: quota and AMI choices go by family."""
        return self.name.split(".", 1)[0]

    def hourly_usd(self, region: str) -> float:
        """On-demand price in ``region``; :class:`NoPrice` where the catalogue has no figure for it."""
        return regional(self.price_usd_hour, region, self.name)


def _from_json(name: str, d: dict[str, Any]) -> InstanceType:
    return InstanceType(
        name,
        d["vcpus"],
        d["memory_mib"],
        d.get("gpus", 0),
        d.get("gpu_model"),
        d.get("gpu_memory_mib", 0),
        d.get("efa_supported", False),
        d.get("max_efa_interfaces", 0),
        d["network_cards"],
        d.get("gpudirect_rdma", False),
        dict(d.get("price_usd_hour", {})),
        tuple(d.get("efa_cards", ())),
        d.get("efa_only_supported", False),
        float(d.get("efa_gbps", 0.0)),
        d.get("capacity_blocks", False),
        d.get("gpu_compute_capability"),
        d.get("max_pods", 0),
    )


CATALOGUE: dict[str, InstanceType] = {name: _from_json(name, d) for name, d in _DATA["types"].items()}
"""Every supported type by name (generated; see the module docstring)."""

REFUSED: dict[str, str] = dict(_DATA["refused"])
"""EFA GPU types in EC2's data that the pinned image cannot drive -> why (e.g. p3dn.24xlarge: V100 vs CUDA 13)."""


def lookup(name: str, *, key: str = "instance type") -> InstanceType:
    """Catalogue entry for ``name``, or a ValueError that lists what is supported."""
    try:
        return CATALOGUE[name]
    except KeyError:
        if name in REFUSED:
            raise ValueError(f"{key}: {name} is not supported: {REFUSED[name]}") from None
        raise ValueError(
            f"{key}: unknown instance type {name!r}; supported: {', '.join(sorted(CATALOGUE))}. "
            "The catalogue is generated from EC2's instance data: `ray-efa-eks catalogue --write` "
            "(tools/dev/gen_catalogue.py)."
        ) from None
