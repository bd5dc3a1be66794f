"""The nodes' and the operator's life under `pulumi up`, rehearsed in sequences.

Each sequence runs the real program under the strict mocks once per `pulumi up`, the later run with the earlier one
as the deployed stack (``run_program(previous=...)``): a resource whose inputs changed runs its ``before_update``
hooks as the engine runs them (pulumi/pulumi pkg/resource/deploy/step.go ``UpdateStep.Apply`` ->
deployment.go ``RunHooks``; during a preview too, the hooks being ``on_dry_run``), and a refusal fails the run
(:class:`HookRefused`). ``ray-efa-eks diff`` of the same two configs must say the same (plan_diff.hook_verdicts).

What EKS, EC2 and KubeRay then do is asserted from their documents and source, cited at each assertion:

- [LT-VERSION] terraform-provider-aws internal/service/ec2/ec2_launch_template.go ``resourceLaunchTemplateUpdate``:
  a new template version only for the ``updateKeys`` (the template's data; ``tags`` are not among them).
- [MNG-LT] EKS user guide, "Customize managed nodes with launch templates" and "Managed node update behavior": the
  node group follows the template version, and a new version replaces every node (new nodes first, then drain and
  terminate the old).
- [MNG-ORDER] terraform-provider-aws internal/service/eks/node_group.go ``resourceNodeGroupUpdate``: "Do any version
  update first", then the scaling update.
- [CB-MNG] EKS user guide, "Create a managed node group with Capacity Blocks for ML": "When upgrading a managed node
  group with Capacity Blocks, make sure that you set the desired size of the node group to 0".
- [MNG-SCALE] EKS user guide, "Managed node update behavior" (PodDisruptionBudgets are not respected when the
  desired count is reduced) and EKS API UpdateNodegroupConfig ``desiredSize`` ("the necessary number of worker nodes
  are terminated"): EKS, not the caller, chooses the instances.
- [KR-RECREATE] KubeRay v1.7.0 ray-operator/controllers/ray/raycluster_controller.go ``shouldRecreatePodsForUpgrade``
  lines 1462-1501: all pods are recreated when the head's recreate-hash annotation differs from the spec's hash
  (utils ``GenerateHashWithoutReplicasAndWorkersToDelete``); lines 1482-1491: when the head's ``ray.io/kuberay-version``
  differs from the operator's, the annotations are rewritten and nothing is recreated.
- [KR-DELETE] same file, ``reconcilePods``: lines 1132-1153 delete ``workersToDelete`` whatever ``replicas`` says;
  lines 1219-1241 without the in-tree autoscaler delete ``runningPods.Items[i]`` for the surplus ("Randomly deleting
  Pod").
- [KR-CRD] KubeRay helm-chart/kuberay-operator/crds/ray.io_rayclusters.yaml: ``upgradeStrategy`` from v1.6.0 (line
  4555; v1.7.0 line 5316), absent in v1.5.2; Helm v3 never upgrades CRDs ("Helm: Custom Resource Definitions").
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import pulumi
import pytest
import yaml

from ray_efa_eks.components.config.config import ConfigError, StackConfig
from ray_efa_eks.components.ray.kuberay_versions import CRD_FILES, CRD_URL
from ray_efa_eks.components.ray.raycluster import SPEC_HASH_ENV, STORAGE_PATH_ENV
from ray_efa_eks.components.nodes.rollout_guards import template_changes
from ray_efa_eks.tools import layout
from ray_efa_eks.tools.mockrun import HookRefused, MockRun, run_program
from ray_efa_eks.tools.plan_diff import diff_plans
from ray_efa_eks.tools.plan_run import make_plan
from tests.helpers.mockruns import shared_run
from test_change_rehearsal import _kuberay_hash, _pods, gate_args, gate_sees_stale, kuberay_recreates

RC = "kubernetes:ray.io/v1:RayCluster"
JOB = "kubernetes:batch/v1:Job"
LT = "aws:ec2/launchTemplate:LaunchTemplate"
MNG = "eks:index:ManagedNodeGroup"
CG = "kubernetes:yaml/v2:ConfigGroup"
RELEASE = "kubernetes:helm.sh/v3:Release"
NEW_IMAGE = "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.2"
CB = {
    "gpuInstanceType": "p5.48xlarge",
    "availabilityZone": "us-east-1a",
    "gpuCapacity": "capacity-block",
    "gpuCapacityReservationId": "cr-0123456789abcdef0",
    "gpuNodeCount": 2,
}
"""The Capacity Block the mocks describe (tools/mockrun.CAPACITY_BLOCKS: 4 x p5.48xlarge in us-east-1a, active)."""
CRD_1_7_0 = Path(__file__).resolve().parents[1] / "schemas" / "ray.io_rayclusters.yaml"
"""KubeRay v1.7.0's RayCluster CRD (byte-identical to shared/schemas/kuberay-v1.7.0/ray.io_rayclusters.yaml)."""


