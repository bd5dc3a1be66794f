"""The layout facts the rules decide on (tools/layout.py, layout_node_groups.py, layout_pods.py, layout_network.py),
read through their public functions from hand-made resources in both shapes (the mocks' inputs, a preview's
children and dependencies, values only ``up`` knows).

test_rules.py proves each rule on the program's stack and on a preview's shape; here each fact gets the smallest
stack that reaches one condition (``node_groups()``, ``pods()``, ``self_rules()``, ``dashboard_exposures()`` and the
pod-spec helpers), mostly as tables of cases. No Pulumi engine: milliseconds.
"""

from __future__ import annotations

import copy
import re
from decimal import Decimal
from types import SimpleNamespace

import pytest

from ray_efa_eks.tools import layout as L
from ray_efa_eks.tools import layout_network as N
from ray_efa_eks.tools import layout_node_groups as G
from ray_efa_eks.tools import layout_pods as P
from ray_efa_eks.tools.layout import UNKNOWN, Resource, Stack


def R(
    type_: str, rname: str, parent: str | None = None, id: str | None = None, deps: dict | None = None, **props
) -> Resource:
    return Resource(type_, rname, f"urn:{type_}::{rname}", parent, props, id, deps or {})


def urn(type_: str, name: str) -> str:
    return f"urn:{type_}::{name}"


# == tools/layout.py ==================================================================================================


def test_unknown_is_one_falsy_value_that_a_copy_keeps():
    assert repr(UNKNOWN) == "<unknown>" and not UNKNOWN
    assert type(UNKNOWN)() is UNKNOWN and copy.deepcopy({"a": [UNKNOWN]})["a"][0] is UNKNOWN
    assert L.is_unknown(UNKNOWN) and not L.is_unknown(None) and not L.is_unknown("04da6b54")


class UnknownValueError(Exception):
    """pulumi_policy's error for reading an unknown value: known by its ``unknown_type_sentinel``."""

    unknown_type_sentinel = "x"


class Proxy(dict):
    """pulumi_policy's proxy: reading an unknown key raises UnknownValueError."""

    def __getitem__(self, key):
        if key == "unknown":
            raise UnknownValueError()
        if key == "broken":
            raise KeyError(key)
        return super().__getitem__(key)


class ListProxy(list):
    def __getitem__(self, i):
        if i == 1:
            raise UnknownValueError()
        return super().__getitem__(i)


def test_plain_turns_only_the_proxys_unknown_error_into_unknown():
    assert L.plain(Proxy(a=1, unknown=2)) == {"a": 1, "unknown": UNKNOWN}
    assert L.plain(ListProxy([1.0, 2, 3])) == [1, UNKNOWN, 3]
    with pytest.raises(KeyError):
        L.plain(Proxy(a=1, broken=3))


def test_plain_each_kind():
    assert L.plain(None) is None and L.plain(True) is True and L.plain(UNKNOWN) is UNKNOWN
    assert L.plain("04da6b54-80e4-46f7-96ec-b56ff0331ba9") is UNKNOWN and L.plain("text") == "text"
    assert L.plain(3.0) == 3 and isinstance(L.plain(3.0), int) and L.plain(2.5) == 2.5 and L.plain(7) == 7
    assert L.plain(Proxy(a=(1.0, "1c4a061d-8072-4f0a-a4cb-0ff528b18fe7"), unknown=1, **{"3": None})) == {
        "a": [1, UNKNOWN],
        "unknown": UNKNOWN,
        "3": None,
    }
    assert L.plain(object()) == "<object>"


def test_resource_json_round_trip_and_label():
    r = Resource("t", "n", "urn:t::n", None, {"a": UNKNOWN, "b": [UNKNOWN, {"c": 1}]}, "id-1")
    assert r.label == "t n"
    d = r.to_json()
    assert d == {
        "type": "t",
        "name": "n",
        "urn": "urn:t::n",
        "parent": None,
        "id": "id-1",
        "props": {"a": "<unknown>", "b": ["<unknown>", {"c": 1}]},
    }
    back = Resource.from_json({**d, "deps": {"x": ("u1",)}})
    assert back.props == d["props"] and back.deps == {"x": ["u1"]} and back.id == "id-1"
    bare = Resource.from_json({"type": "t", "name": "n"})
    assert (bare.urn, bare.parent, bare.props, bare.id, bare.deps) == ("t::n", None, {}, None, {})
    # a saved plan's child keeps every field, its parent included (plan_run rebuilds the tree from it)
    child = {
        "type": "c",
        "name": "k",
        "urn": "urn:c::k",
        "parent": "urn:t::n",
        "id": None,
        "props": {"n": 1.0},
        "deps": {"p": ["urn:t::n"]},
    }
    assert Resource.from_json(child) == Resource("c", "k", "urn:c::k", "urn:t::n", {"n": 1}, None, {"p": ["urn:t::n"]})


def test_from_mockrun_and_from_policy():
    run = SimpleNamespace(
        resources=[
            SimpleNamespace(type="t", name="n", urn="u", parent=None, inputs={"a": 1.0}),
            SimpleNamespace(type="t", name="m", urn=None, parent="u", inputs={}),
        ],
        ids={"u": "id-u"},
    )
    got = L.from_mockrun(run)
    assert [(r.urn, r.props, r.id, r.parent) for r in got] == [("u", {"a": 1}, "id-u", None), ("t::m", {}, None, "u")]
    assert got[0] == Resource("t", "n", "u", None, {"a": 1}, "id-u")
    assert L.from_mockrun(SimpleNamespace(resources=got[:0])) == []
    # a run that recorded no ids (an older mockrun): every id is None
    no_ids = SimpleNamespace(resources=[SimpleNamespace(type="t", name="n", urn="u", parent=None, inputs={})])
    assert L.from_mockrun(no_ids) == [Resource("t", "n", "u", None, {}, None)]
    pr = [
        SimpleNamespace(
            resource_type="t",
            name="a",
            urn="ua",
            parent=SimpleNamespace(urn="up"),
            props={"id": "i"},
            property_dependencies={"p": [SimpleNamespace(urn="ud")]},
        ),
        SimpleNamespace(
            resource_type="t", name="b", urn="ub", parent=None, opts=SimpleNamespace(parent="uo"), props=None
        ),
        SimpleNamespace(resource_type="t", name="c", urn="uc", props={"id": UNKNOWN}, property_dependencies=None),
        SimpleNamespace(resource_type="t", name="d", urn="ud", parent=None, opts=SimpleNamespace(parent=""), props={}),
    ]
    a, b, c, d = L.from_policy(pr)
    assert a == Resource("t", "a", "ua", "up", {"id": "i"}, "i", {"p": ["ud"]})
    assert (b.parent, b.props, b.id, b.deps) == ("uo", {}, None, {})
    assert (c.parent, c.id) == (None, None) and d.parent is None


def test_dig_paths():
    v = {"a": [{"b": 1}, UNKNOWN]}
    assert L.dig(v, "a", 0, "b") == 1 and L.dig(v, "a", -2, "b") == 1
    assert L.dig(v, "a", 1, "b") is UNKNOWN  # unknown stays unknown
    assert L.dig(v, "a", 2, default="d") == "d" and L.dig(v, "a", -3, default="d") == "d"
    assert L.dig(v, "a", "0", default="d") == "d"  # a list takes int indexes only
    assert L.dig(v, "x", default=0) == 0 and L.dig(v, "a", 0, "b", "c") is None
    assert L.dig(v) is v


def test_urn_label():
    assert L.urn_label(None) is None and L.urn_label("") is None
    assert L.urn_label("urn:pulumi:dev::p::eks:index:Cluster$aws:eks/cluster:Cluster::ray") == (
        "aws:eks/cluster:Cluster ray"
    )
    assert L.urn_label("urn:pulumi:dev::p::kubernetes:core/v1:Service::svc") == "kubernetes:core/v1:Service svc"
    assert L.urn_label("name-only") == "name-only"
    # a grandchild's type is qualified by each ancestor's type: the last one is its own
    assert (
        L.urn_label("urn:pulumi:dev::p::eks:index:Cluster$eks:index:ManagedNodeGroup$aws:eks/nodeGroup:NodeGroup::gpu")
        == "aws:eks/nodeGroup:NodeGroup gpu"
    )


