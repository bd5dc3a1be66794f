"""The instance catalogue is generated from EC2 DescribeInstanceTypes (moto ships AWS's own data), and every
catalogue GPU type produces a stack whose layout rules pass, sized from the catalogue alone."""

from __future__ import annotations

import copy
import re
import shlex
import shutil

import pytest

from ray_efa_eks.components.nodes.capacity import CAPACITY_BLOCK, config_problem
from ray_efa_eks.components.config.config import ConfigError, StackConfig
from ray_efa_eks.components.nodes.instances import CATALOGUE, PRICED_REGIONS, REFUSED, NoPrice, lookup
from ray_efa_eks.tools.dev import gen_catalogue as gen
from ray_efa_eks.tools import layout, mockrun
from ray_efa_eks.tools.plan_run import make_plan, plan_tree
from ray_efa_eks.tools.preflight import QUOTA_G_VT, QUOTA_P, quota_code_for
from tests.helpers.catalogue import catalogue_gpu_region

AWS_DATA = gen.load_instance_types()
GPU_TYPES = sorted(n for n, t in CATALOGUE.items() if t.gpus)


# -- generated, and checked against the generator ------------------------------------------------------------------


def test_committed_files_are_what_the_generator_writes():
    assert gen.stale() == [], "run `ray-efa-eks catalogue --write`"


def test_check_notices_a_hand_edit(tmp_path):
    for rel in (gen.CATALOGUE_FILE, gen.OFFERINGS_FILE, gen.DOCS_FILE):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(gen.ROOT / rel, tmp_path / rel)
    assert gen.stale(tmp_path) == []
    path = tmp_path / gen.CATALOGUE_FILE
    path.write_text(path.read_text().replace('"efa_gbps": 3200.0', '"efa_gbps": 1600.0', 1))
    assert gen.stale(tmp_path) == [gen.CATALOGUE_FILE]
    assert gen.write(tmp_path) == [gen.CATALOGUE_FILE] and gen.stale(tmp_path) == []


def test_every_efa_gpu_type_in_aws_data_is_supported_or_refused_by_name():
    efa_gpu = gen.efa_gpu_types(AWS_DATA)
    assert len(efa_gpu) == 37  # moto 5.2.5
    assert set(GPU_TYPES) | set(REFUSED) == set(efa_gpu) and not set(GPU_TYPES) & set(REFUSED)
    assert {
        "p6-b200.48xlarge",
        "p6-b300.48xlarge",
        "p5e.48xlarge",
        "p4de.24xlarge",
        "g6e.24xlarge",
        "g7.48xlarge",
        "g7e.48xlarge",
        "g5.12xlarge",
    } <= set(GPU_TYPES)
    assert set(REFUSED) == {"p3dn.24xlarge"}
    assert (
        "V100" in REFUSED["p3dn.24xlarge"]
        and "compute capability 7.0" in REFUSED["p3dn.24xlarge"]
        and "CUDA 13.0" in REFUSED["p3dn.24xlarge"]
    )
    assert {"m7i.xlarge", "m7i.2xlarge"} <= set(CATALOGUE)


def test_a_refused_type_is_refused_by_name_with_its_reason():
    with pytest.raises(
        ConfigError,
        match=r"gpuInstanceType = 'p3dn.24xlarge' is invalid: not supported: its V100 "
        r"GPUs \(compute capability 7.0\) cannot run the pinned image's CUDA 13.0",
    ):
        StackConfig.from_mapping({"gpuInstanceType": "p3dn.24xlarge"})
    with pytest.raises(ValueError, match="p3dn.24xlarge is not supported: its V100"):
        lookup("p3dn.24xlarge")
    with pytest.raises(ValueError, match="supported: .*g6.12xlarge"):
        lookup("g7.huge")


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
        assert ours.gpu_compute_capability >= gen.MIN_COMPUTE_CAPABILITY
    net = aws["NetworkInfo"]
    assert ours.efa_supported == net["EfaSupported"]
    assert ours.max_efa_interfaces == net.get("EfaInfo", {}).get("MaximumEfaInterfaces", 0)
    assert ours.network_cards == net["MaximumNetworkCards"]
    assert ours.capacity_blocks == ("capacity-block" in aws["SupportedUsageClasses"])


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_efa_gbps_is_network_performance_unless_the_hand_table_says_why(name):
    ours, net = CATALOGUE[name], AWS_DATA[name]["NetworkInfo"]
    if not net["EfaSupported"]:
        assert ours.efa_gbps == 0.0
        return
    hand = gen.HAND_FACTS["efa_gbps"].get(name)
    assert ours.efa_gbps == (hand.value if hand else gen.network_gbps(net["NetworkPerformance"]))
    if hand is None:  # never more than the EFA cards can carry together
        assert ours.efa_gbps <= sum(
            c["PeakBandwidthInGbps"] for c in net["NetworkCards"] if "efa" in c["InterfaceTypes"]
        )


