"""components/values.py conditions its own tests did not reach, each outcome asserted (issue 40)."""

from __future__ import annotations

import pytest

from ray_efa_eks.components import values as v


@pytest.mark.parametrize("url, says", [
    ("https://h/a b", "contains whitespace"),
    ("http://[::1", "is not a URL"),
    ("https://h:65536", "is not a URL"),
    ("ftp://h", "needs a scheme (https/http) and a host"),
    ("https://", "needs a scheme (https/http) and a host"),
    ("https://h:0", "port 0 is no port (1..65535)"),
    ("https://u:p@h", "carries credentials in the URL"),
])
def test_a_remote_write_url_is_refused_saying_why(url, says):
    with pytest.raises(v.ValueProblem) as e:
        v.HttpUrl().check(url)
    assert says in str(e.value) and e.value.value == url


@pytest.mark.parametrize("url", ["https://h", "http://h:9090/api/v1/write"])
def test_a_remote_write_url_is_accepted(url):
    v.HttpUrl().check(url)


def test_problems_lists_every_bad_value_and_skips_keys_without_a_grammar():
    got = v.problems({"a": "https://h:0", "b": "https://h", "c": "anything"}, {"a": v.HttpUrl(), "b": v.HttpUrl()})
    assert [(k, val) for k, val, _ in got] == [("a", "https://h:0")]
    assert got[0][2].startswith("port 0 is no port")
