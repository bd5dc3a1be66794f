"""docs/configuration.md: generated from StackConfig, checked for drift, and its "on a live stack" column rehearsed.

Every key of the project config declares what changing it does to a deployed stack (components/config/config_fields.py).
The effects the offline rehearsal can see are checked here against the registrations: the program runs with a
config and then with one key changed, and :func:`observed` reads from the two runs which node groups roll, whether
KubeRay recreates the Ray pods, whether the gate Job is replaced, what else changes. What only AWS decides (a VPC
CIDR that forces a new VPC, secrets encryption that cannot be turned off) is in the note's text, with its source.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import MISSING, fields
from pathlib import Path

import pytest

from ray_efa_eks.components.nodes.capacity import CAPACITY_MODES
from ray_efa_eks.components.config.config import ConfigError, StackConfig
from ray_efa_eks.components.config.config_fields import EFFECTS, Live
from ray_efa_eks.tools.dev import config_schema
from ray_efa_eks.tools.mockrun import MockRun
from tests.components.test_change_rehearsal import _plain, kuberay_recreates, run, steps

ROOT = Path(__file__).resolve().parents[2]
PROJECT_KEYS = [f.name for f in fields(StackConfig) if f.name not in config_schema.NOT_IN_PROJECT_CONFIG]
ODCR = {"gpuInstanceType": "g6e.48xlarge", "availabilityZone": "us-east-1c"}
"""A type and AZ the mocks' ODCR cr-0a1b2c3d4e5f60718 fits (tools/mockrun.CAPACITY_RESERVATIONS)."""
RESERVED = {**ODCR, "gpuCapacity": "reservation", "gpuCapacityReservationId": "cr-0a1b2c3d4e5f60718"}
GROUP = {
    **ODCR,
    "gpuCapacity": "reservation",
    "gpuCapacityReservationId": "arn:aws:resource-groups:us-east-1:123456789012:group/my-odcrs",
}

SAMPLES: dict[str, tuple[dict, dict]] = {
    "gpuScaleToZero": ({}, {"gpuScaleToZero": False}),
    "jobQueues": ({}, {"jobQueues": '["vision:1nodes", "nlp:1nodes:borrow"]'}),
    "gpuInstanceType": ({}, {"gpuInstanceType": "g6.48xlarge"}),
    "systemInstanceType": ({}, {"systemInstanceType": "m7i.xlarge"}),
    "availabilityZone": ({}, {"availabilityZone": "us-east-1b"}),
    "kubernetesVersion": ({"kubernetesVersion": "1.34"}, {"kubernetesVersion": "1.35"}),
    "clusterCreatorArn": ({}, {"clusterCreatorArn": "arn:aws:iam::123456789012:role/Creator"}),
    "vpcCidr": ({}, {"vpcCidr": "10.1.0.0/16"}),  # the ECR endpoints' security group follows the CIDR (in place)
    "nodeAgentImage": ({}, {"nodeAgentImage": "public.ecr.aws/docker/library/python:3.13-slim@sha256:" + "1" * 64}),
    "dlcImageGiB": ({}, {"dlcImageGiB": 40}),
    "efaCheckWaitSeconds": ({}, {"efaCheckWaitSeconds": 900}),
    "dlcImage": ({}, {"dlcImage": "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.2"}),
    "rayVersion": ({}, {"rayVersion": "2.59.0"}),
    "endpointPublicAccessCidrs": ({}, {"endpointPublicAccessCidrs": ["203.0.113.0/24"]}),
    "ncclDebug": ({}, {"ncclDebug": "INFO"}),
    "kuberayChartVersion": ({}, {"kuberayChartVersion": "1.6.0"}),
    "gpuCapacity": (ODCR, RESERVED),
    "gpuCapacityReservationId": (RESERVED, GROUP),
    "gpuPlacementGroupName": (GROUP, {**GROUP, "gpuPlacementGroupName": "my-pg"}),
    "checkpointPrefix": ({}, {"checkpointPrefix": "train2"}),
    "gpuWorkersToDelete": (
        {"gpuScaleToZero": False},
        {"gpuScaleToZero": False, "gpuWorkersToDelete": ["ray-gpu-worker-abcde"]},
    ),
    "checkpointEncryption": ({}, {"checkpointEncryption": "s3"}),
    "clusterAdminArns": ({}, {"clusterAdminArns": ["arn:aws:iam::123456789012:role/admins"]}),
    "clusterViewerArns": (
        {"clusterAdminArns": ["arn:aws:iam::123456789012:role/admins"]},
        {
            "clusterAdminArns": ["arn:aws:iam::123456789012:role/admins"],
            "clusterViewerArns": ["arn:aws:iam::123456789012:role/viewers"],
        },
    ),
    "metricsRetention": ({}, {"metricsRetention": "30d"}),
    "metricsRemoteWriteUrl": (
        {},
        {"metricsRemoteWriteUrl": "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1/api/v1/remote_write"},
    ),
}
"""Key -> (config before, config after) for keys whose change cannot be derived from the default (see :func:`sample`)."""


