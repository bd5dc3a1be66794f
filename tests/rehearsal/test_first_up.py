"""The default stack's first ``pulumi up``, from zero GPU nodes, rehearsed from its rendered objects.

The gate Job's pod runs as the kubelet runs it (its init containers first, then its container), against the
rehearsal's API server (the rendered RBAC) and Ray (head + autoscaler, no GPU worker until one is asked for):
scale-from-zero means the only thing that asks Ray for GPU nodes is the gate's own check. What must follow: the
check's request launches ``gpuNodeCount`` instances, each node joins with the startup taint, the node agent proves it
and removes the taint, the worker pod is placed and joins Ray, the image audit sees every Ray pod on one digest,
the check reaches its verdict (on CPU: ``no_cuda``, the declared GPUs have no CUDA behind them), the request is
withdrawn and the workers go after the (shortened) idle timeout.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("ray.job_submission")
pytest.importorskip("aiohttp")
pytest.importorskip("celpy")

from tests.helpers.rehearsal import Deploy, Stack  # noqa: E402

pytestmark = pytest.mark.rehearsal


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


def last_json(text: str, key: str) -> dict:
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{") and key in line:
            try:
                return json.loads(line)
            except ValueError:
                continue
    raise AssertionError(f"no JSON line with {key!r} in:\n{text[-3000:]}")


@pytest.fixture(scope="module")
def deploy(tmp_path_factory):
    d = Deploy(Stack(), tmp_path_factory.mktemp("first-up"))
    yield d
    d.close()


def test_first_up_from_zero_gpu_nodes_reaches_the_gate_verdict(deploy):
    gate = deploy.gate_pod(wait_s=20, topology_wait_s=240)
    gate.start()
    phase = gate.wait(timeout=600)
    out = gate.describe()
    assert "efa-check" in gate.exits, f"the gate's container never started (pod {phase}):\n{out}"
    # the check asked for the declared GPU nodes, and they came: 2 instances, each proven, its pod placed
    assert len(deploy.workers) == 2 and len(deploy.placed) == 2, (deploy.steps(), out)
    steps = deploy.steps()
    for node in deploy.placed:
        launched = next(i for i, s in enumerate(steps) if f"node {node} joins" in s)
        placed = next(i for i, s in enumerate(steps) if f"node {node}: startup taint gone" in s)
        assert launched < placed
    assert not deploy.api.refused(), deploy.api.refused()
    check = gate.log("efa-check")
    verdict = check_verdict(check)
    assert verdict["failure"]["stage"] == "no_cuda", check[-4000:]
    assert gate.exits["efa-check"] == 2
    fleet = last_json(gate.log("image-audit"), "image_fleet")["image_fleet"]
    assert fleet["verdict"] == "ok" and len(fleet["pods"]) == 3, fleet
