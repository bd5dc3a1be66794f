"""components/config/values.py conditions its own tests did not reach, each outcome asserted through the grammars'
``check``/``parse`` and ``problems`` (tables of values; a fix pinned whole only where it shows how a key's own fix
is joined to the grammar's words)."""

from __future__ import annotations

import json
import math

import pytest

from ray_efa_eks.components.config import values as v


@pytest.mark.parametrize(
    "url, says",
    [
        ("https://h/a b", "contains whitespace"),
        ("http://[::1", "is not a URL"),
        ("https://h:65536", "is not a URL"),
        ("ftp://h", "needs a scheme (https/http) and a host"),
        ("https://", "needs a scheme (https/http) and a host"),
        ("https://h:0", "port 0 is no port (1..65535)"),
        ("https://u:p@h", "carries credentials in the URL"),
        ("https://u@h", "carries credentials in the URL"),
        ("https://:p@h", "carries credentials in the URL"),
    ],
)
@pytest.mark.parametrize("grammar", [v.HttpUrl(), v.RemoteWriteUrl()], ids=["HttpUrl", "RemoteWriteUrl"])
def test_a_remote_write_url_is_refused_saying_why(grammar, url, says):
    with pytest.raises(v.ValueProblem) as e:
        grammar.check(url)
    assert says in str(e.value) and e.value.value == url


@pytest.mark.parametrize(
    "url, region",
    [
        ("https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1/api/v1/remote_write", "us-east-1"),
        ("https://APS-WORKSPACES.eu-west-1.amazonaws.com/workspaces/ws-1", "eu-west-1"),  # hosts are case-blind
        ("https://aps-workspaces-fips.us-gov-west-1.amazonaws.com/workspaces/ws-1", "us-gov-west-1"),
        ("https://aps-workspaces.ap-southeast-2.api.aws/workspaces/ws-1", "ap-southeast-2"),
        ("https://aps-workspaces.cn-north-1.amazonaws.com.cn/workspaces/ws-1", "cn-north-1"),
        ("https://aps-workspaces.amazonaws.com/workspaces/ws-1", None),  # no region: no endpoint
        ("https://mimir.example.com/api/v1/push", None),
        ("https://[aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1", None),  # not a URL at all: no region
    ],
)
def test_the_region_a_remote_write_is_signed_for_is_the_one_its_amp_host_names(url, region):
    assert v.amp_region(url) == region


@pytest.mark.parametrize("url", ["https://h", "http://h:9090/api/v1/write"])
@pytest.mark.parametrize("grammar", [v.HttpUrl(), v.RemoteWriteUrl()], ids=["HttpUrl", "RemoteWriteUrl"])
def test_a_remote_write_url_is_accepted(grammar, url):
    grammar.check(url)


@pytest.mark.parametrize(
    "url, host",
    [
        ("https://aps-workspaces.amazonaws.com/workspaces/ws-1/api/v1/remote_write", "aps-workspaces.amazonaws.com"),
        ("https://APS-Workspaces.amazonaws.com.cn/workspaces/ws-1", "aps-workspaces.amazonaws.com.cn"),
        ("https://aps-workspaces.api.aws/workspaces/ws-1", "aps-workspaces.api.aws"),
        ("https://aps-workspacesx.us-east-1.amazonaws.com/workspaces/ws-1", "aps-workspacesx.us-east-1.amazonaws.com"),
    ],
)
def test_an_amp_host_without_its_region_is_refused(url, host):
    """The write is signed (SigV4) for the region the host names: an AMP host without one answers nothing."""
    with pytest.raises(v.ValueProblem) as e:
        v.RemoteWriteUrl().check(url)
    assert str(e.value) == f"host {host} is no AMP endpoint; {v.RemoteWriteUrl().amp_fix}" and e.value.value == url


@pytest.mark.parametrize(
    "url",
    [
        "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1/api/v1/remote_write",
        "https://APS-WORKSPACES.eu-west-1.amazonaws.com/workspaces/ws-1/api/v1/remote_write",
        "https://mimir.example.com/api/v1/push",  # not AMP: no region to name
        "https://aps-workspaces.example.com/api/v1/push",  # not an AWS domain
        "https://prometheus.amazonaws.com/api/v1/write",  # an AWS domain, not the AMP data plane
    ],
)
def test_a_remote_write_url_to_amp_with_its_region_or_elsewhere_is_accepted(url):
    v.RemoteWriteUrl().check(url)


@pytest.mark.parametrize(
    "call, raw, fix",
    [
        ("coerce", "[1,", "must be a JSON list or comma-separated values"),
        ("coerce", 5, "must be a list (a YAML/JSON list or comma-separated values)"),
        ("check", 5, "must be a list (a YAML/JSON list or comma-separated values)"),
    ],
)
def test_a_list_that_is_none_says_what_to_write(call, raw, fix):
    with pytest.raises(v.ValueProblem) as e:
        getattr(v.ListOf(), call)(raw)
    assert e.value.fix == fix and e.value.value == raw


