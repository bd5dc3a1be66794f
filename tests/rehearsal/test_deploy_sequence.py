"""The whole stack's deploy sequence, rehearsed from its rendered objects (:mod:`tests.helpers.rehearsal`).

Default stack, one Ray head reused where the RayCluster does not change:

1. first ``up`` from zero GPU nodes: the gate Job's pod runs as the kubelet runs it (the image-audit sidecar, then
   the gate's container); its check is the only thing that asks Ray for GPU nodes; ``gpuNodeCount`` instances
   launch, each node joins with the startup taint, the node agent proves it and removes the taint (through the
   rendered RBAC and admission policy), the worker pod is placed and joins Ray, the check reaches its verdict (on
   CPU: ``no_cuda``, the declared GPUs have no CUDA behind them) and the audit sees every Ray pod on one digest;
2. the request is withdrawn and the workers and their nodes go after the (shortened) idle timeout;
3. a second ``up`` with a spec change: every Ray pod recreated from the new spec, the gate (a new Job) runs again
   from zero;
4. a node that fails its proof (no EFA device): it keeps its startup taint, no pod is placed on it, the gate fails
   on the topology.

Then the fixed fleet (``gpuScaleToZero: false``: workers before the gate) on its own head, and the node-level steps
of the shapes whose gate needs no separate Ray run here (``efa: false``, one GPU node, an ODCR p5 stack).
"""

from __future__ import annotations

import json
import time

import pytest

pytest.importorskip("ray.job_submission")
pytest.importorskip("aiohttp")
pytest.importorskip("celpy")

from tests.helpers.rehearsal import DIGEST, Deploy, Stack  # noqa: E402

pytestmark = pytest.mark.rehearsal
TAINT = "startup-taint.cluster-autoscaler.kubernetes.io/efa-unproven"
ODCR_P5 = {
    "gpuInstanceType": "p5.48xlarge",
    "gpuCapacity": "reservation",
    "gpuCapacityReservationId": "cr-0fedcba9876543210",
    "availabilityZone": "us-east-1a",
    "gpuPlacementGroupName": "p5-odcr-pg",
}
"""mockrun's ODCR: 2 x p5.48xlarge in us-east-1a, made in cluster placement group p5-odcr-pg."""
FIGURES: dict[str, dict] = {}
"""What each scenario did (steps, pods placed, seconds): printed at the end of the module."""


def check_verdict(text: str) -> dict:
    """The check's own JSON (printed indented by ``--json``), the last one in the gate's log."""
    dec, found, i = json.JSONDecoder(), None, text.find("\n{\n")
    while i != -1:
        try:
            obj, _ = dec.raw_decode(text, i + 1)
            if "expected" in obj:
                found = obj
        except ValueError:
            pass
        i = text.find("\n{\n", i + 1)
    assert found, f"no check verdict in:\n{text[-3000:]}"
    return found


def audit_verdict(text: str) -> dict:
    """The image audit's verdict as the gate's script printed it after the check (efacheck/gate_steps.py combine)."""
    line = [ln for ln in text.splitlines() if ln.startswith('{"image_fleet"')][-1]
    return json.loads(line)["image_fleet"]


def run_gate(deploy: Deploy, name: str, topology_wait_s: float = 240, edit=None) -> tuple[object, dict, float]:
    t = time.monotonic()
    gate = deploy.gate_pod(wait_s=20, topology_wait_s=topology_wait_s, edit=edit)
    gate.start()
    phase = gate.wait(timeout=600)
    took = time.monotonic() - t
    assert "efa-check" in gate.exits, f"the gate's container never started (pod {phase}):\n{gate.describe()}"
    verdict = check_verdict(gate.log("efa-check"))
    FIGURES[name] = {
        "seconds": round(took, 1),
        "gate_exit": gate.exits["efa-check"],
        "stage": (verdict.get("failure") or {}).get("stage"),
        "steps": deploy.steps()[:],
        "placed": deploy.placed[:],
    }
    return gate, verdict, took


@pytest.fixture(scope="module")
def deploy(tmp_path_factory):
    d = Deploy(Stack(), tmp_path_factory.mktemp("default"))
    yield d
    d.close()


