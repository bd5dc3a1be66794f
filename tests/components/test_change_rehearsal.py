"""The second `pulumi up`, rehearsed offline: the program runs with a stack config, then with a changed
one, and the two registrations say what a real update would do.

- Which resources a real update creates, deletes, replaces or updates in place (:func:`steps`): Kubernetes objects
  are replaced when their name changes (pulumi-kubernetes cannot rename), anything else whose inputs differ is
  updated.
- Whether KubeRay recreates the Ray pods (:func:`kuberay_recreates`): modelled on KubeRay v1.7.0,
  ray-operator/controllers/ray/raycluster_controller.go ``shouldRecreatePodsForUpgrade`` (nothing unless
  ``spec.upgradeStrategy.type`` is Recreate; then the head pod's ``ray.io/upgrade-strategy-recreate-hash`` annotation,
  set when the pod was created from the old spec, is compared with the hash of the new spec). ``createHeadPod`` sets
  that annotation (and ``ray.io/kuberay-version``) on every head it creates, ``upgradeStrategy`` or not:
  ``reconcilePods`` always computes the hash (v1.6.0 and v1.7.0 alike; v1.5.x and older set no annotation), and
  utils/util.go
  ``GenerateHashWithoutReplicasAndWorkersToDelete`` (replicas, min/maxReplicas, workersToDelete, tolerations,
  schedulingGates and upgradeStrategy muted). Written here from the Go source, not from our ``spec_hash``.
- Which pods then run (:func:`pods_after`): all from the new spec when recreated; otherwise the old pods keep the
  old env and only pods added by a scale-up come from the new spec.
- Whether the re-run gate would check what really runs (:func:`gate_sees_stale`): the new Job's ``--image`` and
  ``--spec-hash`` against every running pod's ``RAY_EFA_EKS_IMAGE`` / ``RAY_EFA_EKS_SPEC_HASH``.
"""

from __future__ import annotations

import copy
import hashlib
import json

import pytest

from ray_efa_eks.components.nodes.rollout_guards import template_changes
from ray_efa_eks.tools import layout
from ray_efa_eks.tools.mockrun import MockRun
from ray_efa_eks.tools.plan_diff import diff_plans
from ray_efa_eks.tools.plan_run import make_plan
from tests.helpers.mockruns import shared_run

RC = "kubernetes:ray.io/v1:RayCluster"
JOB = "kubernetes:batch/v1:Job"
SECRET = "kubernetes:core/v1:Secret"
LT = "aws:ec2/launchTemplate:LaunchTemplate"
MNG = "eks:index:ManagedNodeGroup"
NEW_IMAGE = "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.2"
ODCR = {"gpuInstanceType": "g6e.48xlarge", "availabilityZone": "us-east-1c", "gpuScaleToZero": False}
"""A type and AZ the mocks' ODCR cr-0a1b2c3d4e5f60718 fits (tools/mockrun.CAPACITY_RESERVATIONS); a fixed fleet in
both modes (gpuScaleToZero's default follows gpuCapacity), so only the capacity mode changes."""


def run(config: dict | None = None) -> MockRun:
    """The stack under ``config``, run once per session (tests/helpers/mockruns.py: shared with every file)."""
    return shared_run(config)


# -- what a real update would do ------------------------------------------------------------------------------------


def _plain(v):
    return json.loads(json.dumps(v, default=lambda o: f"<{type(o).__name__}>"))


def steps(a: MockRun, b: MockRun) -> dict[str, str]:
    """``type name`` -> create | delete | replace | update | same, as the engine would plan them."""
    ra = {r.urn: r for r in a.resources}
    rb = {r.urn: r for r in b.resources}
    out: dict[str, str] = {}
    for urn in ra.keys() | rb.keys():
        r = rb.get(urn) or ra[urn]
        label = f"{r.type} {r.name}"
        if urn not in rb:
            out[label] = "delete"
        elif urn not in ra:
            out[label] = "create"
        else:
            old, new = _plain(ra[urn].inputs), _plain(rb[urn].inputs)
            if old == new:
                out[label] = "same"
            elif r.type.startswith("kubernetes:") and (old.get("metadata") or {}).get("name") != (
                new.get("metadata") or {}
            ).get("name"):
                out[label] = "replace"
            else:
                out[label] = "update"
    return out


