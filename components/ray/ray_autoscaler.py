"""Ray's autoscaler (v2) in the RayCluster: GPU workers from 0 to the group's maximum, removed when idle.

KubeRay 1.7 runs the autoscaler as a sidecar of the head pod when ``enableInTreeAutoscaling`` is true, and picks
v2 from ``autoscalerOptions.version: v2``; it then sets ``RAY_enable_autoscaler_v2=true`` on the head's Ray container
itself (ray-operator/controllers/ray/common/pod.go ``setAutoscalerV2EnvVars``) and refuses a RayCluster that also
sets that variable on the head (utils/validation.go: "both .spec.autoscalerOptions.version and head Pod env var
RAY_enable_autoscaler_v2 are set, please only use the former"), so the stack sets the version field only.
``idleTimeoutSeconds`` is accepted only with v2 (validation.go, "idleTimeoutSeconds is set, but autoscaler v2 is
not enabled").

Slow GPU nodes: a worker pod is ``ALLOCATED`` in the v2 instance manager from pod creation until its raylet
registers; the autoscaler gives up on it after ``RAY_AUTOSCALER_RECONCILE_ALLOCATE_STATUS_TIMEOUT_S`` (Ray
python/ray/autoscaler/v2/instance_manager/config.py ``InstanceReconcileConfig``), deleting the pod. Older Ray
fixed that at 300 s, which killed pods still waiting for a node and a tens-of-GB image (KubeRay issue 4226, "timeout
=300s at status ALLOCATED", nodes 4-5 min + pull 2-3 min); Ray 2.58 reads the variable with a default of 3600 s.
The stack sets it explicitly on the autoscaler container (:func:`autoscaler_env`) to :data:`ALLOCATE_TIMEOUT_S`, so
a Ray image with another default cannot shorten it, and a node that never proves itself frees its slot for a
replacement pod after that wait. It is a constant, not the gate's efaCheckWaitSeconds: autoscalerOptions is part of
KubeRay's Recreate hash, so tying it to a gate setting would recreate every Ray pod when the gate's wait changes.

The autoscaler talks to the Kubernetes API with the head pod's ServiceAccount (KubeRay binds its Role, pods
get/list/watch/patch and rayclusters get/patch in the namespace, to it: common/rbac.go). That ServiceAccount mounts
no token (the Ray pods run user code), so the token is projected into the autoscaler container alone
(:func:`token_volume`), at the path Ray's KubeRay node provider reads (autoscaler/_private/kuberay/node_provider.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ALLOCATE_TIMEOUT_ENV = "RAY_AUTOSCALER_RECONCILE_ALLOCATE_STATUS_TIMEOUT_S"
"""Seconds a v2 instance may stay ALLOCATED (pod created, raylet not yet up) before the autoscaler deletes it."""
ALLOCATE_TIMEOUT_S = 1800
"""30 min for a GPU worker pod to get its node and run Ray: EC2 launch and EKS join (KubeRay issue 4226 reports 4-5
min), the node's EFA proof (seconds), the DLC image pull (tens of GB: 4-6 min for 15-20 GB without parallel pull, AWS
ML blog) and Ray start; components/nodes/cold_start.py adds the parts up to at most 765 s, so this leaves room for a slow
pull; beyond it the pod is replaced."""
TOKEN_VOLUME = "autoscaler-token"
TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
"""Where Ray's KubeRay node provider reads ``token`` and ``ca.crt`` (node_provider.py ``load_k8s_secrets``)."""
RESOURCES = {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"cpu": "500m", "memory": "512Mi"}}
"""KubeRay's own default for the sidecar (common/pod.go ``BuildAutoscalerContainer``), requests == limits."""
SECURITY_CONTEXT = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
"""As the head's Ray container (kube.CONTAINER_SECURITY_CONTEXT): the Ray namespace warns on ``restricted``."""


@dataclass(frozen=True)
class AutoscalerArgs:
    """Ray autoscaler v2 settings of a RayCluster whose worker groups scale from zero."""

    idle_timeout_s: int = 1200
    """A worker idle this long is removed (``autoscalerOptions.idleTimeoutSeconds``)."""
    allocate_timeout_s: int = ALLOCATE_TIMEOUT_S
    """How long a worker pod may wait for its node, its EFA proof and its image (:data:`ALLOCATE_TIMEOUT_ENV`)."""

    def __post_init__(self) -> None:
        for name in ("idle_timeout_s", "allocate_timeout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1 or value > 2**31 - 1:
                raise ValueError(f"AutoscalerArgs.{name} must be a whole number of seconds >= 1, got {value!r}")


def autoscaler_env(args: AutoscalerArgs) -> list[dict[str, str]]:
    """The autoscaler container's env: the allocation timeout (module docstring)."""
    return [{"name": ALLOCATE_TIMEOUT_ENV, "value": str(args.allocate_timeout_s)}]


def autoscaler_options(args: AutoscalerArgs) -> dict[str, Any]:
    """``spec.autoscalerOptions`` (KubeRay 1.7 CRD): v2, the idle timeout, the sidecar's env, resources, token."""
    return {
        "version": "v2",
        "idleTimeoutSeconds": args.idle_timeout_s,
        "upscalingMode": "Default",
        "env": autoscaler_env(args),
        "resources": {k: dict(v) for k, v in RESOURCES.items()},
        "securityContext": {**SECURITY_CONTEXT, "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": TOKEN_VOLUME, "mountPath": TOKEN_PATH, "readOnly": True}],
    }


def token_volume() -> dict[str, Any]:
    """A projected token of the head pod's ServiceAccount, with the cluster CA and namespace (the head pod's volume;
    only the autoscaler container mounts it)."""
    return {
        "name": TOKEN_VOLUME,
        "projected": {
            "defaultMode": 0o444,
            "sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
            ],
        },
    }