def test_stack_index():
    parent = R("p", "a", id="id-a")
    kids = [R("k", "b", parent=parent.urn), R("j", "c", parent=parent.urn, id="")]
    s = Stack([parent, *kids])
    assert s.children(parent) == kids and s.children(parent, "k") == kids[:1] and s.children(kids[0]) == []
    assert s.parent_of(kids[0]) is parent and s.parent_of(parent) is None
    assert s.parent_of(R("k", "orphan", parent="urn:gone")) is None
    assert s.resolve("id-a") is parent and s.resolve(kids[1].urn) is kids[1] and s.resolve(UNKNOWN) is None
    assert s.resolve("") is None and s.resolve("nope") is None and s.of_type("k", "j") == kids


# == tools/layout_node_groups.py ======================================================================================
# node_groups() is the entry point: each fact is read off the group it answers for one small stack.


def sub(name, az="us-east-1a"):
    return R(L.SUBNET, name, id=f"{name}-id", availabilityZone=az)


def lt(name="lt", deps=None, **props):
    return R(L.LAUNCH_TEMPLATE, name, id=f"{name}-id", deps=deps, **props)


def mng(name="gpu", **props):
    return R(L.MNG, name, **props)


def one(stack_resources) -> G.NodeGroup:
    groups = G.node_groups(Stack(stack_resources))
    assert len(groups) == 1
    return groups[0]


def with_lt(template: Resource, *extra: Resource, **group) -> list[Resource]:
    """A ManagedNodeGroup (mock shape) using ``template``."""
    return [template, *extra, mng(launchTemplate={"id": template.id}, **group)]


A, B = sub("a"), sub("b", "us-east-1b")
OTHER = R("x", "x", id="x-id")
PG = R(L.PLACEMENT_GROUP, "pg", id="pg-id", name="efa-pg", strategy="cluster")
NIS = [
    {"interfaceType": "efa", "securityGroups": ["sg-1", "sg-2"]},
    {"interfaceType": "efa-only", "securityGroups": ["sg-2", "sg-3"]},
    {"interfaceType": "interface", "securityGroups": ["sg-9"]},
    {"interfaceType": "efa-only"},
    "junk",
]


def scaled(lo, hi, ignore=True):
    return [mng(scalingConfig={"minSize": lo, "maxSize": hi}, ignoreScalingChanges=ignore)]


NODE_GROUP_FACTS = [
    # -- gpu and gpus_per_node: the catalogue's count when every type is known, else the AMI and taints --------------
    ("gpu-type", [mng(instanceTypes=["g6.12xlarge"])], {"gpu": True, "gpus_per_node": 4}),
    ("cpu-type", [mng(instanceTypes=["m7i.xlarge"])], {"gpu": False, "gpus_per_node": 0}),
    ("one-gpu-is-a-gpu-node", [mng(instanceTypes=["g6.16xlarge"])], {"gpu": True, "gpus_per_node": 1}),
    ("a-type-unknown", [mng(instanceTypes=["g6.12xlarge", "x.unknown"])], {"gpu": False, "gpus_per_node": None}),
    ("no-types", [mng()], {"gpu": False, "gpus_per_node": None}),
    (
        "known-cpu-type-over-gpu-ami",
        [mng(instanceTypes=["m7i.xlarge"], amiType="AL2023_x86_64_NVIDIA")],
        {"gpu": False},
    ),
    ("nvidia-ami", [mng(amiType="AL2023_x86_64_NVIDIA")], {"gpu": True}),
    ("gpu-ami", [mng(amiType="BOTTLEROCKET_x86_64_GPU")], {"gpu": True}),
    ("standard-ami", [mng(amiType="AL2023_x86_64_STANDARD")], {"gpu": False}),
    ("unknown-ami", [mng(amiType=UNKNOWN)], {"gpu": False}),
    (
        "types-unknown-gpu-ami",
        [mng(instanceTypes=UNKNOWN, amiType="AL2023_x86_64_NVIDIA")],
        {"gpu": True, "gpus_per_node": None},
    ),
    ("gpu-taint", [mng(taints=["junk", {"key": "nvidia.com/gpu", "effect": "NoSchedule"}])], {"gpu": True}),
    ("other-taint", [mng(taints=[{"key": "other"}])], {"gpu": False}),
    ("unknown-taints", [mng(taints=UNKNOWN)], {"gpu": False}),
    # -- instance types: names only, from the group, else its template ------------------------------------------------
    ("types-names-only", [mng(instanceTypes=["a", 1, UNKNOWN, "b"])], {"instance_types": ["a", "b"]}),
    ("types-not-a-list", [mng(instanceTypes="g6.12xlarge")], {"instance_types": []}),
    ("types-unknown", [mng(instanceTypes=UNKNOWN)], {"instance_types": []}),
    # -- EFA interfaces of the launch template and their security groups ----------------------------------------------
    (
        "efa-interfaces-unknown",
        with_lt(lt(networkInterfaces=UNKNOWN)),
        {"efa_interfaces": UNKNOWN, "security_group_ids": UNKNOWN, "efa_enabled": False},
    ),
    ("efa-no-interfaces", with_lt(lt()), {"efa_interfaces": 0, "security_group_ids": [], "efa_enabled": False}),
    ("efa-interfaces-not-a-list", with_lt(lt(networkInterfaces="x")), {"efa_interfaces": 0, "security_group_ids": []}),
    (
        "efa-an-interface-unknown",
        with_lt(lt(networkInterfaces=[UNKNOWN])),
        {"efa_interfaces": UNKNOWN, "security_group_ids": UNKNOWN},
    ),
    (
        "efa-an-interface-type-unknown",
        with_lt(lt(networkInterfaces=[{"interfaceType": UNKNOWN}])),
        {"efa_interfaces": UNKNOWN, "security_group_ids": UNKNOWN},
    ),
    (
        "efa-and-efa-only-counted-groups-once",
        with_lt(lt(networkInterfaces=NIS)),
        {
            "efa_interfaces": 3,
            "security_group_ids": ["sg-1", "sg-2", "sg-3"],
            "efa_enabled": True,
            "efa_source": "launch template",
        },
    ),
    (
        "efa-groups-unknown",
        with_lt(lt(networkInterfaces=[{"interfaceType": "efa", "securityGroups": UNKNOWN}])),
        {"efa_interfaces": 1, "security_group_ids": UNKNOWN},
    ),
    (
        "efa-a-group-unknown",
        with_lt(lt(networkInterfaces=[{"interfaceType": "efa", "securityGroups": ["a", UNKNOWN]}])),
        {"efa_interfaces": 1, "security_group_ids": UNKNOWN},
    ),
    # -- subnets: by id when every id names a subnet, else through the group's dependencies --------------------------
    (
        "subnets-by-id",
        [A, B, OTHER, mng(subnetIds=["a-id", "b-id"])],
        {"subnets": [A, B], "subnet_ids": ["a-id", "b-id"], "azs": ["us-east-1a", "us-east-1b"]},
    ),
    ("subnets-an-id-not-a-subnet", [A, OTHER, mng(subnetIds=["a-id", "x-id"])], {"subnets": UNKNOWN, "azs": UNKNOWN}),
    (
        "subnets-an-id-missing-deps-read",
        [A, OTHER, mng(subnetIds=["a-id", "nope"], deps={"subnetIds": [A.urn, "urn:gone", OTHER.urn]})],
        {"subnets": [A]},
    ),
    (
        "subnets-ids-unknown-deps-read",
        [A, mng(subnetIds=UNKNOWN, deps={"subnetIds": [A.urn]})],
        {"subnets": [A], "azs": ["us-east-1a"]},
    ),
    (
        "subnets-an-id-unknown-deps-read",
        [A, B, mng(subnetIds=["b-id", UNKNOWN], deps={"subnetIds": [A.urn]})],
        {"subnets": [A]},
    ),
    ("subnets-no-ids-deps-read", [A, mng(subnetIds=[], deps={"subnetIds": [A.urn]})], {"subnets": [A]}),
    ("subnets-ids-unknown-no-deps", [A, mng(subnetIds=UNKNOWN)], {"subnets": UNKNOWN}),
    (
        "subnets-deps-name-no-subnet",
        [A, OTHER, mng(subnetIds=UNKNOWN, deps={"subnetIds": [OTHER.urn]})],
        {"subnets": UNKNOWN},
    ),
    (
        "azs-sorted-once",
        [A, B, sub("c", "us-east-1b"), mng(subnetIds=["b-id", "a-id", "c-id"])],
        {"azs": ["us-east-1a", "us-east-1b"]},
    ),
    ("azs-an-az-unknown", [sub("u", UNKNOWN), mng(subnetIds=["u-id"])], {"azs": UNKNOWN}),
    ("azs-an-az-missing", [sub("n", None), mng(subnetIds=["n-id"])], {"azs": UNKNOWN}),
    # -- the placement group the template names: by name, by id, else through its dependency -------------------------
    ("pg-by-name", with_lt(lt(placement={"groupName": "efa-pg"}), PG), {"placement_strategy": "cluster"}),
    ("pg-by-id", with_lt(lt(placement={"groupName": "pg-id"}), PG), {"placement_strategy": "cluster"}),
    ("pg-named-but-gone", with_lt(lt(placement={"groupName": "gone"}), PG), {"placement_strategy": None}),
    (
        "pg-empty-name-names-none",
        with_lt(lt(placement={"groupName": ""}), R(L.PLACEMENT_GROUP, "new", id="", name="", strategy="spread")),
        {"placement_strategy": None},
    ),
    (
        "pg-unknown-name-dependency",
        with_lt(lt(placement={"groupName": UNKNOWN}, deps={"placement": [PG.urn]}), PG),
        {"placement_strategy": "cluster"},
    ),
    ("pg-unknown-name-no-dependency", with_lt(lt(placement={"groupName": UNKNOWN})), {"placement_strategy": UNKNOWN}),
    (
        "pg-dependencies-name-no-group",
        with_lt(lt(placement={"groupName": "gone"}, deps={"placement": ["urn:x", A.urn]}), A),
        {"placement_strategy": None},
    ),
    # -- max_nodes: only a size the Cluster Autoscaler owns --------------------------------------------------------
    ("scaled", scaled(0, 4), {"max_nodes": 4}),
    ("scaled-engine-floats", scaled(0.0, 4.0), {"max_nodes": 4}),
    ("scaled-pulumi-owns-size", scaled(0, 4, ignore=False), {"max_nodes": None}),
    ("scaled-fixed", scaled(2, 2), {"max_nodes": None}),
    ("scaled-min-above-max", scaled(3, 2), {"max_nodes": None}),
    ("scaled-bool-min", scaled(True, 4), {"max_nodes": None}),
    ("scaled-unknown-max", scaled(0, UNKNOWN), {"max_nodes": None}),
    ("scaled-no-config", [mng()], {"max_nodes": None, "nodes": UNKNOWN}),
]