def test_first_up_from_zero_gpu_nodes_reaches_the_gate_verdict(deploy):
    gate, verdict, _ = run_gate(deploy, "first up")
    # the check asked for the declared GPU nodes, and they came: 2 instances, each proven, its pod placed
    assert len(deploy.workers) == 2 and len(deploy.placed) == 2, (deploy.steps(), gate.describe())
    steps = deploy.steps()
    for node in deploy.placed:
        joined = next(i for i, s in enumerate(steps) if f"node {node} joins" in s)
        agent = next(i for i, s in enumerate(steps) if f"node-agent pod started on {node}" in s)
        proven = next(i for i, s in enumerate(steps) if f"node {node}: startup taint gone" in s)
        running = next(i for i, s in enumerate(steps) if "Running on " + node in s)
        assert joined < agent < proven < running, steps
    assert not deploy.api.refused(), deploy.api.refused()
    assert verdict["failure"]["stage"] == "no_cuda", gate.log("efa-check")[-4000:]
    assert gate.exits["efa-check"] == 2 and verdict["image"]["digest"] == DIGEST
    fleet = audit_verdict(gate.log("efa-check"))
    assert fleet["verdict"] == "ok" and len(fleet["pods"]) == 3, fleet
    # the node agent wrote its proof into each node's status, through the admission policy
    conditions = {n: deploy.api.node(n)["status"]["conditions"] for n in deploy.placed if n in deploy.api.nodes}
    assert all(any(c["type"] == "EfaFabricProven" and c["status"] == "True" for c in cs) for cs in conditions.values())


def test_the_request_is_withdrawn_and_the_workers_go_after_the_idle_timeout(deploy):
    t = time.monotonic()
    deploy.wait_for(lambda: len(deploy.terminated) == 2, 120, "both GPU instances terminated")
    assert set(deploy.terminated) == set(deploy.placed)
    with deploy.api.lock:
        assert set(deploy.api.nodes) == {"system-node-0"}
        assert [p["metadata"]["name"] for p in deploy.api.pods.values()] == ["ray-head"]
    FIGURES["scale down"] = {"seconds": round(time.monotonic() - t, 1), "terminated": deploy.terminated[:]}


def test_second_up_with_a_spec_change_recreates_the_pods_and_runs_the_gate_again(deploy):
    first_job = deploy.stack.job["metadata"]["name"]
    deploy.recreate(Stack({"ncclDebug": "INFO"}))
    assert deploy.stack.job["metadata"]["name"] != first_job  # a new gate Job: what it vouches for changed
    placed_before = len(deploy.placed)
    gate, verdict, _ = run_gate(deploy, "second up (ncclDebug INFO)")
    assert verdict["failure"]["stage"] == "no_cuda", gate.log("efa-check")[-4000:]  # not `stale`: new pods
    assert len(deploy.placed) == placed_before + 2
    fleet = audit_verdict(gate.log("efa-check"))
    assert fleet["verdict"] == "ok" and len(fleet["pods"]) == 3, fleet


def test_a_node_that_fails_its_proof_keeps_its_taint_and_is_never_used(deploy):
    deploy.wait_for(lambda: len(deploy.terminated) == 4, 120, "the second up's workers gone")
    failing = len(deploy.workers)  # the next instance launched
    deploy.failing.add(failing)
    gate, verdict, _ = run_gate(deploy, "a node fails its proof", topology_wait_s=45)
    bad = f"gpu-node-{failing}"
    node = deploy.api.node(bad)
    assert TAINT in [t["key"] for t in node["spec"]["taints"]], node
    cond = next(c for c in node["status"]["conditions"] if c["type"] == "EfaFabricProven")
    assert cond["status"] == "False", cond
    with deploy.api.lock:
        assert not [p for p in deploy.api.pods.values() if p["spec"]["nodeName"] == bad]
    assert bad not in deploy.placed and f"gpu-node-{failing + 1}" in deploy.placed
    assert verdict["failure"]["stage"] == "topology" and "1 of 2 expected GPU nodes" in verdict["failure"]["reason"]
    assert gate.exits["efa-check"] == 2 and not deploy.api.refused()