def test_problems_lists_every_bad_value_and_skips_keys_without_a_grammar():
    got = v.problems({"a": "https://h:0", "b": "https://h", "c": "anything"}, {"a": v.HttpUrl(), "b": v.HttpUrl()})
    assert [(k, val) for k, val, _ in got] == [("a", "https://h:0")]
    assert got[0][2].startswith("port 0 is no port")


# -- the base grammar and the scalars -------------------------------------------------------------------------------


def test_the_base_grammar_takes_anything_and_problem_returns_the_fix_or_none():
    marker = object()
    assert v.Grammar().parse(marker) is marker
    assert v.Grammar().problem(marker) is None
    assert v.Int(1, 5).problem(7) == "must be <= 5"
    assert v.Int(1, 5).problem(3) is None
    assert v.Text().problem("") == "is empty; must be printable ASCII text"


_TYPED = object()


def _refused(grammar, raw, parse=True, value=_TYPED):
    """The problem ``grammar`` raises for ``raw``, its ``value`` checked: by default the offending value as the check
    saw it (``raw`` when coercion refused it, else the coerced value); the callers of a grammar report that value."""
    with pytest.raises(v.ValueProblem) as e:
        (grammar.parse if parse else grammar.check)(raw)
    if value is _TYPED:
        value = raw
        if parse:
            try:
                value = grammar.coerce(raw)
            except v.ValueProblem:
                pass
    assert repr(e.value.value) == repr(value), (e.value.value, value)
    return e.value


def test_a_problem_carries_its_fix_and_the_offending_value():
    p = v.ValueProblem("fix it", 7)
    assert (p.fix, p.value, str(p)) == ("fix it", 7, "fix it")
    assert v.ValueProblem("x").value is None


@pytest.mark.parametrize(
    "raw, want",
    [
        (True, True),
        (False, False),
        ("true", True),
        (" TRUE ", True),
        ("1", True),
        ("yes", True),
        ("Yes", True),
        ("false", False),
        ("0", False),
        ("no", False),
        ("NO", False),
        (1, True),
        (0, False),
    ],
)
def test_bool_reads_pulumi_text(raw, want):
    assert v.Bool().parse(raw) is want


@pytest.mark.parametrize("raw", ["maybe", "2", "", "on", "t", None, 2])
def test_bool_refuses_anything_else(raw):
    p = _refused(v.Bool(), raw)
    assert (p.fix, p.value) == ("must be true or false", raw)


@pytest.mark.parametrize("value", [1, 0, "true", None])
def test_bool_check_wants_a_typed_bool(value):
    p = _refused(v.Bool(), value, parse=False)
    assert (p.fix, p.value) == ("must be true or false", value)


@pytest.mark.parametrize(
    "raw, want",
    [
        (2, 2),
        (-3, -3),
        (2.0, 2),
        (-0.0, 0),
        ("2", 2),
        (" +7 ", 7),
        ("-7", -7),
        ("2.0", 2),
        ("2.", 2),
        ("3.000", 3),
        ("9" * 40, int("9" * 40)),
        (10**50, 10**50),
    ],
)
def test_to_whole_takes_integral_numbers(raw, want):
    got = v.to_whole(raw)
    assert got == want and type(got) is int


@pytest.mark.parametrize(
    "raw",
    [
        True,
        False,
        2.5,
        "2.5",
        math.inf,
        -math.inf,
        math.nan,
        "inf",
        "nan",
        "1e3",
        "0x10",
        "",
        "two",
        ".5",
        "2.0.0",
        "9" * 41,
        " " + "9" * 41,
        "1" * 5000,
        None,
        [2],
        "1_000",
    ],
)
def test_to_whole_refuses_the_rest(raw):
    assert v.to_whole(raw) is None


def test_int_says_the_range_and_the_example_and_cites_its_source():
    assert _refused(v.Int(2, 5), "x").fix == "must be a whole number, e.g. 2"
    assert _refused(v.Int(2, 5, example=4), "x").fix == "must be a whole number, e.g. 4"
    assert _refused(v.Int(2, 5, example=0), "x").fix == "must be a whole number, e.g. 0"
    assert _refused(v.Int(2, 5), "1").fix == "must be >= 2 (at most 5)"
    assert _refused(v.Int(2, 5), "6").fix == "must be <= 5"
    assert _refused(v.Int(2, 5, source="the rule"), "6").fix == "must be <= 5 (the rule)"
    assert _refused(v.Int(2, 5, below="too few", above="too many"), "1").fix == "too few"
    assert _refused(v.Int(2, 5, below="too few", above="too many"), "6").fix == "too many"
    assert [v.Int(2, 5).parse(s) for s in ("2", "5", "5.0")] == [2, 5, 5]
    p = _refused(v.Int(2, 5), "x")
    assert p.value == "x" and _refused(v.Int(2, 5), "6").value == 6


@pytest.mark.parametrize("value", [True, False, 2.0, "2", None])
def test_int_check_wants_a_typed_whole_number(value):
    p = _refused(v.Int(0, 5, example=3), value, parse=False)
    assert (p.fix, p.value) == ("must be a whole number, e.g. 3", value)
    assert _refused(v.Int(1, 5), value, parse=False).fix == "must be a whole number, e.g. 1"