@pytest.mark.parametrize("resources, want", [c[1:] for c in NODE_GROUP_FACTS], ids=[c[0] for c in NODE_GROUP_FACTS])
def test_node_group_facts(resources, want):
    g = one(resources)
    assert {k: getattr(g, k) for k in want} == want


def bare(name="ng", deps=None, **props):
    return R(L.NODE_GROUP, name, deps=deps, **props)


T = lt(instanceType="g6.12xlarge")


@pytest.mark.parametrize(
    "resources, want",
    [
        ([T, A, bare(launchTemplate={"id": "lt-id"})], (["g6.12xlarge"], 0)),
        ([T, A, bare(launchTemplate={"id": "a-id"})], ([], UNKNOWN)),  # a subnet's id: no template of the stack
        ([T, A, bare(launchTemplate={"id": UNKNOWN}, deps={"launchTemplate": [A.urn, T.urn]})], (["g6.12xlarge"], 0)),
        ([T, bare(deps={"launchTemplate": ["urn:gone"]})], ([], 0)),
    ],
    ids=["by-id", "id-of-another-type", "by-dependency", "dependency-gone"],
)
def test_node_group_template_lookup(resources, want):
    g = one(resources)
    assert (g.instance_types, g.efa_interfaces) == want


def test_mock_shape_with_our_launch_template():
    a, b = sub("a"), sub("b", "us-east-1b")
    pg = R(L.PLACEMENT_GROUP, "pg", id="pg-id", name="efa", strategy="cluster")
    t = lt(
        instanceType="g6.12xlarge",
        placement={"groupName": "efa"},
        networkInterfaces=[{"interfaceType": "efa", "securityGroups": ["sg-1"]}],
        capacityReservationSpecification={"capacityReservationTarget": {"capacityReservationId": "cr-1"}},
        instanceMarketOptions={"marketType": "capacity-block"},
    )
    m = mng(
        launchTemplate={"id": "lt-id"},
        subnetIds=["a-id", "b-id"],
        capacityType="CAPACITY_BLOCK",
        scalingConfig={"desiredSize": 2, "minSize": 2, "maxSize": 2},
        labels={"role": "gpu"},
    )
    g = one([a, b, pg, t, m])
    assert (g.instance_types, g.nodes, g.gpu, g.gpus_per_node, g.efa_interfaces, g.efa_source) == (
        ["g6.12xlarge"],
        2,
        True,
        4,
        1,
        "launch template",
    )
    assert (g.placement_strategy, g.security_group_ids, g.subnets, g.subnet_ids, g.labels) == (
        "cluster",
        ["sg-1"],
        [a, b],
        ["a-id", "b-id"],
        {"role": "gpu"},
    )
    assert (g.capacity_type, g.market_type, g.reservation, g.max_nodes, g.placement_az) == (
        "CAPACITY_BLOCK",
        "capacity-block",
        "cr-1",
        None,
        None,
    )
    assert G.gpu_node_groups(Stack([a, b, pg, t, m])) == [g]


def test_mock_shape_types_on_the_group_win_over_the_template():
    t = lt(instanceType="p5.48xlarge")
    g = one([t, mng(launchTemplate={"id": "lt-id"}, instanceTypes=["g6.12xlarge"])])
    assert g.instance_types == ["g6.12xlarge"] and g.efa_interfaces == 0 and g.security_group_ids == []
    g = one([lt(instanceType=UNKNOWN), mng(launchTemplate={"id": "lt-id"})])
    assert g.instance_types == [] and g.nodes is UNKNOWN and not g.gpu and g.capacity_type == "ON_DEMAND"
    g = one([mng(instanceTypes=UNKNOWN, amiType="AL2023_x86_64_NVIDIA")])  # types unknown: the GPU AMI tells
    assert g.gpu and g.gpus_per_node is None


def test_mock_shape_enable_efa_support():
    a, b = sub("a", "us-east-1a"), sub("b", "us-east-1b")
    m = mng(
        enableEfaSupport=True,
        instanceTypes=["p5.48xlarge"],
        subnetIds=["a-id", "b-id"],
        placementGroupAvailabilityZone="us-east-1b",
    )
    g = one([a, b, m])
    assert (g.efa_interfaces, g.security_group_ids, g.efa_source, g.placement_strategy, g.placement_az) == (
        32,
        UNKNOWN,
        "pulumi-eks enableEfaSupport",
        "cluster",
        "us-east-1b",
    )
    assert g.subnets == [b] and g.efa_enabled  # pulumi-eks keeps the placement AZ's subnets only
    g = one([a, b, mng(enableEfaSupport=True, instanceTypes=["x.new"], subnetIds=["a-id", "b-id"])])
    assert g.efa_interfaces is UNKNOWN and g.subnets == [a, b]  # no AZ named: all kept
    assert g.efa_enabled  # pulumi-eks adds the interfaces: known to be on before their count is
    g = one([mng(enableEfaSupport=True, instanceTypes=["p5.48xlarge"], placementGroupAvailabilityZone="us-east-1b")])
    assert g.subnets is UNKNOWN  # no subnets known: nothing to filter
    unknown_az = sub("c", UNKNOWN)
    g = one(
        [
            a,
            unknown_az,
            mng(enableEfaSupport=True, subnetIds=["a-id", "c-id"], placementGroupAvailabilityZone="us-east-1b"),
        ]
    )
    assert g.subnets == [unknown_az]  # an AZ only up knows is kept
    g = one([a, mng(enableEfaSupport=True, subnetIds=["a-id"], placementGroupAvailabilityZone=UNKNOWN)])
    assert g.subnets == [a] and g.placement_az is None


def test_mock_shape_subnets_from_the_groups_dependencies():
    """A group whose subnet ids are unknown (a preview without its EKS child) is read through the subnets its
    subnetIds input depends on."""
    a = sub("a")
    g = one([a, mng(subnetIds=UNKNOWN, deps={"subnetIds": [a.urn]})])
    assert g.subnets == [a] and g.azs == ["us-east-1a"]