def test_the_fixed_fleet_is_proven_and_placed_before_the_gate_and_the_gate_passes_its_audit(tmp_path_factory):
    d = Deploy(Stack({"gpuScaleToZero": False}), tmp_path_factory.mktemp("fixed"))
    try:
        d.wait_for(lambda: len(d.placed) == 2, 180, "the fixed fleet's 2 workers placed (minReplicas 2)")
        before_gate = d.steps()[:]
        gate, verdict, _ = run_gate(d, "fixed fleet")
        assert len(d.workers) == 2, d.steps()  # no more instances: the check found them there
        assert sum("Running on" in s for s in before_gate) == 2
        assert verdict["failure"]["stage"] == "no_cuda"
        fleet = audit_verdict(gate.log("efa-check"))
        assert fleet["verdict"] == "ok" and len(fleet["pods"]) == 3
        # the check's topology flags are live: one more node or more GPUs per node than the fleet has fails it
        for flag, value, says in (
            ("--expect-nodes 2", "--expect-nodes 3", "2 of 3 expected GPU nodes"),
            ("--expect-gpus-per-node 4", "--expect-gpus-per-node 8", "with 8 GPU(s) each"),
        ):
            gate, changed, _ = run_gate(
                d, f"fixed fleet, {value}", topology_wait_s=15, edit=lambda s, a=flag, b=value: s.replace(a, b)
            )
            assert changed["failure"]["stage"] == "topology" and says in changed["failure"]["reason"], changed
    finally:
        d.close()


@pytest.mark.parametrize(
    "config, nodes, taint",
    [
        ({"efa": False}, 2, False),
        ({"gpuNodeCount": 1, "allowSingleEfaNode": True}, 1, True),
        (ODCR_P5, 2, True),
    ],
    ids=["efa-false", "one-gpu-node", "odcr-p5"],
)
def test_node_level_steps_of_the_other_shapes(tmp_path, config, nodes, taint):
    """Without Ray: each node of the shape joins with its group's taints, the DaemonSets that select it run (the
    node agent proves it against a sysfs with the catalogue's EFA devices: 32 on p5.48xlarge) and the worker pod's
    init containers pass; without EFA there is no node agent and no startup taint, and the pod is placed at once."""
    d = Deploy(Stack(config), tmp_path, ray=False)
    try:
        for _ in range(nodes):
            d.launch()
        d.wait_for(lambda: len(d.placed) == nodes, 90, f"{nodes} worker pod(s) placed")
        agents = [s for s in d.steps() if "node-agent pod started" in s]
        assert len(agents) == (nodes if taint else 0), d.steps()
        assert not d.api.refused()
        FIGURES[f"nodes {'/'.join(f'{k}={v}' for k, v in config.items())}"] = {"steps": d.steps()[:]}
    finally:
        d.close()


SHAPES = {
    "default": None,
    "second up": {"ncclDebug": "INFO"},
    "fixed fleet": {"gpuScaleToZero": False},
    "efa false": {"efa": False},
    "one GPU node": {"gpuNodeCount": 1, "allowSingleEfaNode": True},
    "ODCR p5": ODCR_P5,
}


def test_every_rendered_container_was_executed_by_a_scenario():
    """Across the shapes above, every container the stack renders (init and main, per pod template) was started
    by some scenario of this module; and the figures of each scenario."""
    from tests.helpers.kubelet import EXECUTED
    from tests.helpers.rehearsal import rendered_containers

    rendered: dict[tuple[str, str], list[str]] = {}
    for shape, cfg in SHAPES.items():
        for key in rendered_containers(Stack(cfg)):
            rendered.setdefault(key, []).append(shape)
    ran = {(r["template"], r["container"]) for r in EXECUTED}
    missing = {f"{t} container {c}": shapes for (t, c), shapes in sorted(rendered.items()) if (t, c) not in ran}
    assert not missing, f"rendered but never executed by any scenario: {missing}"
    print(
        "\nREHEARSAL FIGURES "
        + json.dumps({"containers": sorted(f"{t}:{c}" for t, c in rendered), "scenarios": FIGURES}, indent=1)
    )
