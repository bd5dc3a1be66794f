"""The Ray worker pods on one node, read for the one thing the node agent cannot check itself.

Each Ray worker pod's init container ``efa-provider-check`` runs ``fi_info -p efa -t FI_EP_RDM`` on the worker's own
EFA device (components/ray/raycluster.py ``PROVIDER_CHECK``); the node agent holds no device, so it reads that result
from the pod's status instead (efacheck/node_check.py puts the node's startup taint back on a failure).

KubeRay labels every worker pod it creates ``ray.io/node-type=worker`` (ray-operator v1.7.0
``controllers/ray/utils/constant.go`` ``RayNodeTypeLabelKey``, ``apis/ray/v1/raycluster_types.go`` ``WorkerNode``,
set in ``controllers/ray/common/pod.go`` ``labelPod``). Stdlib only: shipped in the node agent's ConfigMap.
"""

from __future__ import annotations

import urllib.parse
from typing import Any, Protocol

PROVIDER_CONTAINER = "efa-provider-check"
"""The Ray worker pod's init container that runs ``fi_info -p efa`` on the worker's EFA device
(components/ray/raycluster.py ``PROVIDER_CHECK``; a test keeps them equal)."""
WORKER_SELECTOR = "ray.io/node-type=worker"
"""KubeRay's label on every worker pod (module docstring; a test keeps it equal to the label the stack's
PodMonitor selects workers by, components/observability/observability.py ``RAY_NODE_TYPE``)."""


class Caller(Protocol):
    """What :func:`list_workers` needs of node_check's ``Api``: one call, the decoded JSON answer."""

    def call(self, method: str, path: str, body: Any = None, content_type: str = ...) -> Any: ...


def list_workers(api: Caller, node_name: str, namespace: str) -> list[dict[str, Any]]:
    """The Ray worker pods on ``node_name``: one list in ``namespace`` by ``spec.nodeName`` (a field selector the API
    server answers for pods) and KubeRay's worker label. A pod of another node is dropped here too, so an API server
    that ignored the selector could not make another node's failure count."""
    query = urllib.parse.urlencode({"fieldSelector": f"spec.nodeName={node_name}", "labelSelector": WORKER_SELECTOR})
    items = (api.call("GET", f"/api/v1/namespaces/{namespace}/pods?{query}") or {}).get("items") or []
    return [p for p in items if (p.get("spec") or {}).get("nodeName") == node_name]


def provider_failures(pods: list[dict[str, Any]]) -> list[str]:
    """One line per pod whose :data:`PROVIDER_CONTAINER` init container terminated with a non-zero exit code, now
    (``state``: with ``restartPolicy: Never`` the pod is ``Failed``) or the time before (``lastState``: restarting in
    ``Init:CrashLoopBackOff`` under another restart policy). A check still running, waiting for its first run, or
    exited 0 is no failure, and any other init container is not this check."""
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        for cs in (pod.get("status") or {}).get("initContainerStatuses") or []:
            if cs.get("name") != PROVIDER_CONTAINER:
                continue
            for which in ("state", "lastState"):
                term = (cs.get(which) or {}).get("terminated") or {}
                code = term.get("exitCode")
                if isinstance(code, int) and code != 0:
                    said = " ".join(str(term.get("message") or "").split())[:200]
                    out.append(
                        f"pod {meta.get('namespace', '?')}/{meta.get('name', '?')}: init container "
                        f"{PROVIDER_CONTAINER} exited {code} (fi_info -p efa on the worker's own EFA device)"
                        + (f": {said}" if said else "")
                    )
                    break
    return out