def test_mock_shape_plain_node_group():
    g = one([mng(instanceTypes=["m7i.xlarge"], enableEfaSupport=False)])
    assert (g.efa_interfaces, g.security_group_ids, g.efa_source, g.placement_strategy, g.gpu) == (
        0,
        [],
        "pulumi-eks inputs",
        None,
        False,
    )
    assert G.gpu_node_groups(Stack([mng(instanceTypes=["m7i.xlarge"])])) == []


def test_mock_shape_template_with_unknown_placement_group():
    g = one([lt(placement={"groupName": UNKNOWN}), mng(launchTemplate={"id": "lt-id"})])
    assert g.placement_strategy is UNKNOWN
    g = one([lt(placement={"groupName": "gone"}), mng(launchTemplate={"id": "lt-id"})])
    assert g.placement_strategy is None


def preview_group(*extra, ng_props=None, mng_props=None, template=None, mng_children=()):
    m = mng(**(mng_props or {}))
    child = R(L.NODE_GROUP, "gpu-ng", parent=m.urn, deps=(ng_props or {}).pop("_deps", None), **(ng_props or {}))
    kids = [Resource(c.type, c.name, c.urn, m.urn, c.props, c.id, c.deps) for c in mng_children]
    return [m, child, *kids, *([template] if template else []), *extra]


def test_preview_shape_child_node_group_without_a_template():
    a = sub("a")
    g = one(
        preview_group(
            a, ng_props={"subnetIds": ["a-id"], "instanceTypes": ["g6.12xlarge"], "scalingConfig": {"desiredSize": 2}}
        )
    )
    assert (g.efa_interfaces, g.security_group_ids, g.placement_strategy, g.subnets, g.nodes) == (0, [], None, [a], 2)
    assert g.resource.type == L.MNG  # the group is the component, read through its child
    assert g.efa_source == "launch template" and not g.efa_enabled  # EKS's own template: no EFA interfaces


def test_preview_shape_children_in_registration_order():
    """pulumi-eks registers the launch template before the node group: the group is found by its type, not its
    place among the children."""
    t = lt(networkInterfaces=[{"interfaceType": "efa"}], instanceType="g6.12xlarge")
    m = mng()
    kids = [
        Resource(c.type, c.name, c.urn, m.urn, c.props, c.id, c.deps)
        for c in (t, R(L.NODE_GROUP, "gpu-ng", scalingConfig={"desiredSize": 2}, capacityType="SPOT"))
    ]
    g = one([m, *kids])
    assert (g.nodes, g.capacity_type, g.efa_interfaces, g.instance_types) == (2, "SPOT", 1, ["g6.12xlarge"])
    assert g.props == {"scalingConfig": {"desiredSize": 2}, "capacityType": "SPOT"}  # the EKS child's settings
    g = one([mng(instanceTypes=["m7i.xlarge"], labels={"a": "1"})])
    assert g.props == {"instanceTypes": ["m7i.xlarge"], "labels": {"a": "1"}}  # mocks: the group's inputs


def test_preview_shape_pinned_group_with_candidate_subnets_is_unknown():
    a, b = sub("a", "us-east-1a"), sub("b", "us-east-1b")
    pg = R(L.PLACEMENT_GROUP, "pg", strategy="cluster")
    deps = {"subnetIds": [a.urn, b.urn]}
    g = one(preview_group(a, b, ng_props={"subnetIds": UNKNOWN, "_deps": deps}, mng_children=[pg]))
    assert g.subnets is UNKNOWN and g.placement_strategy == "cluster"  # the filter that picks one AZ is unseen
    # the same with a reservation target instead of a placement group
    t = lt(capacityReservationSpecification={"capacityReservationTarget": {"capacityReservationId": UNKNOWN}})
    g = one(
        preview_group(
            a, b, ng_props={"subnetIds": UNKNOWN, "launchTemplate": {"id": "lt-id"}, "_deps": deps}, template=t
        )
    )
    assert g.subnets is UNKNOWN and g.reservation is UNKNOWN
    # known ids: what they name is where the nodes go
    g = one(preview_group(a, b, ng_props={"subnetIds": ["a-id", "b-id"]}, mng_children=[pg]))
    assert g.subnets == [a, b]
    # ids partly unknown, or not a list: the candidates again
    for ids in (["a-id", UNKNOWN], "a-id"):
        g = one(preview_group(a, b, ng_props={"subnetIds": ids, "_deps": dict(deps)}, mng_children=[pg]))
        assert g.subnets is UNKNOWN
    # one AZ among the candidates: no filter can change it
    c = sub("c", "us-east-1a")
    g = one(
        preview_group(a, c, ng_props={"subnetIds": UNKNOWN, "_deps": {"subnetIds": [a.urn, c.urn]}}, mng_children=[pg])
    )
    assert g.subnets == [a, c]
    # not pinned (no placement group, an empty reservation target): the candidates are the subnets
    t = lt(capacityReservationSpecification={"capacityReservationTarget": {}})
    g = one(
        preview_group(
            a, b, ng_props={"subnetIds": UNKNOWN, "launchTemplate": {"id": "lt-id"}, "_deps": deps}, template=t
        )
    )
    assert g.subnets == [a, b] and g.reservation is None
    # pinned but nothing known about the subnets
    g = one(preview_group(ng_props={"subnetIds": UNKNOWN}, mng_children=[pg]))
    assert g.subnets is UNKNOWN


def test_preview_shape_template_and_placement_group_as_children():
    t = lt(networkInterfaces=[{"interfaceType": "efa", "securityGroups": ["sg-1"]}], instanceType="g6.12xlarge")
    pg = R(L.PLACEMENT_GROUP, "pg", strategy="cluster")
    g = one(preview_group(ng_props={}, mng_children=[t, pg]))
    assert (g.efa_interfaces, g.placement_strategy, g.instance_types) == (1, "cluster", ["g6.12xlarge"])
    # the placement group found through the template, not as a child
    pg2 = R(L.PLACEMENT_GROUP, "pg2", name="efa", strategy="spread")
    t2 = lt(placement={"groupName": "efa"})
    g = one(preview_group(pg2, ng_props={"launchTemplate": {"id": "lt-id"}}, template=t2))
    assert g.placement_strategy == "spread"
    g = one(preview_group(ng_props={"launchTemplate": {"id": "lt-id"}}, template=lt(placement={"groupName": "x"})))
    assert g.placement_strategy is None


def test_bare_eks_node_groups():
    a = sub("a")
    pg = R(L.PLACEMENT_GROUP, "pg", name="efa", strategy="cluster")
    t = lt(
        instanceType="g6.12xlarge",
        placement={"groupName": "efa"},
        networkInterfaces=[{"interfaceType": "efa", "securityGroups": ["sg-1"]}],
    )
    ng = R(L.NODE_GROUP, "ng", launchTemplate={"id": "lt-id"}, subnetIds=["a-id"])
    g = one([a, pg, t, ng])
    assert (g.resource, g.instance_types, g.efa_interfaces, g.placement_strategy, g.subnets, g.efa_source) == (
        ng,
        ["g6.12xlarge"],
        1,
        "cluster",
        [a],
        "launch template",
    )
    g = one(
        [
            lt(placement={"groupName": UNKNOWN}),
            R(L.NODE_GROUP, "ng", launchTemplate={"id": "lt-id"}, instanceTypes=["p5.48xlarge"]),
        ]
    )
    assert g.placement_strategy is UNKNOWN and g.instance_types == ["p5.48xlarge"]
    g = one([lt(), R(L.NODE_GROUP, "ng", launchTemplate={"id": "lt-id"})])
    assert g.placement_strategy is None and g.instance_types == []
    g = one([R(L.NODE_GROUP, "ng", instanceTypes=["m7i.xlarge"])])  # no template at all
    assert (g.efa_interfaces, g.security_group_ids, g.placement_strategy) == (0, [], None)
    g = one([R(L.NODE_GROUP, "ng", launchTemplate={})])
    assert (g.efa_interfaces, g.placement_strategy) == (0, None)
    g = one([R(L.NODE_GROUP, "ng", launchTemplate={"id": "someone-elses"})])  # a template not in the stack
    assert (g.efa_interfaces, g.security_group_ids, g.placement_strategy) == (UNKNOWN, UNKNOWN, UNKNOWN)
    # the types on the node group win over its template's; unknown subnet ids: its dependencies; the template's
    # market and reservation are the group's
    b = sub("b", "us-east-1b")
    t = lt(
        instanceType="p5.48xlarge",
        instanceMarketOptions={"marketType": "capacity-block"},
        capacityReservationSpecification={"capacityReservationTarget": {"capacityReservationId": "cr-9"}},
    )
    ng = R(
        L.NODE_GROUP,
        "ng",
        launchTemplate={"id": "lt-id"},
        instanceTypes=["g6.12xlarge"],
        subnetIds=UNKNOWN,
        deps={"subnetIds": [b.urn]},
    )
    g = one([b, t, ng])
    assert (g.instance_types, g.subnets, g.subnet_ids, g.market_type, g.reservation) == (
        ["g6.12xlarge"],
        [b],
        UNKNOWN,
        "capacity-block",
        "cr-9",
    )
    assert one([a, R(L.NODE_GROUP, "ng", subnetIds=["a-id"])]).subnet_ids == ["a-id"]
    # a bare node group after a ManagedNodeGroup's own child: both groups, the child read once
    m = mng("mng", instanceTypes=["m7i.xlarge"])
    child = R(L.NODE_GROUP, "mng-ng", parent=m.urn)
    assert [x.resource.name for x in G.node_groups(Stack([m, child, R(L.NODE_GROUP, "bare")]))] == ["mng", "bare"]
    # a node group whose parent is another component is still read; the MNG's own child is not read twice
    other_parent = R("x:index:Thing", "thing")
    ng2 = R(L.NODE_GROUP, "ng2", parent=other_parent.urn)
    assert [x.resource for x in G.node_groups(Stack([other_parent, ng2]))] == [ng2]