def _kuberay_hash(spec: dict) -> str:
    """KubeRay 1.7.0 GenerateHashWithoutReplicasAndWorkersToDelete, over the registered spec."""
    s = copy.deepcopy(_plain(spec))
    s["headGroupSpec"]["template"]["spec"].pop("tolerations", None)
    s["headGroupSpec"]["template"]["spec"].pop("schedulingGates", None)
    for g in s.get("workerGroupSpecs", []):
        for k in ("replicas", "minReplicas", "maxReplicas"):
            g.pop(k, None)
        (g.get("scaleStrategy") or {}).pop("workersToDelete", None)
        if not g.get("scaleStrategy", True):  # a Go struct value (raycluster_types.go line 481): {} == absent
            g.pop("scaleStrategy")
        g["template"]["spec"].pop("tolerations", None)
        g["template"]["spec"].pop("schedulingGates", None)
    s.pop("upgradeStrategy", None)
    return hashlib.sha256(json.dumps(s, sort_keys=True).encode()).hexdigest()


def _spec(r: MockRun | dict) -> dict:
    return r if isinstance(r, dict) else r.one(RC)["spec"]


def _recreate(spec: dict) -> bool:
    return ((spec.get("upgradeStrategy") or {}).get("type")) == "Recreate"


HEAD_ANNOTATED_SINCE = (1, 6, 0)
"""First KubeRay whose createHeadPod writes ray.io/upgrade-strategy-recreate-hash (absent from v1.5.x's controller)."""


def head_annotation(spec: dict, operator: str = "1.7.0") -> str:
    """The recreate-hash annotation of a head KubeRay ``operator`` created from ``spec``.

    v1.6.0/v1.7.0 raycluster_controller.go: ``reconcilePods`` computes ``clusterHash`` from every spec and
    ``createHeadPod`` sets the annotation whenever that hash is not empty, whatever ``upgradeStrategy`` says; an
    operator before v1.6.0 sets none.
    """
    if tuple(int(p) for p in operator.split(".")) < HEAD_ANNOTATED_SINCE:
        return ""
    return _kuberay_hash(spec)


def kuberay_recreates(a: MockRun | dict, b: MockRun | dict, operator: str = "1.7.0") -> bool:
    """shouldRecreatePodsForUpgrade after the CR is patched from ``a``'s spec to ``b``'s (runs or specs), the head
    having been created from ``a``'s spec by KubeRay ``operator`` (still the running operator)."""
    old, new = _spec(a), _spec(b)
    annotation = head_annotation(old, operator)
    return _recreate(new) and annotation != "" and annotation != _kuberay_hash(new)


