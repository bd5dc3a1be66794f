"""The instance catalogue must agree with EC2 DescribeInstanceTypes (moto ships AWS's own data)."""

import gzip
import json
import re
from pathlib import Path

import moto
import pytest

from ray_efa_eks.components.instances import CATALOGUE, lookup

REQUIRED = ["g6.12xlarge", "g6.48xlarge", "g6e.12xlarge", "g6e.48xlarge", "g5.48xlarge",
            "p4d.24xlarge", "p5.48xlarge", "p5en.48xlarge", "m7i.xlarge", "m7i.2xlarge"]
AWS_DATA = json.load(gzip.open(Path(moto.__file__).parent / "ec2/resources/instance_types.json.gz"))


def test_required_types_present():
    assert set(REQUIRED) <= set(CATALOGUE)


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_matches_describe_instance_types(name):
    ours, aws = CATALOGUE[name], AWS_DATA[name]
    assert ours.vcpus == aws["VCpuInfo"]["DefaultVCpus"]
    assert ours.memory_mib == aws["MemoryInfo"]["SizeInMiB"]
    gpus = aws.get("GpuInfo", {}).get("Gpus", [])
    assert ours.gpus == sum(g["Count"] for g in gpus)
    if gpus:
        assert ours.gpu_model == gpus[0]["Name"]
        assert ours.gpu_memory_mib == gpus[0]["MemoryInfo"]["SizeInMiB"]
    net = aws["NetworkInfo"]
    assert ours.efa_supported == net["EfaSupported"]
    assert ours.max_efa_interfaces == net.get("EfaInfo", {}).get("MaximumEfaInterfaces", 0)
    assert ours.network_cards == net["MaximumNetworkCards"]


def test_prices_only_for_the_priced_regions():
    """Every type has a figure for each priced region and none for another (no copied prices: issue 18)."""
    from ray_efa_eks.components.instances import PRICED_REGIONS

    for it in CATALOGUE.values():
        assert set(it.price_usd_hour) == set(PRICED_REGIONS) and all(p > 0 for p in it.price_usd_hour.values())


def test_rdma_only_on_p_family():
    assert {n for n, t in CATALOGUE.items() if t.gpudirect_rdma} == {"p4d.24xlarge", "p5.48xlarge", "p5en.48xlarge"}


def test_lookup_unknown_names_supported():
    with pytest.raises(ValueError, match="supported: .*g6.12xlarge"):
        lookup("g7.huge")


def _aggregate_gbps(perf: str) -> float:
    """DescribeInstanceTypes' NetworkPerformance as Gbit/s: '3200 Gigabit' -> 3200, '4x 100 Gigabit' -> 400."""
    m = re.fullmatch(r"(?:(\d+)x )?(?:Up to )?([\d.]+) Gigabit", perf)
    assert m, perf
    return float(m.group(1) or 1) * float(m.group(2))


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_efa_gbps_matches_aws_network_performance(name):
    ours, net = CATALOGUE[name], AWS_DATA[name]["NetworkInfo"]
    if not net["EfaSupported"]:
        assert ours.efa_gbps == 0.0
        return
    assert ours.efa_gbps == _aggregate_gbps(net["NetworkPerformance"])
    # never more than the cards can carry together
    assert ours.efa_gbps <= sum(c["PeakBandwidthInGbps"] for c in net["NetworkCards"])


def test_efa_gbps_differs_within_a_family():
    assert CATALOGUE["g6.12xlarge"].efa_gbps == 40.0 and CATALOGUE["g6.48xlarge"].efa_gbps == 100.0
