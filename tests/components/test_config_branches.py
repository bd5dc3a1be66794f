"""Every rule of StackConfig.validate reached and its outcome asserted (issue 40): the key named, the fix said;
plus the grammar fallback, unread keys and from_pulumi's warnings (the branches test_config.py did not reach)."""

from __future__ import annotations

import pytest

from ray_efa_eks.components import config as c
from ray_efa_eks.components import values as v
from ray_efa_eks.components.config import REFUSED, ConfigError, StackConfig

ARN = "arn:aws:iam::123456789012:role/a"


@pytest.mark.parametrize("kw, key, says", [
    (dict(region="nowhere-1"), "aws:region", "is not an AWS region name"),
    (dict(gpuInstanceType=next(iter(REFUSED))), "gpuInstanceType", "not supported: "),
    (dict(gpuInstanceType="m7i.xlarge"), "gpuInstanceType", "has no GPU; pick one of g4dn.12xlarge"),
    (dict(gpuWorkersToDelete=["w1"], gpuScaleToZero=True), "gpuWorkersToDelete", "is for the fixed GPU fleet"),
    (dict(kubernetesVersion="1"), "kubernetesVersion", "must be MAJOR.MINOR"),
    (dict(kubernetesVersion="1.3"), "kubernetesVersion", 'quote it, kubernetesVersion: "1.30"'),
    (dict(kubernetesVersion="1.20"), "kubernetesVersion", "EKS creates no cluster on it"),
    (dict(rayTokenAuth=True, rayVersion="2.51.9"), "rayTokenAuth", "needs Ray >= 2.52 (rayVersion is 2.51.9)"),
    (dict(clusterAdminArns=[ARN], clusterViewerArns=[ARN]), "clusterViewerArns", "is also in clusterAdminArns"),
    (dict(kuberayChartVersion="1.5.1"), "kuberayChartVersion", "is older than 1.6.0"),
    (dict(gpuCapacity="capacity-block"), "gpuCapacityReservationId", "is not set: gpuCapacity capacity-block"),
])
def test_each_rule_names_its_key_and_fix(kw, key, says):
    with pytest.raises(ConfigError) as e:
        StackConfig(**kw).validate()
    assert e.value.key == key and says in str(e.value)


def test_the_boundaries_of_the_rules_pass():
    StackConfig(rayTokenAuth=True, rayVersion="2.52.0").validate()
    StackConfig(rayTokenAuth=False, rayVersion="2.40.0").validate()
    StackConfig(gpuWorkersToDelete=["w1"], gpuScaleToZero=False).validate()
    StackConfig(clusterAdminArns=[ARN], clusterViewerArns=[ARN.replace("role/a", "role/b")]).validate()
    cfg = StackConfig()
    assert cfg.gpu_type.name == cfg.gpuInstanceType and cfg.system_type.name == cfg.systemInstanceType


def test_an_unset_value_says_not_set():
    assert str(ConfigError("gpuCapacityReservationId", None, "set it")) == \
        "ray-efa-eks:gpuCapacityReservationId is not set: set it"


@pytest.mark.parametrize("key, grammar", [("efa", v.Bool), ("gpuNodeCount", v.Int), ("clusterAdminArns", v.ListOf),
                                          ("availabilityZone", v.OrUnset), ("gpuInstanceType", v.Text)])
def test_a_key_without_its_own_grammar_gets_its_defaults_type(monkeypatch, key, grammar):
    monkeypatch.delitem(c.GRAMMARS, key)
    assert type(c.grammar(key)) is grammar
    assert type(c.grammar("noSuchKey")) is v.OrUnset


def test_a_float_default_gets_the_float_grammar(monkeypatch):
    monkeypatch.delitem(c.GRAMMARS, "efaCheckMinBusbwGbps")
    assert type(c.grammar("efaCheckMinBusbwGbps")) is v.Float


def test_unread_keys_name_the_key_meant():
    got = dict(c.unread_keys(["aws:gpuNodeCount", "ray-efa-ek:gpuNodeCont", "aws:region", "gpuNodeCount",
                              "ray-efa-eks:efa", "kubernetes:context", "ray-efa-ekz:zzzzzz"]))
    assert got == {
        "aws:gpuNodeCount": "the aws namespace holds no gpuNodeCount; this stack reads ray-efa-eks:gpuNodeCount",
        "ray-efa-ek:gpuNodeCont": "namespace 'ray-efa-ek' is not 'ray-efa-eks'; did you mean ray-efa-eks:gpuNodeCount?",
        "ray-efa-ekz:zzzzzz": "namespace 'ray-efa-ekz' is not 'ray-efa-eks'; did you mean ray-efa-eks:zzzzzz?"}


def test_from_pulumi_warns_of_unread_keys_and_reads_ours(monkeypatch):
    import pulumi
    from pulumi.runtime import config as rc

    monkeypatch.setattr(rc, "get_config_env", lambda: {"aws:gpuNodeCount": "3"})
    warned: list[str] = []
    monkeypatch.setattr(pulumi.log, "warn", lambda msg, *a, **k: warned.append(msg))
    token = rc.CONFIG.set({"ray-efa-eks:gpuNodeCount": "4", "aws:region": "eu-west-1"})
    try:
        cfg = StackConfig.from_pulumi()
    finally:
        rc.CONFIG.reset(token)
    assert cfg.gpuNodeCount == 4 and cfg.region == "eu-west-1"
    assert warned == ["config aws:gpuNodeCount is never read by this program: the aws namespace holds no "
                      "gpuNodeCount; this stack reads ray-efa-eks:gpuNodeCount"]