def sample(name: str) -> tuple[dict, dict]:
    """A valid before/after pair that changes ``name``: from SAMPLES, else the default and a near value of its type."""
    if name in SAMPLES:
        return SAMPLES[name]
    f = next(f for f in fields(StackConfig) if f.name == name)
    default = f.default_factory() if f.default_factory is not MISSING else f.default
    candidates = (
        [not default]
        if isinstance(default, bool)
        else [default + 1, default - 1, 2 * default]
        if isinstance(default, int)
        else [default + 0.5, default / 2]
        if isinstance(default, float)
        else []
    )
    for value in candidates:
        try:
            StackConfig.from_mapping({name: value})
        except ConfigError:
            continue
        return {}, {name: value}
    pytest.fail(
        f"no before/after sample for StackConfig.{name}: add a pair of configs to SAMPLES in {__file__} "
        "(the rehearsal checks its live-change note against what the program registers)"
    )


GATE = "ray-efa-eks:index:EfaCheckJob"


def _changed(a: MockRun, b: MockRun) -> dict[str, str]:
    """``type name`` -> step, for every resource a real update would touch: reads (nothing is changed) and this
    package's own components (no cloud object; pulumi-eks's components stand for what they create) left out."""
    skip = {
        f"{r.type} {r.name}"
        for r in [*a.resources, *b.resources]
        if r.options.get("read") or (r.type.startswith("ray-efa-eks:") and not r.custom)
    }
    return {k: v for k, v in steps(a, b).items() if v != "same" and k not in skip}


def _gate_owned(a: MockRun, b: MockRun) -> set[str]:
    """``type name`` of the gate's own resources (its Job and the ConfigMap with its code)."""
    runs = [*a.resources, *b.resources]
    gates = {r.urn for r in runs if r.type == GATE}
    return {f"{r.type} {r.name}" for r in runs if r.parent in gates}


def _by_name(run_: MockRun, type_: str, name: str) -> dict | None:
    return next((_plain(r.inputs) for r in run_.resources if r.type == type_ and r.name == name), None)


def _node_group_effects(a: MockRun, b: MockRun, role: str) -> tuple[bool, bool]:
    """(nodes replaced, scaled) for the ``gpu`` or ``system`` node group: its launch template or any input but the
    scaling config changes -> nodes replaced; the scaling config alone -> scaled."""
    lt = "aws:ec2/launchTemplate:LaunchTemplate"
    mng = "eks:index:ManagedNodeGroup"
    # a launch template's own tags are tags on the resource, not template data: changing them makes no new version
    lt_a, lt_b = (
        {k: v for k, v in (_by_name(r, lt, f"{role}-lt") or {}).items() if k not in ("tags", "tagsAll")} for r in (a, b)
    )
    ng_a, ng_b = _by_name(a, mng, f"{role}-mng") or {}, _by_name(b, mng, f"{role}-mng") or {}
    rest_a = {k: v for k, v in ng_a.items() if k != "scalingConfig"}
    rest_b = {k: v for k, v in ng_b.items() if k != "scalingConfig"}
    return lt_a != lt_b or rest_a != rest_b, ng_a.get("scalingConfig") != ng_b.get("scalingConfig")


