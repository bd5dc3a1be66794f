"""Value grammars (components/config/values.py): each config value refused by the rule of the service it reaches.

The worst-ten items 1 and 4 through the real entry point (``ray-efa-eks plan --check --config KEY=VALUE``: exit 2
with the key, the value and the rule), the same values through the component provider, and each grammar's own
edges. Every one of these values planned with exit 0 before the grammars existed.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from ray_efa_eks.components.config import values as v
from ray_efa_eks.components.config.config import GRAMMARS, ConfigError, StackConfig
from ray_efa_eks.tools import command

ROOT = Path(__file__).resolve().parents[2]
ARN = "arn:aws:iam::123456789012:role/"
DIGEST = "0123456789abcdef" * 4
TRACEBACK = re.compile(r"Traceback \(most recent call last\)")

REFUSED = [
    # 1: values that reach an IAM policy, an ARN or an object key: no wildcard, no traversal (IAM + S3 rules)
    ("checkpointPrefix", "*", ("wildcard", "reference_policies_elements_resource")),
    ("checkpointPrefix", "team/*", ("wildcard",)),
    ("checkpointPrefix", "a?", ("wildcard",)),
    ("checkpointPrefix", "${aws:username}", ("policy variable",)),
    ("checkpointPrefix", "a/../b", ("'..'", "traversal", "object-keys")),
    ("checkpointPrefix", "./a", ("traversal",)),
    ("checkpointPrefix", "a b", ("' '", "safe characters")),
    ("checkpointPrefix", "x" * 513, ("1024 bytes",)),
    # 4: values EKS, IAM, the registry or Helm refuse
    ("endpointPublicAccessCidrs", "::/0", ("IPv6", "IPv4 cluster", "publicAccessCidrs")),
    ("endpointPublicAccessCidrs", "203.0.113.0/24,2001:db8::/32", ("IPv6",)),
    ("endpointPublicAccessCidrs", ",".join(f"198.51.100.{i}/32" for i in range(41)), ("41 entries", "40", "quota")),
    ("endpointPublicAccessCidrs", "203.0.113.0/24,203.0.113.0/24", ("twice",)),
    ("dlcImage", f"repo/ray@sha256:{DIGEST[:63]}", ("63 characters", "64 lowercase hex")),
    ("dlcImage", f"repo/ray@sha256:{DIGEST.upper()}", ("uppercase", "64 lowercase hex")),
    ("dlcImage", f"repo/ray:1@md5:{DIGEST}", ("md5", "sha256")),
    ("kuberayChartVersion", "latest", ("SemVer", "1.7.0")),
    ("kuberayChartVersion", "1.7", ("SemVer",)),
    ("kuberayChartVersion", "v1.7.0; rm -rf /", ("SemVer",)),
    ("efaCheckWaitSeconds", "999999999999", ("86400",)),
    ("efaCheckWaitSeconds", "86401", ("86400",)),
    ("clusterAdminArns", ARN + "ädmin", ("'ä'", "ASCII", "reference_iam-quotas")),
    ("clusterAdminArns", ARN + "a" * 65, ("65 characters", "at most 64")),
    ("clusterViewerArns", ARN + "p/" * 300 + "x", ("path", "512")),
    ("clusterViewerArns", ARN + "a" * 2100, ("2048",)),
    ("ncclDebug", "verbose", ("WARN", "INFO")),
    ("rayVersion", "two", ("2.58.0",)),
    ("gpuPlacementGroupName", "pg-" + "x" * 300, ("255",)),
    ("gpuInstanceType", "G6.12XLARGE", ("g6.12xlarge",)),
]
ACCEPTED = [
    ("checkpointPrefix", "team-a/ray_train.v2(1)"),
    ("endpointPublicAccessCidrs", ",".join(f"198.51.100.{i}/32" for i in range(40))),
    ("dlcImage", f"public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1@sha256:{DIGEST}"),
    ("dlcImage", f"localhost:5000/ray@sha256:{DIGEST}"),
    ("kuberayChartVersion", "1.8.0-rc.1"),
    ("efaCheckWaitSeconds", "86400"),
    ("clusterAdminArns", ARN + "a" * 64),
    ("clusterAdminArns", '["arn:aws:iam::123456789012:role/teams/ml/Admin+=,.@_-"]'),
    ("ncclDebug", "info"),
    ("rayVersion", "2.59.0rc1"),
]


@pytest.mark.parametrize("key,value,says", REFUSED, ids=[f"{k}={v[:30]}" for k, v, _ in REFUSED])
def test_plan_refuses_what_the_service_refuses(key, value, says, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code = command.main(["plan", "--check", "--config", f"{key}={value}"])
    out = capsys.readouterr()
    text = out.out + out.err
    assert code == 2, f"exit {code}:\n{text}"
    assert f"ray-efa-eks:{key}" in text and not TRACEBACK.search(text), text
    missing = [s for s in says if s.lower() not in text.lower()]
    assert not missing, f"does not say {missing}:\n{text}"


@pytest.mark.parametrize("key,value", ACCEPTED, ids=[f"{k}={v[:30]}" for k, v in ACCEPTED])
def test_valid_values_still_plan(key, value):
    cfg = StackConfig.from_mapping({key: value})
    assert getattr(cfg, key) is not None


@pytest.mark.parametrize("key,value,says", REFUSED[:3] + REFUSED[8:9] + REFUSED[18:19])
def test_the_provider_refuses_with_the_same_words(key, value, says):
    """The component provider (other languages' EfaRayCluster) parses inputs with the same grammar first."""
    from pulumi.errors import InputPropertyError

    from ray_efa_eks.components.provider import EfaRayClusterProvider

    with pytest.raises(InputPropertyError) as e:
        EfaRayClusterProvider().construct("c", "ray-efa-eks:index:EfaRayCluster", {key: value})
    assert e.value.property_path == key and f"ray-efa-eks:{key} = " in e.value.reason
    assert all(s.lower() in e.value.reason.lower() for s in says), e.value.reason


def test_a_wildcard_prefix_never_reaches_the_pods_policy():
    """Before: bucket_prefix_policy(..., '*') granted bucket/*/* and s3:prefix '*': the whole bucket."""
    from ray_efa_eks.components.cluster.pod_identity import bucket_prefix_policy

    for bad in ("*", "a/*", "a/../b", "${aws:username}", "a?"):
        with pytest.raises(ValueError, match="prefix"):
            bucket_prefix_policy("arn:aws:s3:::b", bad)
    assert "arn:aws:s3:::b/team/ray-train/*" in bucket_prefix_policy("arn:aws:s3:::b", "team/ray-train")


def test_every_stack_key_has_a_grammar():
    """A new StackConfig key gets its service's grammar in config.GRAMMARS (components/config/values.py has them)."""
    missing = [f.name for f in dataclasses.fields(StackConfig) if f.name not in GRAMMARS]
    assert not missing, f"add a grammar for {missing} to components/config/config.py GRAMMARS"
    stale = sorted(set(GRAMMARS) - {f.name for f in dataclasses.fields(StackConfig)})
    assert not stale, stale


def test_every_default_is_inside_its_grammar():
    cfg = StackConfig()
    for key, g in GRAMMARS.items():
        assert g.problem(getattr(cfg, key)) is None, (key, getattr(cfg, key), g.problem(getattr(cfg, key)))


@pytest.mark.parametrize(
    "grammar,good,bad",
    [
        (v.DnsLabel(), ["ray", "a", "a-1", "a" * 63], ["", "A", "-a", "a-", "a" * 64, "a.b", "a_b"]),
        (v.DnsSubdomain(), ["ray.io", "a-b.c"], ["Ray.io", ".a", "a..b", "a" * 254]),
        (v.LabelValue(), ["", "v1.2_3-x", "A"], ["-a", "a b", "a" * 64]),
        (v.LabelKey(), ["ray.io/node-type", "app"], ["/x", "ray.io/", "a/b/c", "x" * 64]),
        (v.Quantity(), ["500m", "2", "16Gi", "1e3", "0.5", "1.5Ki"], ["-1", "1GB", "Gi", "1.5.2", "1 Gi", ""]),
        (v.ChartVersion(), ["1.7.0", "0.0.1-alpha.1+build.5"], ["1.7", "01.7.0", "latest", "v1.7.0"]),
        (v.IamName(), ["ray-storage", "A+b=c,d.e@f_g-h"], ["a b", "a/b", "a" * 65, "ä", ""]),
        (v.Port(), ["1", "65535"], ["0", "65536", "99999", "-1", "http"]),
        (v.Region(), ["us-east-1", "us-gov-west-1"], ["mars", "US-EAST-1", "us-east-1a"]),
        (v.Float(0, 1), ["0", "1", "0.5"], ["nan", "inf", "-0.1", "1.01", "x"]),
        (v.Bool(), ["true", "FALSE", "1", "no"], ["maybe", "2", ""]),
    ],
)
def test_grammar_edges(grammar, good, bad):
    for text in good:
        grammar.parse(text)
    for text in bad:
        with pytest.raises(v.ValueProblem):
            grammar.parse(text)


def test_argtype_is_a_usage_error_naming_the_value():
    import argparse

    parser = argparse.ArgumentParser(exit_on_error=False)
    parser.add_argument("--prefix", type=v.argtype(v.S3KeyPrefix()))
    with pytest.raises(argparse.ArgumentError, match=r"'\*': contains '\*'"):
        parser.parse_args(["--prefix", "*"])
    assert parser.parse_args(["--prefix", "a/b"]).prefix == "a/b"


def test_config_error_names_the_item_not_the_list():
    with pytest.raises(ConfigError) as e:
        StackConfig.from_mapping({"endpointPublicAccessCidrs": ["203.0.113.0/24", "::/0"]})
    assert e.value.value == "::/0"