def test_node_group_labels_reservation_and_market():
    t = lt(
        capacityReservationSpecification={
            "capacityReservationTarget": {"capacityReservationResourceGroupArn": "arn:rg"}
        }
    )
    g = one([t, mng(launchTemplate={"id": "lt-id"}, labels=UNKNOWN, capacityType=UNKNOWN)])
    assert (g.labels, g.reservation, g.capacity_type, g.market_type) == ({}, "arn:rg", UNKNOWN, None)
    g = one(
        [
            lt(capacityReservationSpecification={"capacityReservationTarget": UNKNOWN}),
            mng(launchTemplate={"id": "lt-id"}),
        ]
    )
    assert g.reservation is UNKNOWN
    g = one(
        [lt(capacityReservationSpecification={"capacityReservationTarget": None}), mng(launchTemplate={"id": "lt-id"})]
    )
    assert g.reservation is None
    g = one([mng(scalingConfig={"minSize": 0, "maxSize": 3, "desiredSize": 0}, ignoreScalingChanges=True)])
    assert g.max_nodes == 3 and g.nodes == 0


# == tools/layout_pods.py =============================================================================================


def pod(spec, role="pod", name="r"):
    return P.Pod(R("t", name), role, 1, spec)


def test_pod_properties():
    p = pod({"initContainers": [{"name": "i"}, "junk"], "containers": [{"name": "c"}], "nodeSelector": {"a": "1"}})
    assert [c["name"] for c in p.containers] == ["i", "c"] and p.main_container == {"name": "c"}
    assert p.node_selector == {"a": "1"} and p.label == "r pod"
    p = pod({"containers": UNKNOWN, "nodeSelector": UNKNOWN})
    assert p.containers == [] and p.main_container is None and p.node_selector == {}
    assert pod({"containers": []}).main_container is None
    assert pod({"containers": [UNKNOWN]}).main_container is None


def rc(type_=L.RAY_CLUSTER, **spec):
    path = {L.RAY_CLUSTER: (), L.RAY_JOB: ("rayClusterSpec",), L.RAY_SERVICE: ("rayClusterConfig",)}[type_]
    body = spec
    for key in reversed(path):
        body = {key: body}
    return R(type_, type_.rsplit(":", 1)[-1].lower(), spec=body)


def test_ray_specs_and_pods_of_each_kind():
    head = {"template": {"spec": {"containers": [{"name": "head"}]}}}
    workers = [
        {"groupName": "gpu", "replicas": 2, "template": {"spec": {"containers": []}}},
        {"groupName": "auto", "minReplicas": 1, "maxReplicas": 4, "template": {"spec": {}}},
        {"maxReplicas": 3, "template": {"spec": {}}},
        {"template": {"spec": {}}},
        {"groupName": "broken", "template": {"spec": UNKNOWN}},
        "junk",
    ]
    s = Stack(
        [
            rc(headGroupSpec=head, workerGroupSpecs=workers),
            rc(L.RAY_JOB, headGroupSpec=head),
            rc(L.RAY_SERVICE, headGroupSpec={"template": UNKNOWN}),
            R(L.RAY_CLUSTER, "nospec", spec=UNKNOWN),
        ]
    )
    assert [r.name for r, _ in P.ray_specs(s)] == ["raycluster", "rayjob", "rayservice"]
    got = [(p.resource.name, p.role, p.replicas) for p in P.pods(s)]
    assert got == [
        ("raycluster", "head", 1),
        ("raycluster", "worker gpu", 2),
        ("raycluster", "worker auto", "1..4"),
        ("raycluster", "worker ?", "0..3"),
        ("raycluster", "worker ?", UNKNOWN),
        ("rayjob", "head", 1),
    ]
    assert [p.spec for p in P.pods(s)][:2] == [{"containers": [{"name": "head"}]}, {"containers": []}]
    # a replica count written beside the autoscaler's bounds is the count
    both = {"groupName": "g", "replicas": 2, "minReplicas": 1, "maxReplicas": 4, "template": {"spec": {}}}
    assert [p.replicas for p in P.pods(Stack([rc(workerGroupSpecs=[both])]))] == [2]


def test_pods_of_kubernetes_workloads():
    spec = {"containers": [{"name": "c"}]}
    s = Stack(
        [
            R("kubernetes:core/v1:Pod", "p", spec=spec),
            R("kubernetes:apps/v1:Deployment", "d", spec={"replicas": 3, "template": {"spec": spec}}),
            R("kubernetes:apps/v1:DaemonSet", "ds", spec={"template": {"spec": spec}}),
            R("kubernetes:batch/v1:Job", "j", spec={"template": {"spec": spec}}),
            R("kubernetes:batch/v1:CronJob", "cj", spec={"jobTemplate": {"spec": {"template": {"spec": spec}}}}),
            R("kubernetes:batch/v1:Job", "unknown", spec={"template": UNKNOWN}),
            R("kubernetes:core/v1:ConfigMap", "cm", spec=spec),
        ]
    )
    assert [(p.resource.name, p.role, p.replicas) for p in P.pods(s)] == [
        ("p", "pod", 1),
        ("d", "pod", 3),
        ("ds", "pod", 1),
        ("j", "pod", 1),
        ("cj", "pod", 1),
    ]
    assert all(p.spec == spec for p in P.pods(s))  # each kind's pod template, not the workload's own spec


@pytest.mark.parametrize(
    "value, want",
    [
        ("500m", Decimal("0.5")),
        ("8Gi", Decimal(8 * 2**30)),
        ("1k", Decimal(1000)),
        ("2M", Decimal(2_000_000)),
        ("1Mi", Decimal(2**20)),
        (" 4 ", Decimal(4)),
        ("1.5", Decimal("1.5")),
        (2, Decimal(2)),
        (0.5, Decimal("0.5")),
        ("1e3", Decimal(1000)),
        ("100n", Decimal("1E-7")),
        ("3u", Decimal("0.000003")),
        ("1Ei", Decimal(2) ** 60),
        (True, None),
        (None, None),
        (UNKNOWN, None),
        ("lots", None),
        ("Gi", None),
        ("1Xi", None),
    ],
)
def test_quantity(value, want):
    assert P.quantity(value) == want


def test_container_resources_defaults_a_request_to_its_limit():
    c = {"resources": {"limits": {"cpu": "2", "memory": "1Gi"}, "requests": {"cpu": "1"}}}
    assert P.container_resources(c) == ({"cpu": "1", "memory": "1Gi"}, {"cpu": "2", "memory": "1Gi"})
    assert P.container_resources({}) == ({}, {})
    assert P.container_resources({"resources": {"limits": UNKNOWN, "requests": "x"}}) == ({}, {})
    assert P.container_resources({"resources": UNKNOWN}) == ({}, {})


def res(limits=None, requests=None):
    r = {}
    if limits is not None:
        r["limits"] = limits
    if requests is not None:
        r["requests"] = requests
    return {"resources": r}