def observed(a: MockRun, b: MockRun) -> set[str]:
    """The effects (components/config_fields.EFFECTS) the change from run ``a`` to run ``b`` shows offline."""
    changed = _changed(a, b)
    out: set[str] = set()
    gpu_nodes, scaled = _node_group_effects(a, b, "gpu")
    system_node, _ = _node_group_effects(a, b, "system")
    if gpu_nodes:
        out.add("gpu-nodes")
    if system_node:
        out.add("system-node")
    recreated = kuberay_recreates(a, b)
    if recreated:
        out.add("ray-pods")
    workers = [
        [g.get("replicas") for g in r.one("kubernetes:ray.io/v1:RayCluster")["spec"]["workerGroupSpecs"]]
        for r in (a, b)
    ]
    if scaled or (workers[0] != workers[1] and not recreated):
        out.add("scale")
    if any(
        k.startswith("kubernetes:batch/v1:Job ") and v in ("replace", "create", "delete") for k, v in changed.items()
    ):
        out.add("gate")
    if any(k.split()[0] in ("aws:ec2/vpc:Vpc", "aws:ec2/subnet:Subnet") for k in changed):
        out.add("network")
    accounted = (
        "aws:ec2/vpc:Vpc ",
        "aws:ec2/subnet:Subnet ",
        "aws:ec2/launchTemplate:LaunchTemplate ",
        "eks:index:ManagedNodeGroup ",
        "kubernetes:ray.io/v1:RayCluster ",
    )
    gate_owned = _gate_owned(a, b)
    others = {
        k: v
        for k, v in changed.items()
        if not k.startswith(accounted)
        and not (k in gate_owned and not (k.startswith("kubernetes:batch/v1:Job ") and v == "update"))
    }
    if others:
        out.add("other")
    if any(k.startswith("eks:index:Cluster ") for k in others):
        out.add("eks-cluster")
    return out or {"none"}


# -- every key says what it changes --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", PROJECT_KEYS)
def test_every_key_declares_what_it_changes_on_a_live_stack(name):
    f = next(f for f in fields(StackConfig) if f.name == name)
    assert isinstance(f.metadata.get("live"), Live), (
        f"StackConfig.{name} has no live-change note: declare it as {name}: TYPE = key(DEFAULT, allowed=..., "
        f"live=live(EFFECT, ..., note=...)) (components/config/config_fields.py; EFFECT one of {', '.join(EFFECTS)})"
    )


def test_the_generator_refuses_a_key_without_a_note_naming_it(monkeypatch):
    """What an engineer who adds a key today sees: the generator (and so `config-schema --check`) names the key."""
    from dataclasses import dataclass

    @dataclass
    class WithNewKey(StackConfig):
        gpuWarmPoolSize: int = 0

    docs = {**config_schema.docstrings(), "gpuWarmPoolSize": "GPU nodes kept warm."}
    monkeypatch.setattr(config_schema, "StackConfig", WithNewKey)
    monkeypatch.setattr(config_schema, "docstrings", lambda: docs)
    with pytest.raises(ValueError, match=r"StackConfig\.gpuWarmPoolSize has no live-change note"):
        config_schema.keys()


