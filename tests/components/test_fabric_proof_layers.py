"""Which layer proves what on a GPU node (docs/gpus.md "Per-node proof"): the node agent proves what a pod
without the EFA device can see and removes the startup taint; the Ray worker's own init container runs the
device-level ``fi_info -p efa`` before Ray starts. Everything that must run on an unproven node tolerates the
startup taint; nothing of Ray does."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from ray_efa_eks.components import kube
from ray_efa_eks.components.ray import raycluster
from ray_efa_eks.tools.mockrun import run_program

STARTUP = kube.FABRIC_STARTUP_TAINT


def _tolerates(tolerations) -> bool:
    return any(
        t.get("key") == STARTUP or (t.get("operator") == "Exists" and not t.get("key")) for t in tolerations or []
    )


def _release(run, chart):
    (r,) = [r for r in run.resources if r.type == "kubernetes:helm.sh/v3:Release" and r.inputs.get("chart") == chart]
    return r.inputs["values"]


def test_what_must_run_on_an_unproven_node_tolerates_the_startup_taint(default_run):
    ds = default_run.one("kubernetes:apps/v1:DaemonSet", "node-agent")["spec"]["template"]["spec"]
    assert _tolerates(ds["tolerations"])
    for chart in ("aws-efa-k8s-device-plugin", "nvidia-device-plugin", "dcgm-exporter"):
        tol = _release(default_run, chart)["tolerations"]
        assert {"key": STARTUP, "operator": "Exists", "effect": "NoSchedule"} in tol, chart
    # and only that: no wildcard toleration anywhere
    for chart in ("aws-efa-k8s-device-plugin", "nvidia-device-plugin", "dcgm-exporter"):
        assert all(t.get("key") for t in _release(default_run, chart)["tolerations"]), chart


def test_no_ray_pod_and_no_gate_tolerates_it(default_run):
    rc = default_run.one("kubernetes:ray.io/v1:RayCluster")["spec"]
    pods = [rc["headGroupSpec"]["template"]["spec"], *(g["template"]["spec"] for g in rc["workerGroupSpecs"])]
    pods += [j["spec"]["template"]["spec"] for j in default_run.of_type("kubernetes:batch/v1:Job")]
    assert pods and not any(_tolerates(p.get("tolerations")) for p in pods)


def test_without_efa_there_is_no_agent_and_no_startup_taint():
    run = run_program({"efa": "false"})
    gpu = run.one("eks:index:ManagedNodeGroup", "gpu")
    assert [t["key"] for t in gpu["taints"]] == ["nvidia.com/gpu"]  # nothing would ever remove it
    assert not [r for r in run.resources if r.name.startswith("node-agent")]
    assert not _tolerates(_release(run, "nvidia-device-plugin")["tolerations"])


def test_the_worker_checks_the_provider_on_its_own_device_before_ray_starts(default_run):
    (group,) = default_run.one("kubernetes:ray.io/v1:RayCluster")["spec"]["workerGroupSpecs"]
    spec = group["template"]["spec"]
    (init,) = spec["initContainers"]
    (worker,) = spec["containers"]
    assert init["name"] == raycluster.PROVIDER_CHECK and init["image"] == worker["image"]
    # the worker's own requests (its EFA device and GPUs): the pod asks for nothing more than the worker does
    assert init["resources"] == worker["resources"] and worker["resources"]["limits"]["vpc.amazonaws.com/efa"] == "1"
    worker_env = {e["name"]: e.get("value") for e in worker["env"]}
    assert all(
        worker_env.get(e["name"]) == e.get("value") for e in init["env"] if e["name"].startswith(("FI_", "NCCL_"))
    )
    assert "lifecycle" not in init and init["terminationMessagePolicy"] == "FallbackToLogsOnError"


def _fake_fi_info(tmp_path: Path, rc: int, out: str) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    f = bin_dir / "fi_info"
    f.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path}/args\nprintf '%s\\n' '{out}'\nexit {rc}\n")
    f.chmod(f.stat().st_mode | stat.S_IEXEC)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "NODE_NAME": "ip-10-0-1-7"}


@pytest.mark.parametrize(
    "rc,out,passes",
    [
        (0, "provider: efa\n    fabric: efa\n    domain: rdmap0s30-rdm", True),
        (61, "fi_getinfo: -61 (No data available)", False),
        (0, "provider: tcp;ofi_rxm", False),
    ],
)
def test_the_init_containers_script_passes_only_when_fi_info_opens_efa(tmp_path, rc, out, passes):
    """The init container's own command, run with a stand-in fi_info (what fi_info prints: libfabric
    util/info.c; without the device node the efa provider has no entry and fi_getinfo returns -FI_ENODATA)."""
    cmd = raycluster.provider_check_container("img", {}, [])["command"]
    p = subprocess.run(cmd, env=_fake_fi_info(tmp_path, rc, out), capture_output=True, text=True, timeout=30)
    assert (p.returncode == 0) is passes, p
    assert (tmp_path / "args").read_text().split() == ["-p", "efa", "-t", "FI_EP_RDM"]
    if passes:
        assert "opened the efa provider on node ip-10-0-1-7" in p.stdout
    else:
        assert f"FAIL on node ip-10-0-1-7: fi_info -p efa -t FI_EP_RDM exited {rc}" in p.stderr
