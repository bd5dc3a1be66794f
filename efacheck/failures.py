"""How a stage of the EFA check fails: the exception a stage raises, and the verdict, exit code and hint each
failure stage maps to (efa_check's module docstring lists the stages)."""

from __future__ import annotations

from typing import Any

FAILURES: dict[str, tuple[str, int]] = {
    "unreachable": ("undetermined", 2),
    "topology": ("undetermined", 2),
    "no_gpu": ("undetermined", 2),
    "no_cuda": ("undetermined", 2),
    "placement": ("undetermined", 2),
    "rank_error": ("failed", 1),
    "timeout": ("failed", 1),
    "actor_died": ("failed", 1),
    "wrong_result": ("failed", 1),
    "storage": ("failed", 1),
    "internal": ("undetermined", 2),
    "stale": ("undetermined", 2),
    "busy": ("undetermined", 2),
}
"""Failure stage -> (verdict, exit code); see the module docstring."""

FAILURE_HINTS = {
    "unreachable": "run inside the cluster (--address auto) or port-forward the head and pass its GCS address",
    "topology": "GPU nodes still booting or pulling the image: check `kubectl -n ray get pods -o wide` and the node "
    "group's desired size; raise --wait-s if nodes are slow to join",
    "no_gpu": "no Ray node advertises GPU: are the NVIDIA device plugin pods running on the GPU nodes "
    "(`kubectl -n kube-system get ds`), and do the Ray worker pods request nvidia.com/gpu?",
    "no_cuda": "Ray hands the rank a GPU id but CUDA sees no device: the pod lacks the GPU (device plugin / "
    "NVIDIA runtime) or the image's CUDA does not match the driver",
    "placement": "the ranks could not be placed one bundle per node: another job holds the GPUs, or a node died",
    "rank_error": "read the rank's error and NCCL WARN lines above; NCCL init errors usually name the transport",
    "timeout": "a collective hung: typical for a blocked EFA security-group rule (egress/ingress to itself) or a "
    "NCCL_SOCKET_IFNAME that names no usable interface",
    "actor_died": "a rank's process died (OOM, node lost): `ray logs` on the node, `kubectl describe pod`",
    "wrong_result": "a collective returned wrong values: the transport corrupts data (check the EFA driver and "
    "aws-ofi-nccl versions in the probe rows against the image manifest, FI_EFA_USE_DEVICE_RDMA for the "
    "instance type, and GPU/NIC health with `nvidia-smi -q` and the EFA error counters)",
    "storage": "a GPU worker pod could not write, list, read back or delete a checkpoint object: read the AWS error "
    "and the likely cause in the reason (trust policy, bucket policy, KMS, credential chain)",
    "internal": "a bug in the check: report it with this JSON",
    "stale": "these pods were created from another RayCluster spec than this gate was rendered for: KubeRay "
    "recreates them (upgradeStrategy Recreate) after a spec change; wait for `kubectl -n ray get pods` to "
    "show fresh pods, or delete the named pods once (a head created before upgradeStrategy was set carries "
    "no hash, so KubeRay cannot tell), then re-run the gate",
    "busy": "another Ray job holds the GPUs the check needs: wait for it to end or stop it (`ray job stop ID`, the "
    "training resumes from its last checkpoint with the same --name), then re-run the gate "
    "(`pulumi up` replaces the failed gate Job)",
}


class CheckFailed(Exception):
    """A stage of the check could not complete; ``stage`` is a key of FAILURES."""

    def __init__(self, stage: str, reason: str, **extra: Any):
        super().__init__(reason)
        self.stage, self.reason, self.extra = stage, reason, extra


def failure_result(e: CheckFailed, expected: dict[str, Any]) -> dict:
    verdict, code = FAILURES[e.stage]
    return {
        "verdict": verdict,
        "code": code,
        "failure": {"stage": e.stage, "reason": e.reason},
        "reasons": [e.reason],
        "hints": [FAILURE_HINTS[e.stage]],
        "backend": e.extra.get("backend"),
        "expected": expected,
        "nodes": e.extra.get("nodes"),
        "world": None,
        "sweep": [],
    }