def _env(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def _pods(spec: dict) -> list[dict]:
    """One entry per pod the spec asks for: role and its container's image and env."""
    out = []
    head = spec["headGroupSpec"]["template"]["spec"]["containers"][0]
    out.append({"role": "head", "image": head["image"], "env": _env(head)})
    for g in spec["workerGroupSpecs"]:
        c = g["template"]["spec"]["containers"][0]
        out += [{"role": f"worker {g['groupName']}", "image": c["image"], "env": _env(c)}] * int(
            g.get("replicas", g["maxReplicas"])
        )  # scaling from zero: at most max
    return out


def pods_after(a: MockRun | dict, b: MockRun | dict) -> list[dict]:
    """The Ray pods running once KubeRay has reconciled ``b``'s spec over ``a``'s pods."""
    new = _pods(_spec(b))
    if kuberay_recreates(a, b):
        return new
    old = _pods(_spec(a))
    kept = [p for p in old if p["role"] == "head"]
    for role in {p["role"] for p in new if p["role"] != "head"}:
        want = sum(p["role"] == role for p in new)
        had = [p for p in old if p["role"] == role][:want]  # scale-down removes pods, the rest stay
        kept += had + [p for p in new if p["role"] == role][len(had) : want]  # scale-up adds pods of the new spec
    return kept


def _arg(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


def gate_args(b: MockRun) -> list[str]:
    script = b.one(JOB)["spec"]["template"]["spec"]["containers"][0]["command"][2]
    line = next(ln for ln in script.splitlines() if "efacheck.efa_check" in ln)
    return line.split("efacheck.efa_check", 1)[1].split()


def gate_sees_stale(a: MockRun | dict, b: MockRun | dict, args: list[str] | None = None) -> list[dict]:
    """Pods the re-run gate would call stale: their env differs from what its Job was rendered for."""
    args = args if args is not None else gate_args(b)
    want = {"RAY_EFA_EKS_IMAGE": _arg(args, "--image"), "RAY_EFA_EKS_SPEC_HASH": _arg(args, "--spec-hash")}
    assert all(want.values()), f"the gate checks neither image nor spec hash: {args}"
    return [p for p in pods_after(a, b) if any(p["env"].get(k) != v for k, v in want.items())]


# -- the rehearsals ---------------------------------------------------------------------------------------------------


def test_every_ray_container_says_its_image_and_spec_and_kuberay_recreates():
    b = run()
    spec = b.one(RC)["spec"]
    assert spec["upgradeStrategy"] == {"type": "Recreate"}
    hashes = set()
    for g in [spec["headGroupSpec"], *spec["workerGroupSpecs"]]:
        for c in g["template"]["spec"]["containers"]:
            env = _env(c)
            assert env["RAY_EFA_EKS_IMAGE"] == c["image"]
            hashes.add(env["RAY_EFA_EKS_SPEC_HASH"])
    assert len(hashes) == 1 and _arg(gate_args(b), "--spec-hash") in hashes


@pytest.mark.parametrize("change", [{"dlcImage": NEW_IMAGE}, {"ncclDebug": "INFO"}], ids=["image", "nccl-env"])
def test_a_spec_change_recreates_every_pod_and_the_gate_checks_the_new_spec(change):
    a, b = run(), run(change)
    s = steps(a, b)
    assert s[f"{RC} ray-raycluster"] == "update"
    assert kuberay_recreates(a, b), "KubeRay would leave the running pods on the old spec"
    assert s[f"{JOB} efa-check-job"] == "replace", "the gate must run again"
    assert not gate_sees_stale(a, b)
    if "dlcImage" in change:
        cached = NEW_IMAGE.replace(
            "public.ecr.aws/", "123456789012.dkr.ecr.us-east-1.amazonaws.com/ray-efa-dev-ecr-public/"
        )
        assert _arg(gate_args(b), "--image") == cached  # through the account's pull-through cache
        assert {p["image"] for p in pods_after(a, b)} == {cached}
    else:
        workers = [p for p in pods_after(a, b) if p["role"].startswith("worker")]
        assert workers and all(p["env"]["NCCL_DEBUG"] == "INFO" for p in workers)
    # nothing else moves: no node, network or IAM resource is replaced by a pod-level change
    assert {k for k, v in s.items() if v in ("replace", "delete", "create")} == {f"{JOB} efa-check-job"}


def test_a_stale_pod_would_be_caught_by_the_gate():
    """The model can fail: with KubeRay's default (no upgradeStrategy) the old pods stay and the gate names them."""
    a, b = run(), run({"dlcImage": NEW_IMAGE})
    old, new = (copy.deepcopy(_plain(r.one(RC)["spec"])) for r in (a, b))
    for spec in (old, new):
        spec.pop("upgradeStrategy")  # KubeRay's default: nil
    assert not kuberay_recreates(old, new)
    stale = gate_sees_stale(old, new, gate_args(b))
    assert {p["role"] for p in stale} == {"head", "worker gpu"} and len(stale) == 3


def test_a_head_created_before_upgrade_strategy_is_recreated_on_the_first_spec_change():
    """A stack deployed before ``upgradeStrategy`` existed: its head was created by KubeRay 1.6.0/1.7.0 with the
    recreate-hash annotation all the same (createHeadPod sets it for every head), so the first ``pulumi up`` that sets
    Recreate together with a spec change recreates every pod and the gate finds none stale (no manual pod deletion)."""
    a, b = run(), run({"dlcImage": NEW_IMAGE})
    old = copy.deepcopy(_plain(a.one(RC)["spec"]))
    old.pop("upgradeStrategy")  # created before the stack set it
    for operator in ("1.6.0", "1.7.0"):
        assert head_annotation(old, operator), f"KubeRay {operator} annotates every head it creates"
        assert kuberay_recreates(old, b, operator)
        assert not gate_sees_stale(old, b, gate_args(b))
    # setting only upgradeStrategy changes nothing KubeRay hashes (it mutes the field): nothing is recreated
    assert not kuberay_recreates(old, a)
    # a head created by an operator older than v1.6.0 carries no annotation: nothing is recreated
    assert not kuberay_recreates(old, b, "1.5.1")


@pytest.mark.parametrize("before,after", [(2, 3), (3, 2)], ids=["up", "down"])
def test_node_count_scales_without_restarting_the_cluster(before, after):
    a, b = run({"gpuNodeCount": before}), run({"gpuNodeCount": after})
    s = steps(a, b)
    assert s[f"{RC} ray-raycluster"] == "update" and s[f"{MNG} gpu-mng"] == "update"
    # only the template's tags record the new count: no new template version, nothing rolls
    # (terraform-provider-aws ec2_launch_template.go resourceLaunchTemplateUpdate: updateKeys leave out tags)
    assert not template_changes(a.one(LT, "gpu-lt").inputs, b.one(LT, "gpu-lt").inputs), (
        "scaling must not roll the GPU nodes"
    )
    assert not kuberay_recreates(a, b), "a scale change must not restart the running pods"
    assert s[f"{JOB} efa-check-job"] == "replace" and _arg(gate_args(b), "--expect-nodes") == str(after)
    assert sum(p["role"] == "worker gpu" for p in pods_after(a, b)) == after
    assert not gate_sees_stale(a, b), "old and added workers must carry the same spec hash"


@pytest.mark.parametrize("before,after", [("true", "false"), ("false", "true")], ids=["off", "on"])
def test_token_auth_switch_recreates_pods_and_keeps_the_secret(before, after):
    a, b = run({"rayTokenAuth": before}), run({"rayTokenAuth": after})
    s = steps(a, b)
    assert s[f"{SECRET} ray-auth-token"] == "same", "the Secret running pods reference must not be deleted or changed"
    assert kuberay_recreates(a, b), "pods must restart with the new auth mode"
    assert s[f"{JOB} efa-check-job"] == "replace"
    env = b.one(JOB)["spec"]["template"]["spec"]["containers"][0].get("env", [])
    assert any(e["name"] == "RAY_AUTH_MODE" for e in env) == (after == "true"), "the Job's client must match"
    assert ("authOptions" in b.one(RC)["spec"]) == (after == "true")
    assert not gate_sees_stale(a, b)


def test_capacity_mode_change_rolls_the_gpu_nodes_and_the_plan_diff_flags_it():
    a = run(ODCR)
    b = run({**ODCR, "gpuCapacity": "reservation", "gpuCapacityReservationId": "cr-0a1b2c3d4e5f60718"})
    s = steps(a, b)
    assert s[f"{LT} gpu-lt"] == "update", "a new template version: EKS replaces every GPU node"
    # KubeRay recreates nothing, but EKS replaces the nodes under the pods: the gate must prove EFA on the new ones
    assert not kuberay_recreates(a, b) and s[f"{JOB} efa-check-job"] == "replace"
    plans = [
        make_plan(layout.from_mockrun(r), source=n, stack="dev", region="us-east-1")
        for n, r in (("before", a), ("after", b))
    ]
    d = diff_plans(*plans)
    assert len(d.rollouts) == 1
    assert "gpu-mng" in d.rollouts[0] and "set gpuNodeCount 0 and `pulumi up` first" in d.rollouts[0]
    # ...and `pulumi up` refuses it at the template's before_update hook; the diff says the same (exit 2)
    assert d.exit_code == 2 and [r for r in d.refusals if r.startswith("gpu-lt: GPU node group (reservation)")]
    # parked first (gpuNodeCount 0): the same change rolls nothing and is not flagged
    parked = [
        run({**c, "gpuNodeCount": 0})
        for c in (ODCR, {**ODCR, "gpuCapacity": "reservation", "gpuCapacityReservationId": "cr-0a1b2c3d4e5f60718"})
    ]
    p2 = [make_plan(layout.from_mockrun(r), source="x", stack="dev", region="us-east-1") for r in parked]
    assert diff_plans(*p2).rollouts == []
    # scaling inside the reservation rolls nothing either
    c = run(
        {**ODCR, "gpuCapacity": "reservation", "gpuCapacityReservationId": "cr-0a1b2c3d4e5f60718", "gpuNodeCount": 3}
    )
    assert (
        diff_plans(plans[1], make_plan(layout.from_mockrun(c), source="c", stack="dev", region="us-east-1")).rollouts
        == []
    )