@lru_cache(maxsize=None)
def _up(frozen: str, previous: str | None) -> MockRun:
    if previous is None:  # a new stack: the plain run, shared with every file (tests/helpers/mockruns.py)
        return shared_run(json.loads(frozen))
    return run_program(json.loads(frozen), previous=_up(previous, None))


def up(config: dict, after: dict | None = None) -> MockRun:
    """`pulumi up` of ``config`` on a stack last deployed with ``after`` (None: a new stack)."""
    key = lambda c: json.dumps(c, sort_keys=True)  # noqa: E731
    return _up(key(config), key(after) if after is not None else None)


def diff(a: dict, b: dict):
    """`ray-efa-eks diff` between the plans of two configs (each planned on its own, as the diff does)."""
    plans = [
        make_plan(layout.from_mockrun(up(c)), source=n, stack="dev", region="us-east-1")
        for n, c in (("before", a), ("after", b))
    ]
    return diff_plans(*plans)


def refused(config: dict, after: dict) -> HookRefused:
    with pytest.raises(HookRefused) as e:
        run_program(config, previous=up(after))
    return e.value


@pytest.fixture
def warnings(monkeypatch) -> list[str]:
    seen: list[str] = []
    monkeypatch.setattr(pulumi.log, "warn", lambda msg, *a, **k: seen.append(msg))
    return seen


def job_name(r: MockRun) -> str:
    return r.one(JOB)["metadata"]["name"]


def container_env(r: MockRun, name: str) -> set[str]:
    spec = r.one(RC)["spec"]
    pods = [spec["headGroupSpec"]] + spec["workerGroupSpecs"]
    return {
        e.get("value") for g in pods for c in g["template"]["spec"]["containers"] for e in c["env"] if e["name"] == name
    }


def test_checkpoint_prefix_change_recreates_the_pods_and_reruns_the_gate_on_the_new_spec():
    a = up({})
    b = up({"checkpointPrefix": "ray-train-v2"}, after={})
    assert any(v.endswith("/ray-train-v2") for v in container_env(b, STORAGE_PATH_ENV))
    # [KR-RECREATE]: KubeRay hashes the values it receives, the storage path included: every pod is recreated
    assert kuberay_recreates(a, b)
    # ...so the pods' spec hash (taken over the resolved spec) changes, and the gate Job with it: it runs again and
    # checks the new hash, which every recreated pod carries (no stale pod, no gate that never reran)
    assert container_env(a, SPEC_HASH_ENV) != container_env(b, SPEC_HASH_ENV)
    assert job_name(a) != job_name(b), "the gate must rerun when the pods are recreated"
    args = gate_args(b)
    assert {args[args.index("--spec-hash") + 1]} == container_env(b, SPEC_HASH_ENV)
    assert not gate_sees_stale(a, b)