def test_seconds_and_port_defaults():
    assert _refused(v.Seconds(60, 120), "x").fix == "must be a whole number, e.g. 60"
    assert _refused(v.Port(), "0").fix == "must be >= 1 (at most 65535)"
    assert _refused(v.Port(), "65536").fix.startswith("must be <= 65535 (")


@pytest.mark.parametrize("raw, want", [("0.5", 0.5), (" 1 ", 1.0), (1, 1.0), (0, 0.0), ("1e-1", 0.1), ("1" * 64, 1.0)])
def test_float_reads_numbers(raw, want):
    got = v.Float(0, 1e70).parse(raw)
    assert got == pytest.approx(want if raw != "1" * 64 else float("1" * 64)) and isinstance(got, float)


@pytest.mark.parametrize("raw", [True, False, "x", None, [1], "1" * 65, " " * 65])
def test_float_refuses_what_is_no_number(raw):
    p = _refused(v.Float(0, 1, example=0.5), raw)
    assert (p.fix, p.value) == ("must be a number, e.g. 0.5", raw)


@pytest.mark.parametrize("value", [True, "0.5", None])
def test_float_check_wants_a_typed_number(value):
    assert _refused(v.Float(0, 1, example=0.5), value, parse=False).fix == "must be a number, e.g. 0.5"


def test_float_limits_say_the_range_and_refuse_nan_and_inf():
    g = v.Float(0.0, 1.0, example=0.5)
    for raw in ("nan", "inf", "-inf", "1e400"):
        fix = _refused(g, raw).fix
        assert fix.startswith("must be a finite number") and fix.endswith("e.g. 0.5")  # the grammar's example
    assert _refused(v.Float(), "inf").fix.startswith("must be a finite number")
    assert _refused(g, "-0.001").fix == "must be >= 0.0"
    assert _refused(g, "1.001").fix == "must be <= 1.0"
    assert _refused(v.Float(0, 1, below="low", above="high"), "-1").fix == "low"
    assert _refused(v.Float(0, 1, below="low", above="high"), "2").fix == "high"
    assert [g.parse(s) for s in ("0", "1", "0.25")] == [0.0, 1.0, 0.25]
    assert g.check(1) is None and _refused(g, "2").value == 2.0


# -- text, choices, unset, lists --------------------------------------------------------------------------------------


@pytest.mark.parametrize("raw, want", [("abc", "abc"), (12, "12"), (1.5, "1.5")])
def test_text_takes_numbers_as_their_text(raw, want):
    assert v.Text().parse(raw) == want


@pytest.mark.parametrize("raw", [True, None, ["a"], {"a": 1}, b"a"])
def test_text_refuses_what_is_no_text(raw):
    p = _refused(v.Text(fix="write abc"), raw)
    assert (p.fix, p.value) == (f"must be text, not {type(raw).__name__}; write abc", raw)


@pytest.mark.parametrize("value", [1, None, 1.5])
def test_text_check_wants_a_typed_string(value):
    assert (
        _refused(v.Text(fix="write abc"), value, parse=False).fix
        == f"must be text, not {type(value).__name__}; write abc"
    )


def test_text_lengths_characters_and_pattern():
    g = v.Text(pattern=r"[a-z]+", fix="lowercase", max_len=4)
    assert _refused(g, "").fix == "is empty; lowercase"
    assert _refused(v.Text(fix="three or more", min_len=3), "ab").fix == "three or more"
    assert v.Text(min_len=3).parse("abc") == "abc" and v.Text(pattern="[a-z]*", min_len=0).parse("") == ""
    assert _refused(g, "abcde").fix == "is 5 characters, at most 4 are allowed; lowercase"
    assert (
        _refused(v.Text(max_len=4, fix="f", source="S"), "abcde").fix == "is 5 characters, at most 4 are allowed (S); f"
    )
    assert g.parse("abcd") == "abcd"
    p = _refused(g, "abé")
    assert p.fix == "contains 'é' (U+00E9), which is not printable ASCII; lowercase" and p.value == "abé"
    assert _refused(g, "a\x7f").fix.startswith("contains '\\x7f' (U+007F)")
    assert _refused(g, "aB").fix == "lowercase"
    assert _refused(v.Text(), "a ~\té").fix.startswith("contains '\\t' (U+0009)")  # the first one outside ' '..'~'

    assert v.Text(pattern=r"[\s\S]+", ascii_only=False).parse("é") == "é"
    assert v.Text().parse(" ~") == " ~"


def test_one_of_spelling_hint_and_source():
    g = v.OneOf(choices=("WARN", "INFO"))
    assert g.parse("WARN") == "WARN"
    assert _refused(g, "warn").fix == "must be one of WARN, INFO (did you mean WARN?)"
    assert _refused(g, "info").fix == "must be one of WARN, INFO (did you mean INFO?)"
    assert _refused(g, "debug").fix == "must be one of WARN, INFO"
    assert _refused(g, 3, parse=False).fix == "must be one of WARN, INFO"
    assert _refused(v.OneOf(choices=("a",), source="S"), "b").fix == "must be one of a (S)"
    ci = v.OneOf(choices=("WARN", "INFO"), case_insensitive=True)
    assert [ci.parse(s) for s in ("warn", " Info ", "INFO")] == ["WARN", "INFO", "INFO"]
    p = _refused(ci, "trace")
    assert (p.fix, p.value) == ("must be one of WARN, INFO", "trace")