@pytest.mark.parametrize(
    "c, want",
    [
        (res({"cpu": "2", "memory": "8Gi"}), None),
        (res({"cpu": "2", "memory": "8Gi"}, {"cpu": "2000m", "memory": "8192Mi"}), None),  # equal quantities
        (res({"cpu": "2", "memory": "8Gi"}, {"cpu": "1"}), "requests.cpu=1 != limits.cpu=2"),
        (res({"cpu": "2"}), "no memory limit"),
        (res({"memory": "1Gi"}), "no cpu limit"),
        (res({}), "no cpu or memory limit"),
        (
            res({"cpu": "2", "memory": "8Gi"}, {"ephemeral-storage": "1Gi"}),
            "ephemeral-storage requested (1Gi) without a limit",
        ),
        (res({"cpu": "2", "memory": "8Gi", "x": "odd"}, {"x": "odd"}), None),  # unparseable but the same text
        (res({"cpu": "2", "memory": "8Gi", "x": "odd"}, {"x": "other"}), "requests.x=other != limits.x=odd"),
        (res({"cpu": "2", "memory": UNKNOWN}), None),
        (res({"cpu": "2", "memory": "8Gi"}, {"cpu": UNKNOWN}), None),
        (
            res({"cpu": "2", "memory": "8Gi"}, {"cpu": "1", "memory": "4Gi"}),
            "requests.cpu=1 != limits.cpu=2; requests.memory=4Gi != limits.memory=8Gi",
        ),
    ],
)
def test_qos_problem(c, want):
    assert P.qos_problem(c) == want


def gpus(*values, key="nvidia.com/gpu", requests=False):
    cs = []
    for v in values:
        cs.append(res(requests={key: v}) if requests else res({key: v}))
    return pod({"containers": cs})


def test_pod_amount_each_form():
    assert P.pod_amount(gpus(4), "nvidia.com/gpu") == 4
    assert P.pod_amount(gpus(1, 2), "nvidia.com/gpu") == 3 and type(P.pod_amount(gpus(1, 2), "nvidia.com/gpu")) is int
    assert P.pod_amount(pod({"containers": [res({"cpu": 2}, {"cpu": 1})]}), "cpu") == 2  # the limit, not the request
    assert P.pod_amount(gpus("4"), "nvidia.com/gpu") == "4"  # one string: as written
    assert P.pod_amount(gpus("1.5", key="cpu"), "cpu") == "1.5" and P.pod_amount(gpus("1e3"), "nvidia.com/gpu") == "1e3"
    assert P.pod_amount(gpus("128Mi", "160Mi", key="memory"), "memory") == "288Mi"
    assert P.pod_amount(gpus("1", "2"), "nvidia.com/gpu") == "3"  # strings in one unit (none): their sum, as text
    assert P.pod_amount(gpus("1Gi", "512Mi", key="memory"), "memory") == 1610612736  # mixed units: a number
    assert P.pod_amount(gpus("500m", "250m", key="cpu"), "cpu") == "750m"
    assert P.pod_amount(gpus("1500u", "1500u", key="cpu"), "cpu") == "3000u"
    assert P.pod_amount(gpus("0.5", "0.25", key="cpu"), "cpu") == 0.75  # a fraction in no unit
    assert P.pod_amount(gpus(0.5, key="cpu"), "cpu") == 0.5
    assert P.pod_amount(gpus(3, requests=True), "nvidia.com/gpu") == 3  # a request when no limit
    assert P.pod_amount(gpus(UNKNOWN), "nvidia.com/gpu") is UNKNOWN
    assert P.pod_amount(gpus("lots", 1), "nvidia.com/gpu") is UNKNOWN
    assert P.pod_amount(pod({"containers": [{"name": "c"}, "junk"]}), "nvidia.com/gpu") == 0
    # a sidecar without the resource, or junk, before the container that asks: still counted
    assert P.pod_amount(pod({"containers": ["junk", {"name": "c"}, res({"nvidia.com/gpu": 2})]}), "nvidia.com/gpu") == 2
    assert P.pod_amount(pod({}), "nvidia.com/gpu") == 0
    # a unit with a fractional sum in that unit falls back to the number
    assert P.pod_amount(gpus("1.5Mi", "1Mi", key="memory"), "memory") == int(2.5 * 2**20)


def test_pod_count_and_efa_requested():
    assert P.pod_count(gpus(4), "nvidia.com/gpu") == 4 and P.pod_count(gpus("2"), "nvidia.com/gpu") == 2
    assert P.pod_count(gpus(UNKNOWN), "nvidia.com/gpu") == 0 and P.pod_count(pod({}), "nvidia.com/gpu") == 0
    assert P.pod_count(gpus("x"), "nvidia.com/gpu") == 0
    assert P.efa_requested(gpus(1, key=L.EFA_RESOURCE)) == 1 and P.efa_requested(gpus(4)) == 0


def test_pod_env_and_node_groups_for():
    p = pod(
        {
            "initContainers": [{"env": [{"name": "A", "value": "init"}]}],
            "containers": [
                {"env": [{"name": "A", "value": "main"}, {"value": "no name"}, "junk", {"name": "B"}]},
                {"name": "noenv"},
            ],
        }
    )
    assert P.pod_env(p) == {"A": "main", "B": None}
    groups = [
        G.NodeGroup(R(L.MNG, n), {}, [], 1, labels, False, None, 0, "", None, None, [], [], [])
        for n, labels in (("gpu", {"role": "gpu", "zone": "a"}), ("sys", {"role": "system"}))
    ]
    assert [g.resource.name for g in P.node_groups_for(pod({"nodeSelector": {"role": "gpu"}}), groups)] == ["gpu"]
    assert [g.resource.name for g in P.node_groups_for(pod({}), groups)] == ["gpu", "sys"]
    assert P.node_groups_for(pod({"nodeSelector": {"role": "none"}}), groups) == []


@pytest.mark.parametrize(
    "image, want",
    [
        (UNKNOWN, None),
        (None, "has no image"),
        ("", "has no image"),
        (3, "has no image"),
        ("repo/img@sha256:abc", None),
        ("registry:5000/img", "image registry:5000/img has no tag (means :latest)"),
        ("img:latest", "image img:latest uses the mutable :latest tag"),
        ("img:1.0", None),
        ("registry:5000/img:2.0", None),
    ],
)
def test_image_problem(image, want):
    assert P.image_problem(image) == want


# == tools/layout_network.py ==========================================================================================


def test_efa_intent_each_reason():
    g = mng(instanceTypes=["g6.12xlarge"], enableEfaSupport=True)
    efa_pod = R("kubernetes:core/v1:Pod", "p", spec={"containers": [res({L.EFA_RESOURCE: 1})]})
    env_pod = R(
        "kubernetes:core/v1:Pod", "q", spec={"containers": [{"env": [{"name": "FI_PROVIDER", "value": "efa"}]}]}
    )
    tcp_pod = R(
        "kubernetes:core/v1:Pod", "s", spec={"containers": [{"env": [{"name": "FI_PROVIDER", "value": "tcp"}]}]}
    )
    plugin = R(L.HELM_RELEASE, "efa", chart="oci://x/aws-efa-k8s-device-plugin")
    other = R(L.HELM_RELEASE, "kr", chart="kuberay-operator")
    assert N.efa_intent(Stack([g, efa_pod, env_pod, tcp_pod, plugin, other])) == [
        "gpu has EFA (pulumi-eks enableEfaSupport)",
        "p pod requests vpc.amazonaws.com/efa",
        "q pod sets FI_PROVIDER=efa",
        "Helm release efa installs aws-efa-k8s-device-plugin",
    ]
    assert N.efa_intent(Stack([mng(instanceTypes=["g6.12xlarge"]), tcp_pod, other])) == []


@pytest.mark.parametrize(
    "protocol, is_self",
    [
        ("-1", True),
        ("ALL", True),
        ("all", True),
        (-1, True),
        (UNKNOWN, True),
        ("tcp", False),
        (None, False),
    ],
)
def test_self_rules_take_all_protocols_only(protocol, is_self):
    vpc = R(L.SG_INGRESS, "vpc", ipProtocol=protocol, securityGroupId="sg-1", referencedSecurityGroupId="sg-1")
    ec2 = R(L.SG_RULE, "ec2", type="ingress", protocol=protocol, self=True, securityGroupId="sg-1")
    inline = R(L.SECURITY_GROUP, "inline", id="sg-1", egress=[{"self": True, "protocol": protocol}])
    want = ["vpc", "ec2", "inline"] if is_self else []
    assert [s.resource.name for s in N.self_rules(Stack([vpc, ec2, inline]))] == want