def test_gpu_root_volume_change_replaces_the_gpu_nodes_warns_and_reruns_the_gate(warnings):
    a = up({})
    b = up({"gpuRootVolumeGiB": 300}, after={})
    lt_a, lt_b = a.one(LT, "gpu-lt").inputs, b.one(LT, "gpu-lt").inputs
    # [LT-VERSION] a data change: a new template version; [MNG-LT] EKS replaces every GPU node onto it
    assert template_changes(lt_a, lt_b) == ["blockDeviceMappings"]
    # [KR-RECREATE] the spec did not change: KubeRay recreates nothing, but the pods move to the new nodes
    assert not kuberay_recreates(a, b)
    assert job_name(a) != job_name(b), "EFA must be proven again on the new GPU nodes"
    said = [w for w in warnings if "EKS replaces all 2 GPU node(s)" in w]
    assert said, warnings
    d = diff({}, {"gpuRootVolumeGiB": 300})
    assert d.exit_code == 0 and any(said[0] in n for n in d.notes), d.notes


def test_system_node_change_warns_that_the_ray_head_moves(warnings):
    a = up({})
    b = up({"systemRootVolumeGiB": 200}, after={})
    assert template_changes(a.one(LT, "system-lt").inputs, b.one(LT, "system-lt").inputs) == ["blockDeviceMappings"]
    said = [w for w in warnings if "the Ray head move" in w and "every running Ray job stops" in w]
    assert said, warnings
    assert job_name(a) != job_name(b), "the head (and the gate's view of the cluster) is new"
    d = diff({}, {"systemRootVolumeGiB": 200})
    assert d.exit_code == 0 and any(said[0] in n for n in d.notes), d.notes
    # scaling the GPU nodes touches neither template's data: nothing rolls, nothing is said
    warnings.clear()
    c = up({"gpuNodeCount": 3}, after={})
    assert not template_changes(a.one(LT, "gpu-lt").inputs, c.one(LT, "gpu-lt").inputs)
    assert not [w for w in warnings if "launch template changes" in w]


def test_capacity_block_template_change_is_refused_while_nodes_run():
    up(CB)
    e = refused({**CB, "gpuRootVolumeGiB": 300}, after=CB)
    assert "gpu-lt" in e.hook and "desired size 0" in e.error and "gpuNodeCount 0" in e.error  # [CB-MNG]
    d = diff(CB, {**CB, "gpuRootVolumeGiB": 300})
    assert d.exit_code == 2 and len(d.refusals) == 1 and d.refusals[0].split(": ", 1)[1] in e.error
    # parking in the same update does not help: the version update is sent before the scaling one [MNG-ORDER]
    refused({**CB, "gpuNodeCount": 0, "gpuRootVolumeGiB": 300}, after=CB)
    # a node group version update replaces the nodes as a new template version does [MNG-LT, CB-MNG]
    e = refused({**CB, "kubernetesVersion": "1.36"}, after=CB)
    assert "Kubernetes version 1.35 -> 1.36" in e.error


def test_capacity_block_parked_first_takes_the_template_change():
    parked = {**CB, "gpuNodeCount": 0}
    changed = {**parked, "gpuRootVolumeGiB": 300}
    up(CB)
    p = up(parked, after=CB)  # 1: park; only the scaling and the template's tags change, no new version
    assert not template_changes(up(CB).one(LT, "gpu-lt").inputs, p.one(LT, "gpu-lt").inputs)
    assert p.one(MNG, "gpu")["scalingConfig"]["desiredSize"] == 0
    q = up(changed, after=parked)  # 2: the new template version meets a group at desired size 0 [CB-MNG]
    assert template_changes(p.one(LT, "gpu-lt").inputs, q.one(LT, "gpu-lt").inputs) == ["blockDeviceMappings"]
    assert q.one(MNG, "gpu")["scalingConfig"]["desiredSize"] == 0
    r = up({**CB, "gpuRootVolumeGiB": 300}, after=changed)  # 3: nodes launch from the new version
    assert r.one(MNG, "gpu")["scalingConfig"]["desiredSize"] == 2
    for before, after in ((CB, parked), (parked, changed), (changed, {**CB, "gpuRootVolumeGiB": 300})):
        assert diff(before, after).refusals == []