def test_or_unset_is_none_for_nothing_and_the_inner_grammar_otherwise():
    g = v.OrUnset(inner=v.Int(1, 5))
    assert g.parse(None) is None and g.parse("") is None
    assert g.parse("3") == 3 and g.parse(0.0 + 4) == 4
    assert _refused(g, "9").fix == "must be <= 5"
    assert _refused(g, " ").fix == "must be a whole number, e.g. 1"
    assert g.check(None) is None
    assert _refused(g, 9, parse=False).fix == "must be <= 5"
    assert v.OrUnset().parse("anything") == "anything"


def test_list_of_reads_json_and_comma_separated_text():
    g = v.ListOf(item=v.Int(0, 9))
    assert g.parse("[1, 2]") == [1, 2]
    assert g.parse(" [3]") == [3]
    assert g.parse("1, 2,,3 ,") == [1, 2, 3]
    assert g.parse("") == [] and g.parse([]) == []
    assert g.parse((4, "5")) == [4, 5]
    p = _refused(g, "[1, 2")
    assert "JSON list or comma-separated values" in p.fix and p.value == "[1, 2"
    for raw in (7, {"a": 1}, None, True):
        p = _refused(g, raw)
        assert p.fix.startswith("must be a list (") and p.value == raw
    assert _refused(g, "1,x", value="x").fix == "must be a whole number, e.g. 0"


def test_list_of_checks_the_count_each_item_and_duplicates():
    g = v.ListOf(item=v.Int(0, 9), max_items=2, unique=True, max_reason="the quota")
    assert _refused(g, (1, 2), parse=False).fix.startswith("must be a list (")
    p = _refused(g, "1,2,3", value="3 entries")
    assert (p.fix, p.value) == ("has 3 entries; at most 2 are allowed (the quota)", "3 entries")
    assert _refused(v.ListOf(max_items=0), "a", value="1 entries").fix == "has 1 entries; at most 0 are allowed"
    assert g.parse("1,2") == [1, 2]
    p = _refused(g, "1,12", value=12)
    assert (p.fix, p.value) == ("must be <= 9", 12)
    p = _refused(g, "4,4", value=4)
    assert (p.fix, p.value) == ("is listed twice; list each entry once", 4)
    assert v.ListOf(item=v.Int(0, 9)).parse("4,4") == [4, 4]
    assert v.ListOf(max_items=2).parse("a,b") == ["a", "b"]


# -- network and AWS --------------------------------------------------------------------------------------------------


def test_cidr_family_prefix_and_host_bits():
    g = v.Cidr(family=4, min_prefix=16, max_prefix=20, example="10.0.0.0/16")
    assert g.parse(" 10.0.0.0/16 ") == "10.0.0.0/16" and g.parse("10.0.0.0/20") == "10.0.0.0/20"
    for raw in (16, None, ["10.0.0.0/16"]):
        p = _refused(g, raw)
        assert (p.fix, p.value) == ("must be a CIDR such as 10.0.0.0/16", raw)
    grammar_fix = (
        "must be a CIDR such as 10.0.0.0/16 (an address, '/', a prefix length; the bits after the prefix zero)"
    )
    for raw in ("10.0.0.1/16", "banana", "256.0.0.0/16", ""):
        assert _refused(g, raw).fix == grammar_fix
    assert _refused(g, 16, parse=False).fix == grammar_fix
    assert _refused(g, "2001:db8::/32").fix.startswith("is IPv6; use an IPv4 CIDR")
    fix = _refused(v.Cidr(family=6, example="::/0"), "10.0.0.0/8").fix
    assert fix.startswith("is IPv4; use an IPv6 CIDR") and fix.endswith("::/0")  # the grammar's example
    assert _refused(v.Cidr(wrong_family="v4 only"), "::/0").fix == "v4 only"
    for raw in ("10.0.0.0/15", "10.0.0.0/21"):
        assert _refused(g, raw).fix == "prefix length must be /16 to /20"
    assert _refused(v.Cidr(min_prefix=8, out_of_range="wrong size"), "0.0.0.0/0").fix == "wrong size"
    assert v.Cidr().parse("0.0.0.0/0") == "0.0.0.0/0"


ARN = "arn:aws:iam::123456789012:role/"


@pytest.mark.parametrize(
    "arn",
    [
        ARN + "a",
        ARN + "a" * 64,
        ARN + "teams/ml/Admin+=,.@_-",
        "arn:aws-cn:iam::123456789012:user/u",
        "arn:aws-us-gov:iam::123456789012:user/p/u",
        ARN + "pp/" + "p/" * 254 + "x",
    ],
)
def test_principal_arn_accepts_roles_and_users(arn):
    assert v.PrincipalArn().parse(" " + arn + " ") == arn


