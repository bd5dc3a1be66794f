"""The gate's options are one typed spec (components/gate_request.py): what the gate renders, the check's parser
reads back as the same request, field by field, so the two sides cannot drift apart."""

from __future__ import annotations

import typing
from dataclasses import fields, replace

import pytest

from ray_efa_eks.components.addons.efa_check import Deadlines, check_args, gate_transport
from ray_efa_eks.components.gate_request import CheckRequest
from ray_efa_eks.components.nodes.instances import CATALOGUE
from ray_efa_eks.efacheck.check_args import parser

OTHER = {bool: True, int: 7, float: 12.5, str: "value-x"}
"""A value unlike every default, per field type."""
CHOICES = {"backend": "gloo", "expect_transport": "socket"}
"""Fields the parser limits to a set of choices: a non-default member."""

HINTS = typing.get_type_hints(CheckRequest)


def other_value(name: str):
    if name in CHOICES:
        return CHOICES[name]
    kinds = [t for t in typing.get_args(HINTS[name]) if t is not type(None)] or [HINTS[name]]
    return OTHER[kinds[0]]


def read_back(argv: list[str]) -> CheckRequest:
    """The request the check's own parser reads from ``argv`` (no usage rules: one field at a time)."""
    return CheckRequest.from_namespace(parser().parse_args(argv))


@pytest.mark.parametrize("name", [f.name for f in fields(CheckRequest)])
def test_every_field_round_trips(name, monkeypatch):
    monkeypatch.delenv("RAY_EFA_EKS_IMAGE_DIGEST", raising=False)
    request = replace(CheckRequest(), **{name: other_value(name)})
    assert getattr(request, name) != getattr(CheckRequest(), name)
    assert read_back(request.argv()) == request


def test_defaults_render_nothing_and_the_parser_agrees(monkeypatch):
    monkeypatch.delenv("RAY_EFA_EKS_IMAGE_DIGEST", raising=False)
    assert CheckRequest().argv() == []
    assert read_back([]) == CheckRequest()


@pytest.mark.parametrize("type_name", [None, "p5.48xlarge", "g6.12xlarge"])
@pytest.mark.parametrize("nodes,efa", [(2, True), (2, False), (1, True)])
def test_what_the_gate_writes_reads_back_as_what_it_asked(type_name, nodes, efa):
    it = CATALOGUE[type_name] if type_name else None
    d = Deadlines()
    argv = check_args(
        it,
        nodes,
        d,
        40.0,
        image="img:1",
        spec_hash="h",
        min_busbw_fraction=0.5,
        compare_socket=True,
        strict_versions=True,
        require_counters=True,
        storage_proof=True,
        transport=gate_transport(efa, nodes),
    )
    got = read_back(argv)
    assert (got.json, got.expect_nodes, got.wait_s, got.timeout_s) == (
        True,
        nodes,
        d.topology_wait_s,
        d.sweep_timeout_s,
    )
    assert (got.image, got.spec_hash, got.min_busbw_gbps, got.strict_versions, got.storage_proof) == (
        "img:1",
        "h",
        40.0,
        True,
        True,
    )
    assert got.expect_transport == gate_transport(efa, nodes)
    assert got.expect_gpus_per_node == (it.gpus if it else 0)


def test_an_unknown_field_to_always_write_is_refused():
    with pytest.raises(ValueError, match="no field wait"):
        CheckRequest().argv(always=["wait"])