@pytest.mark.parametrize(
    "a, b, deps, is_self",
    [
        ("sg-1", "sg-1", {}, True),
        ("sg-1", "sg-2", {}, False),
        (None, None, {}, False),  # no id at all is not the same group
        (UNKNOWN, UNKNOWN, {"a": ["u1"], "b": ["u1"]}, True),
        (UNKNOWN, "sg-1", {"a": ["u1"], "b": ["u2"]}, False),
        (UNKNOWN, "sg-1", {"a": ["u1"]}, True),  # nothing to compare: assumed (a preview cannot tell)
        ("sg-1", UNKNOWN, {"b": ["u1"]}, True),
    ],
    ids=[
        "same",
        "other",
        "none",
        "unknown-same-source",
        "unknown-other-source",
        "unknown-one-source",
        "unknown-other-side",
    ],
)
def test_self_rules_compare_group_ids(a, b, deps, is_self):
    names = {"a": "securityGroupId", "b": "referencedSecurityGroupId"}
    vpc = R(
        L.SG_EGRESS,
        "vpc",
        deps={names[k]: v for k, v in deps.items()},
        ipProtocol="-1",
        securityGroupId=a,
        referencedSecurityGroupId=b,
    )
    names["b"] = "sourceSecurityGroupId"
    ec2 = R(
        L.SG_RULE,
        "ec2",
        deps={names[k]: v for k, v in deps.items()},
        type="egress",
        protocol="-1",
        securityGroupId=a,
        sourceSecurityGroupId=b,
    )
    assert [s.resource.name for s in N.self_rules(Stack([vpc, ec2]))] == (["vpc", "ec2"] if is_self else [])


def test_self_rules_in_each_form():
    vpc_in = R(L.SG_INGRESS, "in", ipProtocol="-1", securityGroupId="sg-1", referencedSecurityGroupId="sg-1")
    vpc_out = R(L.SG_EGRESS, "out", ipProtocol="-1", securityGroupId="sg-1", referencedSecurityGroupId="sg-1")
    vpc_tcp = R(L.SG_EGRESS, "tcp", ipProtocol="tcp", securityGroupId="sg-1", referencedSecurityGroupId="sg-1")
    vpc_other = R(L.SG_INGRESS, "o", ipProtocol="-1", securityGroupId="sg-1", referencedSecurityGroupId="sg-2")
    ec2_self = R(L.SG_RULE, "self", type="ingress", protocol="-1", self=True, securityGroupId="sg-1")
    ec2_src = R(L.SG_RULE, "src", type="egress", protocol="all", securityGroupId="sg-1", sourceSecurityGroupId="sg-1")
    ec2_unknown = R(L.SG_RULE, "unk", type=UNKNOWN, protocol="-1", self=True, securityGroupId=UNKNOWN)
    ec2_bad_type = R(L.SG_RULE, "bad", type="both", protocol="-1", self=True)
    ec2_tcp = R(L.SG_RULE, "t", type="ingress", protocol="tcp", self=True)
    ec2_not_self = R(
        L.SG_RULE, "ns", type="ingress", protocol="-1", securityGroupId="sg-1", sourceSecurityGroupId="sg-2"
    )
    inline = R(
        L.SECURITY_GROUP,
        "sg",
        id="sg-9",
        ingress=[{"self": True, "protocol": "-1"}, "junk", {"self": False, "protocol": "-1"}],
        egress=[{"self": True, "protocol": "tcp"}],
    )
    inline_unknown_id = R(L.SECURITY_GROUP, "sg2", egress=[{"self": True, "protocol": "-1"}])
    got = [
        (s.resource.name, s.direction, s.security_group_id)
        for s in N.self_rules(
            Stack(
                [
                    vpc_in,
                    vpc_out,
                    vpc_tcp,
                    vpc_other,
                    ec2_self,
                    ec2_src,
                    ec2_unknown,
                    ec2_bad_type,
                    ec2_tcp,
                    ec2_not_self,
                    inline,
                    inline_unknown_id,
                ]
            )
        )
    ]
    assert got == [
        ("in", "ingress", "sg-1"),
        ("out", "egress", "sg-1"),
        ("self", "ingress", "sg-1"),
        ("src", "egress", "sg-1"),
        ("unk", UNKNOWN, UNKNOWN),
        ("sg", "ingress", "sg-9"),
        ("sg2", "egress", UNKNOWN),
    ]


def test_self_rules_with_ids_only_up_knows():
    """A preview's rule whose group ids are unknown is a self rule when both ids come from the same group."""
    same, other = ["urn:sg-a"], ["urn:sg-b"]
    got = [
        s.resource.name
        for s in N.self_rules(
            Stack(
                [
                    R(
                        L.SG_INGRESS,
                        "vpc-same",
                        deps={"securityGroupId": same, "referencedSecurityGroupId": same},
                        ipProtocol="-1",
                        securityGroupId=UNKNOWN,
                        referencedSecurityGroupId=UNKNOWN,
                    ),
                    R(
                        L.SG_INGRESS,
                        "vpc-other",
                        deps={"securityGroupId": same, "referencedSecurityGroupId": other},
                        ipProtocol="-1",
                        securityGroupId=UNKNOWN,
                        referencedSecurityGroupId=UNKNOWN,
                    ),
                    R(
                        L.SG_RULE,
                        "ec2-same",
                        deps={"securityGroupId": same, "sourceSecurityGroupId": same},
                        type="ingress",
                        protocol="-1",
                        securityGroupId=UNKNOWN,
                        sourceSecurityGroupId=UNKNOWN,
                    ),
                    R(
                        L.SG_RULE,
                        "ec2-other",
                        deps={"securityGroupId": same, "sourceSecurityGroupId": other},
                        type="ingress",
                        protocol="-1",
                        securityGroupId=UNKNOWN,
                        sourceSecurityGroupId=UNKNOWN,
                    ),
                ]
            )
        )
    ]
    assert got == ["vpc-same", "ec2-same"]


def test_helm_releases():
    s = Stack(
        [
            R(L.HELM_RELEASE, "a", chart="oci://public.ecr.aws/x/kuberay-operator", version="1.4.2"),
            R(L.HELM_CHART_V4, "b", chart=UNKNOWN),
            R(L.HELM_RELEASE, "c", chart="plain"),
        ]
    )
    assert N.helm_releases(s) == [
        {"name": "a", "chart": "kuberay-operator", "version": "1.4.2"},
        {"name": "b", "chart": UNKNOWN, "version": None},
        {"name": "c", "chart": "plain", "version": None},
    ]


def head_rc(**head):
    return rc(headGroupSpec=head)


EXPOSURE_KINDS = [
    (
        re.compile(r"^headGroupSpec\.serviceType is LoadBalancer with dashboard-host (\S+): .*8265.*internet-facing"),
        "head-lb",
    ),
    (re.compile(r"^headGroupSpec\.enableIngress .*Ingress to the dashboard"), "head-ingress"),
    (re.compile(r"^Service of type LoadBalancer .*dashboard port 8265 to the internet"), "service"),
    (re.compile(r"^Ingress routes to the Ray head service (\S*) \(dashboard\) without an internal scheme"), "ingress"),
]
"""How an exposure is told (what the message must say, not its whole wording) -> a short kind, with the host or
service it names."""


def exposures(*resources):
    """(resource name, kind [named host or service]) of each exposure the stack makes."""
    out = []
    for r, how in N.dashboard_exposures(Stack(resources)):
        kinds = [" ".join([kind, *m.groups()]) for rx, kind in EXPOSURE_KINDS if (m := rx.search(how))]
        assert len(kinds) == 1, how
        out.append((r.name, kinds[0]))
    return out