@pytest.mark.parametrize(
    "arn, fix",
    [
        ("", "must be an IAM role or user ARN such as arn:aws:iam::123456789012:role/platform-admins"),
        (None, "must be an IAM role or user ARN such as arn:aws:iam::123456789012:role/platform-admins"),
        (7, "must be an IAM role or user ARN such as arn:aws:iam::123456789012:role/platform-admins"),
        (ARN + "a" * 2018, "is 2049 characters; IAM ARNs are at most 2048 (" + v.IAM_QUOTAS + ")"),
        (
            ARN + "ädmin",
            "contains 'ä' (U+00E4); IAM names and paths are ASCII letters, digits and + = , . @ _ - ("
            + v.IAM_QUOTAS
            + ")",
        ),
        (
            "arn:aws:sts::123456789012:assumed-role/Admin/session",
            "is an STS session, which access entries do not accept; "
            "use the role: arn:aws:iam::123456789012:role/Admin (add its path if it has one)",
        ),
        (
            "arn:aws-cn:sts::123456789012:assumed-role/A/s",
            "is an STS session, which access entries do not accept; "
            "use the role: arn:aws-cn:iam::123456789012:role/A (add its path if it has one)",
        ),
        (ARN + "a" * 65, "the role name is 65 characters; IAM role names are at most 64 (" + v.IAM_QUOTAS + ")"),
        (
            "arn:aws:iam::123456789012:user/" + "a" * 65,
            "the user name is 65 characters; IAM user names are at most 64 (" + v.IAM_QUOTAS + ")",
        ),
        (ARN + "p/" * 256 + "x", "the path is 513 characters; IAM paths are at most 512 (" + v.IAM_QUOTAS + ")"),
    ],
)
def test_principal_arn_refusals_say_why(arn, fix):
    p = _refused(v.PrincipalArn(), arn)
    assert (p.fix, p.value) == (fix, arn.strip() if isinstance(arn, str) else arn)


@pytest.mark.parametrize(
    "arn",
    [
        ARN,
        ARN + "a/",
        ARN + "a//b",
        ARN + "*",
        ARN + "a b",
        "arn:aws:iam::12345:role/x",
        "arn:aws:iam::123456789012:group/g",
        "arn:aws:iam::123456789012:rolex",
        "arn:aws:s3:::bucket",
        "arn:aws:iam::123456789012:role/a/b c/d",
        "xarn:aws:iam::123456789012:role/a",
    ],
)
def test_principal_arn_refuses_what_is_no_role_or_user(arn):
    assert _refused(v.PrincipalArn(), arn).fix.startswith("is not an IAM role or user ARN; expected arn:aws:iam::")


def test_principal_arn_names_the_first_character_outside_ascii():
    assert _refused(v.PrincipalArn(), ARN + "a ~\té").fix.startswith("contains '\\t' (U+0009);")


def test_principal_arn_not_a_role_or_user_names_both_forms():
    fix = _refused(v.PrincipalArn(), ARN + "*").fix
    assert fix.startswith("is not an IAM role or user ARN; expected arn:aws:iam::<12-digit account>:role/<name> or ")
    assert fix.endswith("arn:aws:iam::<account>:user/<name> (groups and wildcards cannot have access entries)")


def test_principal_arn_at_the_length_edges():
    """The path /pp/p/.../p/ is 512 characters (IAM's limit) and the whole ARN 2048 (arnType's)."""
    assert len("/pp" + "/p" * 254 + "/") == 512
    assert v.PrincipalArn().parse(ARN + "pp/" + "p/" * 254 + "x")
    assert len(ARN + "a" * 2017) == 2048
    assert _refused(v.PrincipalArn(), ARN + "a" * 2017).fix.startswith("the role name is 2017 characters")


@pytest.mark.parametrize(
    "raw, fix",
    [
        (True, "must be text such as ray-train"),
        (None, "must be text such as ray-train"),
        (["a"], "must be text such as ray-train"),
    ],
)
def test_s3_prefix_refuses_what_is_no_text(raw, fix):
    p = _refused(v.S3KeyPrefix(), raw)
    assert (p.fix, p.value) == (fix, raw)


def test_s3_prefix_rules():
    g = v.S3KeyPrefix()
    fix = "use S3-safe path segments without leading/trailing slashes, e.g. ray-train or team-a/ray-train"
    assert g.parse(12) == "12" and g.parse("team-a/ray_train.v2(1)'!") == "team-a/ray_train.v2(1)'!"
    assert _refused(g, "").fix == f"is empty; {fix}"
    assert _refused(g, 5, parse=False).fix == f"is empty; {fix}"
    assert g.parse("a" * v.S3_PREFIX_MAX) and g.parse("a/" * 255 + "ab")
    assert _refused(g, "é" * 257).fix.startswith("is 514 bytes; S3 keys are at most 1024 bytes")
    assert _refused(g, "a" * 513).fix.startswith("is 513 bytes;")
    assert _refused(g, "a*b?c*").fix.startswith("contains '*?': IAM reads * and ? as wildcards")
    assert _refused(g, "${x}").fix.startswith("contains '$': IAM reads")
    for raw in ("a/../b", "./a", "..", "a/."):
        assert _refused(g, raw).fix.startswith("has a '.' or '..' path segment")
    for raw in ("/a", "a/", "a//b"):
        said = _refused(g, raw).fix
        assert said.startswith("has a leading, trailing or double slash; ") and fix in said
    said = _refused(g, "ok/a b").fix
    assert said.startswith("contains ' ', outside S3's safe characters") and v.S3_KEYS in said and said.endswith(fix)
    assert _refused(g, "a/é").fix.startswith("contains 'é', outside")
    assert _refused(g, "Team/Ab c").fix.startswith("contains ' ', outside")  # the first unsafe one, not 'A'
    assert g.parse("a..b/.c") == "a..b/.c"
    assert g.parse("Team-X/Ray") == "Team-X/Ray"  # S3's safe characters include uppercase


