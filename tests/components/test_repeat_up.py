"""The next ``pulumi up`` after the autoscalers moved things: Ray's autoscaler owns ``spec.workerGroupSpecs`` by then
(an atomic list in the KubeRay CRD) and the Cluster Autoscaler the GPU group's desired size; Pulumi's update must
still go through, from what runs, and must not re-run the gate for nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ray.autoscaler._private.kuberay.node_provider import worker_replica_patch

from tests.helpers.mockruns import shared_run
from tests.helpers.ssa import Conflict, Server, pulumi_forces

CRD = yaml.load((Path(__file__).parents[1] / "schemas/ray.io_rayclusters.yaml").read_text(), Loader=yaml.CSafeLoader)
SCHEMA = next(v for v in CRD["spec"]["versions"] if v["name"] == "v1")["schema"]["openAPIV3Schema"]
AUTOSCALER = "ray-autoscaler"


def _raycluster(config: dict) -> dict:
    rc = shared_run(config).one("kubernetes:ray.io/v1:RayCluster")
    return {"metadata": rc["metadata"], "spec": rc["spec"]}


def test_the_crd_makes_worker_groups_one_atomic_field():
    """Why the autoscaler's replica patch takes the whole list: no list type on workerGroupSpecs."""
    groups = SCHEMA["properties"]["spec"]["properties"]["workerGroupSpecs"]
    assert groups["type"] == "array" and "x-kubernetes-list-type" not in groups


@pytest.mark.parametrize("annotated, refused", [(True, False), (False, True)], ids=["as rendered", "no patchForce"])
def test_second_up_after_a_scale_up(annotated, refused):
    first, changed = _raycluster({}), _raycluster({"ncclDebug": "INFO"})
    if not annotated:
        changed["metadata"] = {
            **changed["metadata"],
            "annotations": {
                k: v for k, v in changed["metadata"]["annotations"].items() if k != "pulumi.com/patchForce"
            },
        }
    server = Server(SCHEMA)
    server.apply(first, force=pulumi_forces(first))  # first up
    server.json_patch([worker_replica_patch("0", 2)], AUTOSCALER)  # the gate asked for 2 GPU workers
    assert server.owners[("spec", "workerGroupSpecs")] == AUTOSCALER
    if refused:
        with pytest.raises(Conflict, match="spec.workerGroupSpecs owned by ray-autoscaler"):
            server.apply(changed, force=pulumi_forces(changed))
        return
    server.apply(changed, force=pulumi_forces(changed))
    assert server.obj["spec"]["workerGroupSpecs"][0]["template"] == changed["spec"]["workerGroupSpecs"][0]["template"]
    # from zero the stack renders no replicas: the forced apply resets them to the CRD's 0, which KubeRay does not act
    # on while in-tree autoscaling is on; the autoscaler writes its count back
    assert server.obj["spec"]["workerGroupSpecs"][0]["replicas"] == 0
    assert server.obj["spec"]["enableInTreeAutoscaling"] is True


def test_an_unchanged_second_up_has_nothing_to_force():
    rc = _raycluster({})
    server = Server(SCHEMA)
    server.apply(rc)
    server.apply(rc)  # same values, same manager: no conflict even unforced


def test_every_up_starts_from_the_live_state():
    """pulumi-eks ``ignoreScalingChanges`` sends the desired size recorded in the state with any scaling change
    (a new gpuNodeCount): stale, it would start GPU nodes nobody asked for, or stop the ones a job runs on. The
    project refreshes before every preview, up and destroy (Pulumi project file ``options.refresh: always``)."""
    project = yaml.safe_load((Path(__file__).parents[2] / "Pulumi.yaml").read_text())
    assert project["options"]["refresh"] == "always"
    group = next(r for r in shared_run({}).of_type("eks:index:ManagedNodeGroup") if "gpu" in r.name)
    assert group["ignoreScalingChanges"] is True


@pytest.mark.parametrize("config", [{}, {"gpuScaleToZero": "false"}], ids=["from zero", "fixed fleet"])
def test_the_finished_gate_job_stays(config):
    """With a refresh on every up, a Job Kubernetes deleted after its TTL would be created again and the whole gate
    re-run by an unrelated change; the finished Job stays until a new one (a new name) replaces it."""
    job = shared_run(config).one("kubernetes:batch/v1:Job")
    assert "ttlSecondsAfterFinished" not in job["spec"]
