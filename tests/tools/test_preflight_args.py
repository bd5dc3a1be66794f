"""preflight's arguments, answered in process before any AWS call: each malformed one exits 64 naming
the option, the bad value and an example; a missing region or interrupt gets its own exit code."""

from __future__ import annotations

import pytest

from ray_efa_eks.tools import preflight as pf


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--region", "nowhere"], "--region 'nowhere': not an AWS region name"),
        (["--region", "us-east-1", "--az", "eu-west-1a"], "--az 'eu-west-1a': not an availability zone of us-east-1"),
        (["--region", "us-east-1", "--az", "us-east-1"], "--az 'us-east-1': not an availability zone of us-east-1"),
        (["--region", "us-east-1", "--instance-type", "g6"], "--instance-type 'g6': not an EC2 instance type name"),
        (["--region", "us-east-1", "--count", "451"], "--count 451: an EKS managed node group holds at most 450"),
        (["--region", "us-east-1", "--endpoint-url", "ftp://x"], "--endpoint-url"),
        (["--region", "us-east-1", "--capacity-reservation-id", "cr-123"], "expected cr- and 8 or 17 hex digits"),
    ],
)
def test_each_malformed_argument_is_a_usage_error_naming_it(argv, says, capsys, monkeypatch):
    monkeypatch.delenv("AWS_REGION", raising=False)
    with pytest.raises(SystemExit) as e:
        pf.main(argv)
    assert e.value.code == 64 and says in capsys.readouterr().err


def test_aws_region_is_honoured_and_checked(monkeypatch, capsys):
    monkeypatch.setenv("AWS_REGION", "not a region")
    with pytest.raises(SystemExit) as e:
        pf.main([])
    assert e.value.code == 64 and "AWS_REGION='not a region': not an AWS region name" in capsys.readouterr().err
    seen = {}
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    monkeypatch.setattr(pf, "_main", lambda a: seen.setdefault("region", a.region) and 0)
    assert pf.main([]) == 0 and seen["region"] == "eu-west-1"


def test_well_formed_arguments_have_no_problem(monkeypatch):
    monkeypatch.delenv("AWS_REGION", raising=False)
    seen = {}
    monkeypatch.setattr(pf, "_main", lambda a: seen.setdefault("a", a) and 0)
    assert (
        pf.main(
            [
                "--region",
                "us-east-1",
                "--az",
                "us-east-1b",
                "--capacity-reservation-id",
                "cr-0123456789abcdef0",
                "--endpoint-url",
                "http://127.0.0.1:5000",
            ]
        )
        == 0
    )
    assert seen["a"].az == "us-east-1b"


def test_no_region_anywhere_is_undetermined_and_says_so(monkeypatch, capsys):
    for k in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    assert pf.main([]) == pf.EXIT_UNDETERMINED
    assert "no AWS region: pass --region or set AWS_REGION" in capsys.readouterr().err


def test_an_interrupt_changes_nothing(monkeypatch, capsys):
    def interrupted(a):
        raise KeyboardInterrupt

    monkeypatch.setattr(pf, "_main", interrupted)
    assert pf.main(["--region", "us-east-1"]) == 130
    assert "interrupted (nothing was changed)" in capsys.readouterr().err