def test_chart_bump_brings_its_crds_and_is_refused_with_a_spec_change():
    old, new = {"kuberayChartVersion": "1.6.2"}, {"kuberayChartVersion": "1.7.0"}
    a = up(old)
    b = up(new, after=old)
    # [KR-CRD] Helm v3 does not upgrade CRDs: the stack applies the version's own, before the Release
    crds = b.one(CG, "kuberay-crds")
    assert crds["files"] == [CRD_URL.format(version="1.7.0", file=f) for f in CRD_FILES]
    assert a.one(CG, "kuberay-crds")["files"][0].startswith(
        "https://raw.githubusercontent.com/ray-project/kuberay/v1.6.2/"
    )
    release = b.one(RELEASE, "kuberay")
    assert release["skipCrds"] is True and crds.urn in release.options["dependencies"]
    # [KR-RECREATE lines 1482-1491]: the bump alone recreates nothing and needs nothing: the spec did not change
    assert _kuberay_hash(a.one(RC)["spec"]) == _kuberay_hash(b.one(RC)["spec"]) and job_name(a) == job_name(b)
    # with an image change in the same update, the new operator would rewrite the head's annotations to the new
    # spec's hash and recreate nothing: the old pods stay and the gate fails stale every time; so it is refused
    both = {**new, "dlcImage": NEW_IMAGE}
    kept = _pods(a.one(RC)["spec"])  # [KR-RECREATE 1482-1491]: the v1.6.2 head meets v1.7.0: nothing recreated
    wanted = gate_args(up(both))
    assert all(p["env"]["RAY_EFA_EKS_IMAGE"] != wanted[wanted.index("--image") + 1] for p in kept), "gate: stale"
    e = refused(both, after=old)
    assert "raycluster-chart-bump" in e.hook and "shouldRecreatePodsForUpgrade" in e.error
    d = diff(old, both)
    assert d.exit_code == 2 and any(r.split(": ", 1)[1] == e.error for r in d.refusals), d.refusals
    # in two updates it works: the bump, then the image (the head then carries the new operator's version)
    up(new, after=old)
    c = up(both, after=new)
    assert kuberay_recreates(up(new), c)


@pytest.mark.parametrize(
    "version,why", [("1.5.2", "upgradeStrategy"), ("1.7", "MAJOR.MINOR.PATCH"), ("v1.7.0", "chart version")]
)
def test_chart_versions_whose_crd_lacks_what_the_stack_sets_are_refused(version, why):
    with pytest.raises(ConfigError) as e:
        StackConfig.from_mapping({"kuberayChartVersion": version})
    assert e.value.key == "kuberayChartVersion" and why in str(e.value)


def test_the_pinned_crd_has_the_fields_the_stack_sets():
    """[KR-CRD] read from the chart's own CRD (KubeRay v1.7.0), not from our table."""
    crd = yaml.load(CRD_1_7_0.read_text(), Loader=yaml.CSafeLoader)
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert {"upgradeStrategy", "authOptions"} <= set(spec)
    assert "workersToDelete" in spec["workerGroupSpecs"]["items"]["properties"]["scaleStrategy"]["properties"]


SINGLE = {"allowSingleEfaNode": True, "gpuScaleToZero": False}
"""The fixed fleet: gpuNodeCount nodes, always up (gpuScaleToZero's autoscaler removes idle workers by itself)."""


def test_scale_down_with_a_job_on_one_worker_is_refused_without_the_procedure():
    two, one = {**SINGLE, "gpuNodeCount": 2}, {**SINGLE, "gpuNodeCount": 1}
    a = up(two)
    # What would happen [KR-DELETE lines 1219-1241, MNG-SCALE]: KubeRay deletes the first pod of its list and EKS
    # terminates an instance of its own choice; with the job on worker 0 (on node 0), every pairing but (1, 1) loses it
    outcomes = {(pod, node) for pod in (0, 1) for node in (0, 1)}
    job_lost = {(pod, node) for pod, node in outcomes if pod == 0 or node == 0}
    assert (0, 0) in job_lost and len(job_lost) == 3
    e = refused(one, after=two)
    assert "gpuNodeCount 2 -> 1" in e.error and "gpuWorkersToDelete names 0 pod(s), not 1" in e.error
    d = diff(two, one)
    assert d.exit_code == 2 and any(r.split(": ", 1)[1] in e.error for r in d.refusals), d.refusals
    assert a.one(MNG, "gpu")["scalingConfig"]["minSize"] == 0, "the procedure terminates below the old size"