@pytest.mark.parametrize("name", PROJECT_KEYS)
def test_declared_effects_are_what_the_rehearsal_shows(name):
    """The note's effects against the registrations before and after the change (the offline second `pulumi up`)."""
    live = next(f for f in fields(StackConfig) if f.name == name).metadata.get("live")
    assert isinstance(live, Live), f"StackConfig.{name} has no live-change note (see the test above)"
    before, after = sample(name)
    seen = observed(run(before), run(after))
    declared = set(live.effects)
    exact = {"gpu-nodes", "system-node", "ray-pods", "scale", "gate", "network", "none"}
    assert declared & exact == seen & exact, (name, sorted(declared), sorted(seen))
    # "in place" or "cluster" stands for every other change; "cluster" only where the EKS cluster itself changes
    assert bool(declared & {"in-place", "cluster"}) == ("other" in seen), (name, sorted(declared), sorted(seen))
    assert "cluster" not in declared or "eks-cluster" in seen, (name, sorted(seen))


def test_the_rehearsal_can_tell_the_effects_apart():
    """The model can fail: a spec change is not a scale change, and a launch template change is not in place."""
    assert observed(run({}), run({"gpuNodeCount": 3})) == {"scale", "gate"}
    assert observed(run({}), run({"ncclDebug": "INFO"})) == {"ray-pods", "gate"}
    assert observed(run({}), run({"gpuRootVolumeGiB": 300})) == {"gpu-nodes", "gate"}  # the gate vouches for nodes
    assert observed(run({}), run({"systemRootVolumeGiB": 150})) == {"system-node", "gate"}
    assert observed(run({}), run({"allowSingleEfaNode": True})) == {"none"}
    assert observed(run({}), run({"efaCheckBlocking": False})) == {"other"}


# -- allowed values ------------------------------------------------------------------------------------------------

CONTEXT = {
    "gpuCapacity": {
        "reservation": RESERVED,
        "capacity-block": {
            "gpuInstanceType": "p5.48xlarge",
            "availabilityZone": "us-east-1a",
            "gpuCapacityReservationId": "cr-0123456789abcdef0",
        },
    }
}
"""Other keys a value needs to be valid (a reservation needs its id and AZ)."""


@pytest.mark.parametrize(
    "name",
    [
        n
        for n in PROJECT_KEYS
        if isinstance(next(f for f in fields(StackConfig) if f.name == n).metadata.get("allowed"), tuple)
    ],
)
def test_listed_allowed_values_are_exactly_what_validation_takes(name):
    allowed = next(f for f in fields(StackConfig) if f.name == name).metadata["allowed"]
    for value in allowed:
        StackConfig.from_mapping({**CONTEXT.get(name, {}).get(value, {}), name: value})
    with pytest.raises(ConfigError) as e:
        StackConfig.from_mapping({name: "not-a-listed-value"})
    assert e.value.key == name
    assert name != "gpuCapacity" or set(allowed) == set(CAPACITY_MODES)


# -- the page is generated and checked --------------------------------------------------------------------------


def test_the_page_shows_every_key_with_its_live_change():
    page = (ROOT / config_schema.DOCS_FILE).read_text()
    for k in config_schema.keys():
        if k["name"] in config_schema.NOT_IN_PROJECT_CONFIG:
            continue
        row = next(ln for ln in page.splitlines() if ln.startswith(f"| `{k['name']}` |"))
        for e in k["live"].effects:  # each effect's label, bold where it disrupts
            label = EFFECTS[e][0]
            assert (f"**{label}**" if e in config_schema.DISRUPTIVE else label) in row, (k["name"], e)
        assert (k["live"].note or "").replace("|", "/") in row, k["name"]
    for label, _ in EFFECTS.values():
        assert label in page


def test_check_fails_when_the_page_is_stale(tmp_path):
    for rel in config_schema.TARGETS:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    cmd = [str(Path(sys.executable).with_name("ray-efa-eks")), "config-schema", "--check", "--root", str(tmp_path)]
    assert config_schema.stale(tmp_path) == []
    page = tmp_path / config_schema.DOCS_FILE
    page.write_text(page.read_text().replace("**recreates Ray pods**, re-runs the gate", "in place", 1))
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and config_schema.DOCS_FILE in r.stderr, r.stdout + r.stderr
    assert config_schema.write(tmp_path) == [config_schema.DOCS_FILE] and config_schema.stale(tmp_path) == []