# -- images, versions, Kubernetes names -------------------------------------------------------------------------------

DIGEST = "0123456789abcdef" * 4


@pytest.mark.parametrize(
    "image, says",
    [
        (None, "must be an image reference such as public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1"),
        ("", "must be an image reference such as public.ecr.aws/"),
        (5, "must be an image reference such as public.ecr.aws/"),
        ("r" * 4097, "is 4097 characters; an image reference is a registry path, a tag and a digest"),
        ("repo/ray:" + "t" * 129, "the tag 'tttttttttttttttttttttttttttttttttttttttt'... is not a valid tag"),
        (
            "repo/ray:.x",
            "the tag '.x' is not a valid tag (letters, digits, '_', '.', '-', at most 128 characters, not "
            "starting with '.' or '-')",
        ),
        (f"repo/ray:-x@sha256:{DIGEST}", "the tag '-x' is not a valid tag"),
        ("repo/Ray:1", "is not an image reference (OCI distribution grammar"),
        ("Repo/ray:1", None),  # an uppercase first component is a registry host (domainNameComponent takes A-Z)
        ("my image:1", "is not an image reference"),
        ("repo/ray:a/b", "is not an image reference"),
        ("Repo:.x", "is not an image reference"),
        ("repo/ray", None),
        ("localhost:5000/ray:1", None),
        ("a/" + "b" * 254, "the repository name is 256 characters; references allow at most 255"),
        (f"repo/ray@md5:{DIGEST}", "the digest algorithm 'md5' is not one registries use; pin with @sha256: and 64"),
        (f"repo/ray@sha256:{DIGEST[:63]}0", None),
        (
            f"repo/ray@sha256:{DIGEST}0",
            "the sha256 digest has 65 characters; it must be exactly 64 lowercase hex digits",
        ),
        (
            f"repo/ray@sha256:{DIGEST.upper()}",
            "the sha256 digest has 64 characters with uppercase; it must be exactly 64",
        ),
        (
            f"repo/ray@sha512:{DIGEST}",
            "the sha512 digest has 64 characters; it must be exactly 128 lowercase hex digits",
        ),
        (f"repo/ray@sha512:{DIGEST * 2}", None),
    ],
)
def test_image_reference_problem(image, says):
    got = v.image_reference_problem(image)
    assert (got is None) if says is None else (got is not None and got.startswith(says)), got


def test_image_reference_names_at_the_edge():
    assert v.image_reference_problem("a/" + "b" * 253) is None
    assert v.image_reference_problem("r" * 4096).startswith("the repository name is 4096")
    assert v.image_reference_problem("repo/ray:" + "t" * 128) is None
    assert v.image_reference_problem("repo/ray:" + "t" * 40 + "/").startswith("is not an image reference")
    rest = "is not a valid tag (letters, digits, '_', '.', '-', at most 128 characters, not starting with '.' or '-')"
    assert v.image_reference_problem("repo/ray:" + "t" * 39 + "é") == f"the tag '{'t' * 39}é' {rest}"
    assert v.image_reference_problem("repo/ray:" + "t" * 40 + "é") == f"the tag '{'t' * 40}'... {rest}"


@pytest.mark.parametrize("image", ["localhost:5000/ray:.x", f"localhost:5000/ray:.x@sha256:{DIGEST}"])
def test_a_bad_tag_after_a_registry_port_is_named(image):
    """The tag is after the last ':' of the name (the first ':' is the registry's port)."""
    assert v.image_reference_problem(image).startswith("the tag '.x' is not a valid tag")


def test_a_stray_at_sign_is_named_inside_the_tag():
    """The digest starts at the last '@': an '@' before it belongs to the tag, and the message shows it there."""
    assert v.image_reference_problem(f"r/ray:x@a@sha256:{DIGEST}").startswith("the tag 'x@a' is not a valid tag (")


@pytest.mark.parametrize(
    "ref, starts, ends",
    [
        (
            "my image:1",
            "is not an image reference (OCI distribution grammar: ",
            "e.g. public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1",
        ),
        (
            f"r/ray@md5:{DIGEST}",
            "the digest algorithm 'md5' is not one registries use; pin with @sha256:",
            "go-digest)",
        ),
        (
            f"r/ray@sha256:{DIGEST[1:]}",
            "the sha256 digest has 63 characters; it must be exactly 64",
            "as `docker buildx imagetools inspect IMAGE` prints it",
        ),
    ],
)
def test_image_reference_problems_name_the_part_and_the_fix(ref, starts, ends):
    said = v.image_reference_problem(ref)
    assert said.startswith(starts) and said.endswith(ends), said


