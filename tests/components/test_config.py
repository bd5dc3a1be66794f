"""Every config error raises before any resource is registered, naming the key."""

import pytest

from ray_efa_eks.components.config.config import ConfigError, StackConfig, image_tag
from ray_efa_eks.tools.mockrun import MockRun, run_program

BAD = [
    ({"gpuInstanceType": "g9.mega"}, "gpuInstanceType", "unknown instance type"),
    ({"gpuInstanceType": "m7i.2xlarge", "efa": "false"}, "gpuInstanceType", "has no GPU"),
    ({"gpuInstanceType": "m7i.2xlarge"}, "gpuInstanceType", "has no GPU"),
    ({"systemInstanceType": "t9.tiny"}, "systemInstanceType", "unknown instance type"),
    ({"gpuNodeCount": "-1"}, "gpuNodeCount", ">= 0"),
    ({"gpuNodeCount": "two"}, "gpuNodeCount", "must be a whole number, e.g. 2"),
    ({"gpuNodeCount": 2.5}, "gpuNodeCount", "must be a whole number"),
    ({"gpuNodeCount": "2.5"}, "gpuNodeCount", "must be a whole number"),
    ({"gpuNodeCount": True}, "gpuNodeCount", "must be a whole number"),
    ({"efaCheckWaitSeconds": float("inf")}, "efaCheckWaitSeconds", "must be a whole number"),
    ({"efaCheckMinBusbwGbps": "fast"}, "efaCheckMinBusbwGbps", "must be a number"),
    ({"gpuNodeCount": "1"}, "gpuNodeCount", "no peer"),
    ({"availabilityZone": "us-west-2a"}, "availabilityZone", "not an AZ of region us-east-1"),
    ({"dlcImage": "public.ecr.aws/deep-learning-containers/ray"}, "dlcImage", "explicit tag"),
    ({"dlcImage": "public.ecr.aws/deep-learning-containers/ray:latest"}, "dlcImage", "latest"),
    ({"vpcCidr": "10.0.0.0/40"}, "vpcCidr", "CIDR"),
    ({"endpointPublicAccessCidrs": '["not-a-cidr"]'}, "endpointPublicAccessCidrs", "CIDR"),
    ({"efa": "maybe"}, "efa", "must be true or false"),
    ({"gpuRootVolumeGiB": "20"}, "gpuRootVolumeGiB", ">= 100"),
    ({"noSuchKey": "1"}, "noSuchKey", "unknown key"),
    ({"checkpointEncryption": "aes"}, "checkpointEncryption", "one of kms, s3"),
    ({"checkpointPrefix": "/ray-train/"}, "checkpointPrefix", "without leading/trailing slashes"),
    ({"checkpointNoncurrentVersionDays": "0"}, "checkpointNoncurrentVersionDays", ">= 1"),
    ({"imdsHopLimit": "0"}, "imdsHopLimit", "1..64"),
    ({"endpointPublicAccessCidrs": "[]"}, "endpointPublicAccessCidrs", "endpointPublicAccess: false"),
]


@pytest.mark.parametrize("values,key,fragment", BAD)
def test_bad_config_raises_with_key(values, key, fragment):
    with pytest.raises(ConfigError) as err:
        StackConfig.from_mapping(values)
    assert err.value.key == key
    assert f"ray-efa-eks:{key}" in str(err.value) and fragment in str(err.value)


def test_integral_doubles_for_integer_keys():
    """A protobuf Struct carries every number as a double: gpuNodeCount 2 from YAML/TypeScript arrives as 2.0."""
    cfg = StackConfig.from_mapping(
        {
            "gpuNodeCount": 2.0,
            "gpuRootVolumeGiB": 300.0,
            "efaCheckWaitSeconds": "900.0",
            "imdsHopLimit": 2.0,
            "checkpointNoncurrentVersionDays": "7",
            "efa": True,
            "efaCheckMinBusbwGbps": 10,
        }
    )
    assert (
        cfg.gpuNodeCount,
        cfg.gpuRootVolumeGiB,
        cfg.efaCheckWaitSeconds,
        cfg.imdsHopLimit,
        cfg.checkpointNoncurrentVersionDays,
    ) == (2, 300, 900, 2, 7)
    assert all(type(v) is int for v in (cfg.gpuNodeCount, cfg.gpuRootVolumeGiB, cfg.imdsHopLimit))
    assert cfg.efa is True and cfg.efaCheckMinBusbwGbps == 10.0
    with pytest.raises(ConfigError) as err:
        StackConfig.from_mapping({"gpuNodeCount": 2.5})
    assert str(err.value) == "ray-efa-eks:gpuNodeCount = 2.5 is invalid: must be a whole number, e.g. 2"