def test_line_rates_of_the_large_types():
    rates = {
        n: CATALOGUE[n].efa_gbps
        for n in ("g6.12xlarge", "g6.48xlarge", "p4de.24xlarge", "p5e.48xlarge", "p6-b200.48xlarge", "p6-b300.48xlarge")
    }
    assert rates == {
        "g6.12xlarge": 40.0,
        "g6.48xlarge": 100.0,
        "p4de.24xlarge": 400.0,
        "p5e.48xlarge": 3200.0,
        "p6-b200.48xlarge": 3200.0,
        "p6-b300.48xlarge": 6400.0,
    }
    assert gen.network_gbps("4x 100 Gigabit") == 400.0 and gen.network_gbps("Up to 12.5 Gigabit") is None


def test_prices_only_where_the_source_has_them():
    """A figure only where held: us-east-1 from the price source, nothing copied to other regions."""
    assert PRICED_REGIONS == ("us-east-1",)
    for name, it in CATALOGUE.items():
        assert it.price_usd_hour == (
            {"us-east-1": gen.PRICES["us-east-1"][name]} if name in gen.PRICES["us-east-1"] else {}
        )
    assert CATALOGUE["p5e.48xlarge"].price_usd_hour == {}  # not in the source: "no price", not a guess
    with pytest.raises(NoPrice, match=r"no price for us-east-1 \(p5e.48xlarge; the price source has no figure"):
        CATALOGUE["p5e.48xlarge"].hourly_usd("us-east-1")
    assert CATALOGUE["g6.12xlarge"].hourly_usd("us-east-1") == 4.6016
    assert CATALOGUE["p6-b200.48xlarge"].hourly_usd("us-east-1") == 113.9328


def test_rdma_on_the_p_families_only():
    assert {n for n, t in CATALOGUE.items() if t.gpudirect_rdma} == {n for n in GPU_TYPES if n.startswith("p")}


def test_every_hand_fact_names_its_source():
    for section, facts in gen.HAND_FACTS.items():
        for key, fact in facts.items():
            assert re.search(r"https://\S+", fact.source), (section, key)
    assert "https://" in gen.MIN_COMPUTE_CAPABILITY_SOURCE and "https://" in gen.PRICE_SOURCE


# -- the generator refuses what it cannot fully describe --------------------------------------------------------


def _with(name: str, **changes):
    data = copy.deepcopy({n: AWS_DATA[n] for n in [*gen.efa_gpu_types(AWS_DATA), *gen.SYSTEM_TYPES]})
    for path, value in changes.items():
        node = data[name]
        *parents, leaf = path.split("__")
        for p in parents:
            node = node[p]
        node[leaf] = value
    return data


def test_generator_refuses_an_unknown_gpu_model():
    data = _with("g6.12xlarge")
    data["g6.12xlarge"]["GpuInfo"]["Gpus"][0]["Name"] = "X9000"
    with pytest.raises(gen.CatalogueError, match="g6.12xlarge: no compute capability for GPU model 'X9000'"):
        gen.build(data)


def test_generator_refuses_a_family_without_gdrdma_fact(monkeypatch):
    monkeypatch.delitem(gen.HAND_FACTS["gpudirect_rdma"], "p6-b300")
    with pytest.raises(gen.CatalogueError, match="p6-b300.48xlarge: GPUDirect RDMA of family p6-b300 unknown"):
        gen.build(_with("p6-b300.48xlarge"))


def test_generator_refuses_a_line_rate_the_cards_cannot_carry(monkeypatch):
    monkeypatch.delitem(gen.HAND_FACTS["efa_gbps"], "p6-b200.48xlarge")
    with pytest.raises(
        gen.CatalogueError,
        match="p6-b200.48xlarge: NetworkPerformance says 3200 Gbit/s but its EFA cards list 1600 together",
    ):
        gen.build(_with("p6-b200.48xlarge"))


def test_generator_refuses_efa_interfaces_it_cannot_lay_out():
    data = _with("p5.48xlarge", NetworkInfo__EfaInfo={"MaximumEfaInterfaces": 33})
    with pytest.raises(gen.CatalogueError, match="p5.48xlarge: MaximumEfaInterfaces 33 but 32 network cards"):
        gen.build(data)


def test_generator_refuses_an_arm_gpu_type_with_its_reason():
    data = _with("g5.12xlarge", ProcessorInfo__SupportedArchitectures=["arm64"])
    assert "x86_64 only" in gen.build(data)["refused"]["g5.12xlarge"]


# -- every catalogue GPU type, planned offline: the layout rules pass, sized from the catalogue ----------------------


@pytest.fixture(scope="module")
def planned(catalogue_runs):
    """type -> (run, plan): the shared mock run of each catalogue GPU type (tests/conftest.py) and its offline plan."""
    return {
        name: (run, make_plan(layout.from_mockrun(run), source="test", stack="dev", region=region))
        for name, (region, run) in catalogue_runs.items()
    }