@pytest.mark.parametrize(
    "image, tag",
    [
        ("repo/ray:1", "1"),
        ("localhost:5000/ray", None),
        ("localhost:5000/ray:2", "2"),
        ("ray", None),
        (f"ray@sha256:{DIGEST}", None),
        (f"r/ray:1@sha256:{DIGEST}", None),
        ("ray:a:b", "a:b"),
    ],
)
def test_image_tag(image, tag):
    assert v.image_tag(image) == tag


def test_image_reference_needs_a_pin_other_than_latest():
    g = v.ImageReference()
    assert g.parse(f"repo/ray:latest@sha256:{DIGEST}") and g.parse(f"repo/ray@sha256:{DIGEST}")
    assert g.parse("repo/ray:1") == "repo/ray:1"
    p = _refused(g, "localhost:5000/ray")
    assert p.fix.startswith("needs an explicit tag") and "or a digest (@sha256:" in p.fix
    assert p.value == "localhost:5000/ray"
    assert _refused(g, "repo/ray:latest").fix == "':latest' is not reproducible; pin a versioned tag"
    assert g.parse("repo/ray:Latest") == "repo/ray:Latest"
    assert _refused(g, "repo/Ray:1").fix.startswith("is not an image reference")
    assert _refused(g, None).fix.startswith("must be text, not NoneType")


def test_label_key_name_and_prefix_lengths():
    g = v.LabelKey()
    assert g.parse("a" * 253 + "/" + "b" * 63) and g.parse("b" * 63)
    assert _refused(g, "b" * 64).fix == g.fix
    assert _refused(g, "a/" + "b" * 64).fix == g.fix
    prefix = ("a." * 127)[:253] + "a"  # a valid subdomain of 254 characters: one past IsQualifiedName's prefix
    assert len(prefix) == 254 and _refused(g, prefix + "/b").fix == g.fix


def test_label_key_prefix_over_253_is_refused():
    prefix = ".".join(["a" * 63] * 4)  # 255 characters, a valid subdomain grammar-wise
    assert len(prefix) == 255
    p = _refused(v.LabelKey(max_len=400), prefix + "/b")
    assert p.fix == v.LabelKey().fix


def test_quantity_is_never_negative():
    g = v.Quantity()
    assert _refused(g, "-1").fix.startswith("is negative; must be a Kubernetes quantity")
    assert _refused(g, "-0.5Gi").fix.startswith("is negative;")
    assert g.parse("+1") == "+1" and g.parse("0") == "0"
    assert _refused(g, "1GB").fix == g.fix


@pytest.mark.parametrize("text", ["15d", "12h", "1w3d", "1h30m", "10d", "100ms", "1y", "01s"])
def test_prometheus_duration_accepted(text):
    assert v.PrometheusDuration().parse(text) == text


@pytest.mark.parametrize("text", ["0d", "0", "00h0m", "30m1h", "15 d", "15D", "1.5d", "d", "15", "1m1m"])
def test_prometheus_duration_refused(text):
    p = _refused(v.PrometheusDuration(), text)
    assert (p.fix, p.value) == (v.PrometheusDuration().fix, text)


def test_prometheus_duration_text_rules_come_first():
    assert _refused(v.PrometheusDuration(), "").fix.startswith("is empty; must be a Prometheus duration")
    assert _refused(v.PrometheusDuration(), "1d" * 17).fix.startswith("is 34 characters, at most 32")


# -- the edges the generated tests try ---------------------------------------------------------------------------------

BASE = ["", " ", "\x00", "é", "*", "../x", "-1", "0", "nan", "1e309", "x" * 5000]


def test_the_base_boundary_is_what_a_user_could_type_wrong():
    assert v.Grammar().boundary() == BASE


@pytest.mark.parametrize(
    "grammar, extra",
    [
        (v.Bool(), ["true", "False", "2", "maybe"]),
        (v.Int(2, 5), ["1", "2", "5", "6", "2.0", "2.5", str(10**12), str(-(10**12)), "true", "0x10"]),
        (v.Float(0, 1.0), ["0", "-1", "1.0", "2.5", "inf", "-inf", "1e400", "true"]),
        (v.Float(0, math.inf), ["0", "-1", "inf", "-inf", "1e400", "true"]),
        (v.OneOf(choices=("a", "B")), ["a", "B", "A", "B", "other"]),
        (
            v.HttpUrl(),
            [
                "https://h",
                "http://h:9090/api/v1/write",
                "ftp://h",
                "https://",
                "https://h:0",
                "https://h:65536",
                "http://[::1",
                "https://u:p@h",
                "https://h/a b",
            ],
        ),
        (v.PrometheusDuration(), ["15d", "0d", "0", "1h30m", "30m1h", "15 d", "15D", "1.5d", "d"]),
        (
            v.RemoteWriteUrl(),
            [
                "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1/api/v1/remote_write",
                "https://aps-workspaces.amazonaws.com/workspaces/ws-1/api/v1/remote_write",
            ],
        ),
    ],
)
def test_each_boundary_adds_its_own_edges(grammar, extra):
    got = grammar.boundary()
    assert got[: len(BASE)] == BASE and got[-len(extra) :] == extra


