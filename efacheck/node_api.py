"""The node check's Kubernetes side: the few API calls it makes with the pod's projected token (stdlib HTTP), and
what it writes on its own Node: the ``EfaFabricProven`` condition, a Warning Event, and the startup taint removed
or put back, each by a guarded patch."""

from __future__ import annotations

import datetime as dt
import json
import os
import ssl
import urllib.request
from typing import Any

from .node_findings import Finding

TAINT_KEY = "startup-taint.cluster-autoscaler.kubernetes.io/efa-unproven"
CONDITION = "EfaFabricProven"
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
STARTUP_TAINT = {"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"}
"""The taint as the node group puts it on a new node (components/nodes/node_groups.py ``startup_taint``), and as it is put
back after a provider failure."""
PROVIDER_FAILED = "ProviderCheckFailed"
"""The condition reason that records a worker's failed provider check: the node stays tainted while it is there."""


class Api:
    """The few Kubernetes API calls the check makes, with the pod's projected token (stdlib HTTP)."""

    def __init__(
        self,
        base: str,
        token: str | None = None,
        ca_file: str | None = None,
        timeout: float = 10.0,
        token_file: str | None = None,
    ):
        self.base = base.rstrip("/")
        self.token = token
        self.token_file = token_file
        """Read again on every call: the kubelet rotates a projected token (an hour by default) under a loop that
        runs for the node's life."""
        self.ctx = ssl.create_default_context(cafile=ca_file) if base.startswith("https") else None
        self.timeout = timeout

    def call(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        token = self.token
        if self.token_file:
            with open(self.token_file, encoding="ascii") as f:
                token = f.read().strip()
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        with urllib.request.urlopen(req, timeout=self.timeout, context=self.ctx) as r:
            raw = r.read()
        return json.loads(raw) if raw else None

    @classmethod
    def in_cluster(cls, token_dir: str | None = None) -> "Api":
        token_dir = token_dir or TOKEN_DIR
        host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        return cls(
            f"https://{host}:{port}",
            None,
            os.path.join(token_dir, "ca.crt"),
            token_file=os.path.join(token_dir, "token"),
        )


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def remove_startup_taint(api: Api, node: dict[str, Any], key: str = TAINT_KEY) -> bool:
    """Remove taint ``key`` from ``node`` (its own), guarded by a JSON-patch ``test``; False when it has none."""
    taints = (node.get("spec") or {}).get("taints") or []
    index = next((i for i, t in enumerate(taints) if t.get("key") == key), None)
    if index is None:
        return False
    name = node["metadata"]["name"]
    api.call(
        "PATCH",
        f"/api/v1/nodes/{name}",
        [
            {"op": "test", "path": f"/spec/taints/{index}", "value": taints[index]},
            {"op": "remove", "path": f"/spec/taints/{index}"},
        ],
        "application/json-patch+json",
    )
    return True


def _message(findings: list[Finding]) -> tuple[str, str, str]:
    """(condition status, reason, message) of a set of findings."""
    failed = [f for f in findings if not f.ok]
    if not failed:
        return (
            "True",
            "FabricProven",
            "EFA devices, counters, module, device plugin and libfabric's efa provider checked",
        )
    return "False", "FabricCheckFailed", "; ".join(f"{f.check}: {f.detail}" for f in failed)[:1024]


def current_condition(node: dict[str, Any]) -> dict[str, Any] | None:
    """The node's ``EfaFabricProven`` condition, if it has one."""
    return next((c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == CONDITION), None)


def report(
    api: Api, name: str, uid: str | None, findings: list[Finding], previous: dict[str, Any] | None = None
) -> bool:
    """Write the Node condition (strategic merge by condition type) when it changed from ``previous``, and a Warning
    Event on the Node when a check fails and the condition was not already this failure; True when it wrote."""
    return write_condition(api, name, uid, *_message(findings), previous)


def write_condition(
    api: Api, name: str, uid: str | None, status: str, reason: str, message: str, previous: dict[str, Any] | None
) -> bool:
    """Set the node's EFA condition (a strategic-merge patch of its status); False when ``previous`` already says
    the same, so an unchanged node is not written every interval."""
    if previous and (previous.get("status"), previous.get("reason"), previous.get("message")) == (
        status,
        reason,
        message,
    ):
        return False  # nothing new: no write every interval
    now = _now()
    api.call(
        "PATCH",
        f"/api/v1/nodes/{name}/status",
        {
            "status": {
                "conditions": [
                    {
                        "type": CONDITION,
                        "status": status,
                        "reason": reason,
                        "message": message,
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                    }
                ]
            }
        },
        "application/strategic-merge-patch+json",
    )
    if status == "False":
        api.call(
            "POST",
            "/api/v1/namespaces/default/events",
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"generateName": f"{name}.efa-unproven."},
                "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": name, **({"uid": uid} if uid else {})},
                "reason": reason,
                "message": message,
                "type": "Warning",
                "source": {"component": "ray-efa-eks-node-check", "host": name},
                "firstTimestamp": now,
                "lastTimestamp": now,
                "count": 1,
            },
        )
    return True


def add_startup_taint(api: Api, node: dict[str, Any]) -> bool:
    """Put :data:`STARTUP_TAINT` back on ``node`` (its own) with one JSON patch; False when it already has it.

    The ``test`` of the whole list makes the API server refuse the patch if the taints changed since the read, so
    the patch adds exactly one taint to exactly the list that was read (the admission policy checks the same)."""
    taints = (node.get("spec") or {}).get("taints")
    if any(t.get("key") == TAINT_KEY for t in taints or []):
        return False
    ops = (
        [
            {"op": "test", "path": "/spec/taints", "value": taints},
            {"op": "add", "path": "/spec/taints/-", "value": dict(STARTUP_TAINT)},
        ]
        if taints
        else [{"op": "add", "path": "/spec/taints", "value": [dict(STARTUP_TAINT)]}]
    )
    api.call("PATCH", f"/api/v1/nodes/{node['metadata']['name']}", ops, "application/json-patch+json")
    return True


def on_record(previous: dict[str, Any] | None) -> bool:
    """A worker's provider failure is recorded on the node (its condition's reason)."""
    return bool(previous) and previous.get("status") == "False" and previous.get("reason") == PROVIDER_FAILED