def test_efa_on_type_without_efa():
    from ray_efa_eks.components.nodes import instances

    instances.CATALOGUE["g4dn.xlarge"] = instances.InstanceType("g4dn.xlarge", 4, 16384, 1, "T4", 15360, False, 0, 1)
    try:
        with pytest.raises(ConfigError, match="does not support EFA"):
            StackConfig.from_mapping({"gpuInstanceType": "g4dn.xlarge"})
        assert StackConfig.from_mapping({"gpuInstanceType": "g4dn.xlarge", "efa": "false"}).efa is False
    finally:
        del instances.CATALOGUE["g4dn.xlarge"]


@pytest.mark.parametrize("values,key,fragment", BAD[:4])
def test_program_registers_nothing_on_bad_config(values, key, fragment):
    record = MockRun()
    with pytest.raises(Exception, match=key):
        run_program(values, record=record)
    assert record.resources == []


def test_single_node_allowed_explicitly():
    assert StackConfig.from_mapping({"gpuNodeCount": "1", "allowSingleEfaNode": "true"}).gpuNodeCount == 1


def test_defaults_are_reference_layout():
    cfg = StackConfig.from_mapping({})
    assert (cfg.gpuInstanceType, cfg.gpuNodeCount, cfg.systemInstanceType, cfg.efa) == (
        "g6.12xlarge",
        2,
        "m7i.2xlarge",
        True,
    )
    assert cfg.dlcImage == "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1"


def test_digest_pinned_image_is_accepted():
    digest = "public.ecr.aws/deep-learning-containers/ray@sha256:" + "ab" * 32
    assert StackConfig.from_mapping({"dlcImage": digest}).dlcImage == digest


def test_image_tag():
    assert image_tag("localhost:5000/ray:v1") == "v1"
    assert image_tag("localhost:5000/ray") is None
    assert image_tag("ray@sha256:abc") is None


BLOCK = {
    "gpuInstanceType": "p5.48xlarge",
    "gpuCapacity": "capacity-block",
    "availabilityZone": "us-east-1a",
    "gpuCapacityReservationId": "cr-0123456789abcdef0",
}


def test_gpu_scale_to_zero_follows_the_capacity_mode():
    """On demand scales from zero by default; a reservation bills anyway (default off, allowed); a
    Capacity Block is paid up front and stays fixed (refused, naming key, value and fix)."""
    assert StackConfig.from_mapping({}).scale_to_zero is True
    assert StackConfig.from_mapping({"gpuScaleToZero": "false"}).scale_to_zero is False
    odcr = {
        "gpuCapacity": "reservation",
        "availabilityZone": "us-east-1a",
        "gpuCapacityReservationId": "cr-0123456789abcdef0",
    }
    assert StackConfig.from_mapping(odcr).scale_to_zero is False
    assert StackConfig.from_mapping({**odcr, "gpuScaleToZero": "true"}).scale_to_zero is True
    assert StackConfig.from_mapping(BLOCK).scale_to_zero is False
    assert StackConfig.from_mapping({**BLOCK, "gpuScaleToZero": False}).scale_to_zero is False
    with pytest.raises(
        ConfigError,
        match=r"ray-efa-eks:gpuScaleToZero = True is invalid: a Capacity Block .*set it "
        r"false",
    ):
        StackConfig.from_mapping({**BLOCK, "gpuScaleToZero": "true"})
    with pytest.raises(ConfigError, match="gpuIdleTimeoutSeconds = 30 is invalid"):
        StackConfig.from_mapping({"gpuIdleTimeoutSeconds": "30"})
    with pytest.raises(ConfigError, match="gpuScaleToZero = 'maybe' is invalid: must be true or false"):
        StackConfig.from_mapping({"gpuScaleToZero": "maybe"})


def test_gp3_ratios_between_keys_are_refused_naming_the_key_to_change():
    """EC2's gp3 ratios (500 IOPS per GiB, 0.25 MiB/s per IOPS; components/nodes/ebs_limits.py) span two keys;
    the refusal names the key whose value breaks it and the other key's least value that would fix it."""
    with pytest.raises(
        ConfigError,
        match=r"gpuRootVolumeIops = 60000 is invalid: EC2 refuses gp3 IOPS 60000 on 100 "
        r"GiB .*raise gpuRootVolumeGiB to at least 120",
    ):
        StackConfig.from_mapping({"gpuRootVolumeGiB": "100", "gpuRootVolumeIops": "60000"})
    with pytest.raises(
        ConfigError,
        match=r"gpuRootVolumeThroughputMiBps = 2000 is invalid: .*raise gpuRootVolumeIops "
        r"to at least 8000",
    ):
        StackConfig.from_mapping({"gpuRootVolumeIops": "7999", "gpuRootVolumeThroughputMiBps": "2000"})
    assert StackConfig.from_mapping({"gpuRootVolumeIops": "8000", "gpuRootVolumeThroughputMiBps": "2000"})