def test_dashboard_exposure_of_the_head_service():
    lb = "head-lb {}".format
    assert exposures(head_rc(serviceType="LoadBalancer")) == [("raycluster", lb("0.0.0.0"))]
    assert exposures(head_rc(serviceType="LoadBalancer", rayStartParams={"dashboard-host": "10.0.0.1"})) == [
        ("raycluster", lb("10.0.0.1"))
    ]
    assert exposures(head_rc(serviceType="LoadBalancer", rayStartParams={"include-dashboard": "False"})) == []
    assert exposures(head_rc(serviceType="LoadBalancer", rayStartParams={"include-dashboard": False})) == []
    for local in ("127.0.0.1", "localhost", "::1"):
        assert exposures(head_rc(serviceType="LoadBalancer", rayStartParams={"dashboard-host": local})) == []
    internal = {"metadata": {"annotations": {"service.beta.kubernetes.io/aws-load-balancer-scheme": "internal"}}}
    assert exposures(head_rc(serviceType="LoadBalancer", headService=internal)) == []
    ranged = {"spec": {"loadBalancerSourceRanges": ["10.0.0.0/8"]}}
    assert exposures(head_rc(serviceType="LoadBalancer", headService=ranged)) == []
    assert exposures(head_rc(serviceType="ClusterIP", headService=UNKNOWN, rayStartParams=UNKNOWN)) == []
    assert exposures(head_rc(serviceType="LoadBalancer", headService=UNKNOWN)) == [("raycluster", lb("0.0.0.0"))]
    assert exposures(head_rc(enableIngress=True)) == [("raycluster", "head-ingress")]
    assert exposures(head_rc(enableIngress="true")) == []
    assert exposures(rc()) == []  # no head spec at all
    # a cluster left out (no dashboard, a local dashboard) does not hide the clusters after it
    exposed = R(L.RAY_CLUSTER, "exposed", spec={"headGroupSpec": {"serviceType": "LoadBalancer"}})
    for params in ({"include-dashboard": "false"}, {"dashboard-host": "127.0.0.1"}):
        assert exposures(head_rc(serviceType="LoadBalancer", rayStartParams=params), exposed) == [
            ("exposed", lb("0.0.0.0"))
        ]


def svc(name="svc", annotations=None, **spec):
    return R(L.SERVICE, name, metadata={"annotations": annotations or {}}, spec=spec)


def test_dashboard_exposure_of_a_service():
    how = "service"
    assert exposures(svc(type="LoadBalancer", ports=[{"port": 80}, {"port": 8265}])) == [("svc", how)]
    assert exposures(svc(type="NodePort", ports=[{"port": 8265}])) == []
    assert exposures(svc(type="LoadBalancer", ports=[{"port": 80}])) == []
    assert exposures(svc(type="LoadBalancer")) == []
    assert (
        exposures(
            svc(
                annotations={"service.beta.kubernetes.io/aws-load-balancer-internal": "true"},
                type="LoadBalancer",
                ports=[{"port": 8265}],
            )
        )
        == []
    )
    assert exposures(svc(type="LoadBalancer", ports=[{"port": 8265}], loadBalancerSourceRanges=["10.0.0.0/8"])) == []
    assert exposures(R(L.SERVICE, "u", spec=UNKNOWN)) == []


INTERNAL = "service.beta.kubernetes.io/aws-load-balancer-internal"
SCHEME = "service.beta.kubernetes.io/aws-load-balancer-scheme"
ALB_SCHEME = "alb.ingress.kubernetes.io/scheme"


@pytest.mark.parametrize(
    "annotations, ranges, port, exposed",
    [
        ({}, None, {"port": 8265}, True),
        ({INTERNAL: "TRUE"}, None, {"port": 8265}, False),
        ({INTERNAL: "0.0.0.0/0"}, None, {"port": 8265}, False),
        ({INTERNAL: "false"}, None, {"port": 8265}, True),
        ({SCHEME: "internal"}, None, {"port": 8265}, False),
        ({ALB_SCHEME: "Internal"}, None, {"port": 8265}, False),
        ({ALB_SCHEME: "internet-facing"}, None, {"port": 8265}, True),
        (UNKNOWN, None, {"port": 8265}, True),
        ({}, [], {"port": 8265}, True),
        ({}, UNKNOWN, {"port": 8265}, True),
        ({}, ["10.0.0.0/8", "::/0"], {"port": 8265}, True),
        ({}, ["0.0.0.0/0"], {"port": 8265}, True),
        ({}, ["10.0.0.0/8"], {"port": 8265}, False),
        ({}, None, {"targetPort": 8265}, True),
        ({}, None, {"targetPort": "dashboard"}, True),
        ({}, None, {"name": "dashboard"}, True),
        ({}, None, {"port": 80, "targetPort": 8080, "name": "http"}, False),
        ({}, None, "8265", False),
    ],
    ids=[
        "public",
        "internal-true",
        "internal-any-source",
        "internal-false",
        "nlb-internal",
        "alb-internal",
        "alb-internet-facing",
        "annotations-unknown",
        "no-ranges",
        "ranges-unknown",
        "ranges-with-ipv6-world",
        "ranges-world",
        "ranges-private",
        "target-port",
        "target-port-name",
        "port-name",
        "other-port",
        "port-not-a-mapping",
    ],
)
def test_load_balancer_service_exposure(annotations, ranges, port, exposed):
    spec = {"type": "LoadBalancer", "ports": [port]}
    if ranges is not None:
        spec["loadBalancerSourceRanges"] = ranges
    s = R(L.SERVICE, "svc", metadata={"annotations": annotations}, spec=spec)
    assert [name for name, _ in exposures(s)] == (["svc"] if exposed else [])


def ingress(name="ing", annotations=None, **spec):
    return R(L.INGRESS, name, metadata={"annotations": annotations or {}}, spec=spec)


def test_dashboard_exposure_of_an_ingress():
    how = "ingress {}"
    assert exposures(ingress(defaultBackend={"service": {"name": "ray-head-svc", "port": {"number": 80}}})) == [
        ("ing", how.format("ray-head-svc"))
    ]
    rules = [
        {
            "http": {
                "paths": [
                    {"backend": {"service": {"name": "web", "port": {"number": 80}}}},
                    {"backend": {"service": {"name": "x", "port": {"number": 8265}}}},
                    {"backend": {"service": {"name": "y", "port": {"name": "dashboard"}}}},
                ]
            }
        },
        {"host": "no-http"},
    ]
    assert exposures(ingress(rules=rules)) == [("ing", how.format("x"))]  # one finding per Ingress
    head = {"service": {"name": "ray-head-svc"}}
    assert exposures(ingress("a", rules=rules), ingress("b", defaultBackend=head)) == [  # and each Ingress is read
        ("a", how.format("x")),
        ("b", how.format("ray-head-svc")),
    ]
    unnamed = [{"http": {"paths": [{"backend": {"service": {"port": {"name": "dashboard"}}}}]}}]
    assert exposures(ingress(rules=unnamed)) == [("ing", how.format(""))]
    assert (
        exposures(
            ingress(
                annotations={"alb.ingress.kubernetes.io/scheme": "internal"},
                defaultBackend={"service": {"name": "ray-head-svc"}},
            )
        )
        == []
    )
    assert exposures(
        ingress("internal", annotations={"alb.ingress.kubernetes.io/scheme": "internal"}, defaultBackend=head),
        ingress("public", defaultBackend=head),
    ) == [  # the next is read
        ("public", how.format("ray-head-svc"))
    ]
    assert exposures(ingress(defaultBackend={"service": {"name": "web", "port": {"number": 80}}})) == []
    assert exposures(ingress(defaultBackend={"service": {"name": UNKNOWN, "port": UNKNOWN}})) == []
    assert exposures(ingress(defaultBackend={"resource": {"kind": "Bucket"}})) == []
    assert exposures(R(L.INGRESS, "u", spec=UNKNOWN)) == []


def test_a_capacity_block_whose_reservation_id_only_up_knows_is_not_refused():
    """A preview of a stack that creates its reservation sees the id as unknown: the fact is UNKNOWN, not "no
    reservation", so gpu-capacity stays silent instead of failing the preview (before the fix the unknown id, a falsy
    value, read as None and the rule refused a Capacity Block that targets its reservation)."""
    from ray_efa_eks.tools import rules

    t = lt(
        instanceType="p5.48xlarge",
        instanceMarketOptions={"marketType": "capacity-block"},
        capacityReservationSpecification={"capacityReservationTarget": {"capacityReservationId": UNKNOWN}},
    )
    group = mng(launchTemplate={"id": "lt-id"}, capacityType="CAPACITY_BLOCK")
    assert one([t, group]).reservation is UNKNOWN
    assert rules.check([t, group], only=["gpu-capacity"]) == []
    none = lt(instanceType="p5.48xlarge", instanceMarketOptions={"marketType": "capacity-block"})
    [v] = rules.check([none, group], only=["gpu-capacity"])
    assert "Capacity Block" in v.problem and "no capacity reservation" in v.problem