def test_text_boundary_is_at_its_length_limit():
    got = v.Text(max_len=7).boundary()
    assert got[: len(BASE)] == BASE
    assert got[len(BASE) :] == [
        "a" * 7,
        "a" * 8,
        "A",
        "-a",
        "a-",
        "a b",
        "a\nb",
        "ﬀ",
        "a" * 64,
        "a" * 65,
        "a" * 253,
        "a" * 254,
    ]


def test_wrapper_boundaries():
    assert v.OrUnset(inner=v.Bool()).boundary() == v.Bool().boundary()
    lst = v.ListOf(item=v.Int(2, 5)).boundary()
    inner = [b for b in v.Int(2, 5).boundary() if isinstance(b, str)][:8]
    assert lst[: len(BASE)] == BASE and lst[len(BASE) :] == [
        "[]",
        "[1, 2]",
        "{}",
        "[",
        json.dumps(inner),
        ",".join(["a"] * 50),
    ]
    assert len(inner) == 8


def test_network_and_aws_boundaries():
    c = v.Cidr(min_prefix=16, max_prefix=20).boundary()
    assert c[: len(BASE)] == BASE and c[len(BASE) :] == [
        "0.0.0.0/0",
        "::/0",
        "2001:db8::/32",
        "10.0.0.1/16",
        "10.0.0.0/33",
        "256.0.0.0/8",
        "10.0.0.0",
        "10.0.0.0/15",
        "10.0.0.0/20",
        "10.0.0.0/-1",
        "banana",
    ]
    base = "arn:aws:iam::123456789012:role/"
    a = v.PrincipalArn().boundary()
    assert a[: len(BASE)] == BASE and a[len(BASE) :] == [
        base + "admins",
        base + "*",
        base + "a" * 64,
        base + "a" * 65,
        base + "ädmin",
        base + "p/" * 300 + "x",
        "arn:aws:iam::123456789012:group/g",
        "arn:aws:sts::123456789012:assumed-role/A/s",
        base,
        base + "a/",
        base + "a//b",
        "arn:aws:iam::12345:role/x",
    ]
    s = v.S3KeyPrefix().boundary()
    assert s[: len(BASE)] == BASE and s[len(BASE) :] == [
        "ray-train",
        "a/b",
        "*",
        "a/*",
        "a?",
        "${aws:username}",
        "a/../b",
        "./a",
        "..",
        "/a",
        "a/",
        "a//b",
        "a b",
        "a" * 512,
        "a" * 513,
        "é" * 300,
    ]
    d = "a" * 64
    i = v.ImageReference().boundary()
    assert i[: len(BASE)] == BASE and i[-10:] == [
        "repo/ray",
        "repo/ray:latest",
        "repo/ray:1",
        f"repo/ray@sha256:{d}",
        f"repo/ray@sha256:{d[:63]}",
        f"repo/ray@sha256:{d.upper()}",
        f"repo/ray@md5:{d}",
        "Repo/ray:1",
        "repo/ray:" + "t" * 129,
        "my image:1",
    ]
    assert i[len(BASE) : len(BASE) + 2] == ["a" * 4096, "a" * 4097]


def test_every_boundary_straddles_its_grammar():
    """Each grammar's edges hold values it takes and values it refuses (else they try nothing)."""
    from ray_efa_eks.components.config.config import GRAMMARS

    # plain Text grammars whose pattern no generic edge matches (the generated tests take valid ones from elsewhere)
    no_valid_edge = {"region", "gpuInstanceType", "systemInstanceType", "rayVersion", "kuberayChartVersion"}
    for key, g in GRAMMARS.items():
        if key in no_valid_edge:
            continue
        took = refused = 0
        for raw in g.boundary():
            try:
                g.parse(raw)
                took += 1
            except v.ValueProblem:
                refused += 1
        assert took and refused, (key, took, refused)


def test_argtype_names_the_grammar_and_shortens_a_long_value():
    import argparse

    parse = v.argtype(v.Text(pattern="[a-z]+", fix="lowercase"))
    assert parse.__name__ == "Text" and v.argtype(v.Int(), "count").__name__ == "count"
    assert parse("abc") == "abc"
    with pytest.raises(argparse.ArgumentTypeError) as e:
        parse("9" * 80)
    assert str(e.value) == f"'{'9' * 59}...: lowercase"
    with pytest.raises(argparse.ArgumentTypeError) as e:
        parse("9" * 58)
    assert str(e.value) == f"'{'9' * 58}': lowercase"


def test_problems_goes_on_after_a_key_without_a_grammar():
    assert v.problems({"free": "x", "n": 9}, {"n": v.Int(0, 5)}) == [("n", 9, "must be <= 5")]


def test_problems_reports_the_grammars_value_when_it_names_one():
    got = v.problems(
        {"l": ["a", "a"], "n": 9, "u": None},
        {"l": v.ListOf(unique=True), "n": v.Int(0, 5), "u": v.OrUnset(inner=v.Int())},
    )
    assert got == [("l", "a", "is listed twice; list each entry once"), ("n", 9, "must be <= 5")]


class _NoValue(v.Grammar):
    def check(self, value):
        raise v.ValueProblem("always")


def test_problems_falls_back_to_the_value_given():
    assert v.problems({"k": [1]}, {"k": _NoValue()}) == [("k", [1], "always")]