@pytest.mark.parametrize("name", GPU_TYPES)
def test_every_gpu_type_plans_with_passing_layout_rules(planned, name):
    it = CATALOGUE[name]
    run, plan = planned[name]
    assert plan.error is None and plan.violations == [], plan.violations
    nis = run.one("aws:ec2/launchTemplate:LaunchTemplate", "gpu-lt")["networkInterfaces"]
    assert [n["networkCardIndex"] for n in nis if n.get("interfaceType") in ("efa", "efa-only")] == list(
        it.efa_card_indexes
    )
    assert len(list(it.efa_card_indexes)) == it.max_efa_interfaces
    worker = run.one("kubernetes:ray.io/v1:RayCluster")["spec"]["workerGroupSpecs"][0]
    limits = worker["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert int(limits["nvidia.com/gpu"]) == it.gpus and int(limits["vpc.amazonaws.com/efa"]) == it.max_efa_interfaces
    assert 0 < float(limits["cpu"]) < it.vcpus
    script = run.one("kubernetes:batch/v1:Job")["spec"]["template"]["spec"]["containers"][0]["command"][2]
    argv = shlex.split(script.split(" -- ", 1)[1].splitlines()[0])
    assert argv[argv.index("--expect-gpus-per-node") + 1] == str(it.gpus)
    assert argv[argv.index("--expect-nics") + 1] == str(it.max_efa_interfaces)
    assert float(argv[argv.index("--efa-gbps") + 1]) == it.efa_gbps
    assert ("--expect-gdrdma" in argv) == it.gpudirect_rdma
    efa_release = run.one("kubernetes:helm.sh/v3:Release", "efa")
    assert efa_release["values"]["supportedInstanceLabels"]["values"] == [name]
    assert quota_code_for(name) == (QUOTA_P if name.startswith("p") else QUOTA_G_VT)
    region = catalogue_gpu_region(name)
    block = config_problem(CAPACITY_BLOCK, "cr-0123456789abcdef0", it, f"{region}a", region, None)
    assert (block is None) == it.capacity_blocks


def test_the_large_types_get_their_interfaces_and_line_rate(planned):
    expect = {
        "p6-b200.48xlarge": (8, "3200"),
        "p6-b300.48xlarge": (16, "6400"),
        "p5e.48xlarge": (32, "3200"),
        "p4de.24xlarge": (4, "400"),
    }
    for name, (nics, gbps) in expect.items():
        run, plan = planned[name]
        assert run.outputs["efaInterfacesPerNode"] == nics
        assert (
            f"--expect-nics {nics} --expect-gdrdma --efa-gbps {gbps} "
            in run.one("kubernetes:batch/v1:Job")["spec"]["template"]["spec"]["containers"][0]["command"][2]
        )
        assert plan.settings["efaGate"] == {
            "nodes": "2",
            "gpusPerNode": "8",
            "efaInterfaces": str(nics),
            "lineRateGbps": gbps,
            "gpudirectRdma": "required",
        }
        assert plan.settings["nodeGroups"]["gpu-mng"]["efaInterfacesPerNode"] == nics


# -- every region ------------------------------------------------------------------------------------------------


def test_offerings_cover_every_region_and_only_catalogue_types():
    assert {"us-east-1", "us-east-2", "us-west-2", "eu-west-1", "ap-northeast-1"} <= set(mockrun.OFFERINGS)
    for region, d in mockrun.OFFERINGS.items():
        assert set(d["types"]) <= set(CATALOGUE), region
        assert all(set(azs) <= set(d["azs"]) for azs in d["types"].values()), region
    assert mockrun.offered_azs("us-east-1", "p5e.48xlarge") == []  # EC2's data: p5e not offered in us-east-1
    assert mockrun.offered_azs("us-east-2", "g6.12xlarge") == ["us-east-2a", "us-east-2b", "us-east-2c"]


def test_the_default_stack_plans_in_us_east_2_without_a_price():
    run = mockrun.run_program({}, region="us-east-2")
    plan = make_plan(layout.from_mockrun(run), source="test", stack="dev", region="us-east-2")
    assert plan.violations == [] and run.outputs["gpuAvailabilityZone"] == "us-east-2a"
    assert "estimatedHourlyUsd" not in run.outputs
    assert any("no price for us-east-2" in n for n in run.outputs["costNotes"])


def test_a_type_not_offered_in_the_region_is_said_plainly():
    with pytest.raises(ConfigError, match="p5e.48xlarge' is invalid: is not offered in any AZ of us-east-1"):
        mockrun.run_program({"gpuInstanceType": "p5e.48xlarge"})
    plan = plan_tree(gen.ROOT, overrides={"gpuInstanceType": "p5e.48xlarge"}, defaults=True)
    assert plan.exit_code == 2 and plan.error.endswith(
        "is not offered in any AZ of us-east-1; pick another type or region (EC2's offerings data, "
        "tools/offerings.json, lists it in: ap-southeast-2, ap-southeast-3, eu-north-1, eu-west-2, sa-east-1, "
        "us-east-2, us-west-2)"
    ), plan.error