def test_scale_down_naming_the_idle_worker_keeps_the_running_job():
    two = {**SINGLE, "gpuNodeCount": 2}
    one = {**SINGLE, "gpuNodeCount": 1, "gpuWorkersToDelete": ["ray-gpu-worker-idle1"]}
    a = up(two)
    b = up(one, after=two)  # the idle node was terminated first (docs/upgrades.md); its recreated pod is named here
    group = b.one(RC)["spec"]["workerGroupSpecs"][0]
    # [KR-DELETE lines 1132-1153]: exactly the named pod is deleted; replicas then match and nothing is deleted at random
    assert group["scaleStrategy"]["workersToDelete"] == ["ray-gpu-worker-idle1"] and group["replicas"] == 1
    # [KR-RECREATE] workersToDelete and replicas are muted in the hash: the running pods (and the job) stay
    assert not kuberay_recreates(a, b)
    assert b.one(MNG, "gpu")["scalingConfig"]["desiredSize"] == 1
    assert diff(two, one).refusals == []
    # parking (0) needs no names: every worker goes, a running job stops and resumes from its checkpoint later
    up({**SINGLE, "gpuNodeCount": 0}, after=two)


def test_the_autoscaled_fleet_scales_down_without_names():
    """gpuScaleToZero: Ray's autoscaler v2 owns workersToDelete and removes idle workers only; KubeRay deletes no pod
    at random when in-tree autoscaling is on ([KR-DELETE] lines 1219-1258: "the only decision-maker for Pod deletions is
    Autoscaler"), so lowering gpuNodeCount (the group's maximum) needs no procedure, and names are refused."""
    three, two = {"gpuNodeCount": 3, "gpuScaleToZero": True}, {"gpuNodeCount": 2, "gpuScaleToZero": True}
    up(three)
    up(two, after=three)
    assert diff(three, two).refusals == []
    with pytest.raises(ConfigError) as e:
        StackConfig.from_mapping({**two, "gpuWorkersToDelete": ["ray-gpu-worker-a"]})
    assert e.value.key == "gpuWorkersToDelete" and "gpuScaleToZero" in str(e.value)


def test_the_crds_are_never_deleted_by_pulumi():
    """The CRD ConfigGroup's transform (the engine runs it on each child; the mocks record it) retains every CRD:
    deleting a CRD deletes every RayCluster. Other kinds pass unchanged."""
    from ray_efa_eks.components.ray.kuberay import retain_crds

    cg = up({}).one(CG, "kuberay-crds")
    assert cg.transforms, "the ConfigGroup carries the transform"
    crd = retain_crds(
        pulumi.ResourceTransformArgs(
            True,
            "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition",
            "rayclusters.ray.io",
            {},
            pulumi.ResourceOptions(),
        )
    )
    assert crd is not None and crd.opts.retain_on_delete is True
    assert (
        retain_crds(
            pulumi.ResourceTransformArgs(True, "kubernetes:core/v1:ConfigMap", "x", {}, pulumi.ResourceOptions())
        )
        is None
    )


def test_chart_pre_releases_plan_but_not_below_the_upgrade_strategy_crd():
    """KubeRay publishes release candidates (tags v1.x.0-rc.N, with crds/ at the tag): an exact pre-release plans (and
    is warned as unverified); SemVer orders 1.6.0-rc.1 before 1.6.0, the first CRD with spec.upgradeStrategy."""
    from ray_efa_eks.components.ray.kuberay_versions import chart_version_problem, unverified_note

    assert chart_version_problem("1.8.0-rc.1") is None and "not verified" in unverified_note("1.8.0-rc.1")
    assert "older than 1.6.0" in chart_version_problem("1.6.0-rc.1")
    assert "exact chart version" in chart_version_problem("1.7.0+build.1")
