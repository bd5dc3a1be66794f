"""Per-node fabric proof: a GPU node proves its own EFA path before Ray may schedule on it (issue 35).

A GPU node joins with the startup taint ``startup-taint.cluster-autoscaler.kubernetes.io/efa-unproven`` (NoSchedule),
so no Ray worker lands on it. This check runs in the node agent's pod on that node (it tolerates the taint) and
decides, from the node itself:

- ``devices``: as many EFA devices under ``/sys/class/infiniband`` as the catalogue gives the instance type;
- ``counters``: every device's port counters readable (what the gate's and each run's witness read);
- ``module``: the efa kernel module loaded (``/sys/module/efa``, not namespaced);
- ``plugin``: the EFA device plugin advertising that many ``vpc.amazonaws.com/efa`` (the node's allocatable);
- ``provider``: libfabric listing the efa provider (``fi_info -p efa``, the DLC image's libfabric).

All pass: it removes the startup taint from its own node only, with a JSON patch whose ``test`` operation makes the
API server refuse the removal unless that exact taint is still at that index (no other taint is ever touched, and
a concurrent change to the taint list fails the patch instead of removing the wrong entry). Anything fails: the
taint stays, the node gets the condition ``EfaFabricProven=False`` naming what failed, and an Event on the Node.
Stdlib only: shipped in the node agent's ConfigMap like the exporter, run by the DLC image (no new image).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Callable

from .efa_counters import read_ports

TAINT_KEY = "startup-taint.cluster-autoscaler.kubernetes.io/efa-unproven"
CONDITION = "EfaFabricProven"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
EXIT_PROVEN, EXIT_UNPROVEN, EXIT_API = 0, 1, 2
"""Exit codes: the node proved itself (taint removed); a check failed (taint kept, condition and Event written); the
API server could not be reached or refused a call (nothing proven)."""


@dataclass(frozen=True)
class Finding:
    check: str
    ok: bool
    detail: str


def fi_info_efa(run: Callable[..., Any] = subprocess.run) -> tuple[bool, str]:
    """(listed, what fi_info said): ``fi_info -p efa`` exits 0 and names the provider when libfabric has it."""
    try:
        r = run(["fi_info", "-p", "efa"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"fi_info could not run: {e}"
    out = (r.stdout or "") + (r.stderr or "")
    listed = r.returncode == 0 and "provider: efa" in out
    return listed, out.strip().splitlines()[0] if out.strip() else f"exit {r.returncode}, no output"


def decide(sysfs: str, expected_devices: int, allocatable: dict[str, str], provider: tuple[bool, str]) -> list[Finding]:
    """The five checks (module docstring) on a sysfs root (``<root>/class/infiniband``, ``<root>/module``)."""
    ports = read_ports(os.path.join(sysfs, "class", "infiniband"))
    found = len(ports)
    out = [Finding("devices", found == expected_devices,
                   f"{found} EFA device(s) ({', '.join(sorted(ports)) or 'none'}); the catalogue says "
                   f"{expected_devices}")]
    errors = [f"{dev}: {path}: {why}" for dev, e in ports.items() for path, why in e["errors"].items()]
    unread = [dev for dev, e in ports.items() if not any({"tx_bytes", "rx_bytes"} <= set(v) for v in e["ports"].values())]
    out.append(Finding("counters", bool(ports) and not errors and not unread,
                       "; ".join(errors + [f"{d}: no tx_bytes/rx_bytes" for d in unread]) or
                       ("no device to read" if not ports else "every port's hw_counters readable")))
    module = os.path.isdir(os.path.join(sysfs, "module", "efa"))
    out.append(Finding("module", module, "efa kernel module loaded" if module else "no /sys/module/efa: the efa "
                       "kernel module is not loaded"))
    advertised = allocatable.get(EFA_RESOURCE)
    out.append(Finding("plugin", advertised == str(expected_devices),
                       f"the node's allocatable {EFA_RESOURCE} is {advertised!r}; expected {expected_devices!r} "
                       "(the EFA device plugin advertises one per device)"))
    out.append(Finding("provider", provider[0], f"fi_info -p efa: {provider[1]}"))
    return out


class Api:
    """The few Kubernetes API calls the check makes, with the pod's projected token (stdlib HTTP)."""

    def __init__(self, base: str, token: str | None = None, ca_file: str | None = None, timeout: float = 10.0):
        self.base = base.rstrip("/")
        self.token = token
        self.ctx = ssl.create_default_context(cafile=ca_file) if base.startswith("https") else None
        self.timeout = timeout

    def call(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        with urllib.request.urlopen(req, timeout=self.timeout, context=self.ctx) as r:
            raw = r.read()
        return json.loads(raw) if raw else None

    @classmethod
    def in_cluster(cls) -> "Api":
        host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        with open(os.path.join(TOKEN_DIR, "token"), encoding="ascii") as f:
            token = f.read().strip()
        return cls(f"https://{host}:{port}", token, os.path.join(TOKEN_DIR, "ca.crt"))


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def remove_startup_taint(api: Api, node: dict[str, Any], key: str = TAINT_KEY) -> bool:
    """Remove taint ``key`` from ``node`` (its own), guarded by a JSON-patch ``test``; False when it has none."""
    taints = (node.get("spec") or {}).get("taints") or []
    index = next((i for i, t in enumerate(taints) if t.get("key") == key), None)
    if index is None:
        return False
    name = node["metadata"]["name"]
    api.call("PATCH", f"/api/v1/nodes/{name}",
             [{"op": "test", "path": f"/spec/taints/{index}", "value": taints[index]},
              {"op": "remove", "path": f"/spec/taints/{index}"}], "application/json-patch+json")
    return True


def report(api: Api, name: str, uid: str | None, findings: list[Finding]) -> None:
    """The Node condition (strategic merge by condition type) and, on failure, a Warning Event on the Node."""
    failed = [f for f in findings if not f.ok]
    reason = "FabricProven" if not failed else "FabricCheckFailed"
    message = ("; ".join(f"{f.check}: {f.detail}" for f in failed) if failed
               else "EFA devices, counters, module, device plugin and libfabric provider checked")[:1024]
    now = _now()
    api.call("PATCH", f"/api/v1/nodes/{name}/status", {"status": {"conditions": [{
        "type": CONDITION, "status": "False" if failed else "True", "reason": reason, "message": message,
        "lastHeartbeatTime": now, "lastTransitionTime": now}]}}, "application/strategic-merge-patch+json")
    if failed:
        api.call("POST", "/api/v1/namespaces/default/events", {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{name}.efa-unproven."},
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": name, **({"uid": uid} if uid else {})},
            "reason": reason, "message": message, "type": "Warning",
            "source": {"component": "ray-efa-eks-node-check", "host": name},
            "firstTimestamp": now, "lastTimestamp": now, "count": 1})


def run_check(api: Api, node_name: str, sysfs: str, expected_devices: int,
              provider: Callable[[], tuple[bool, str]] = fi_info_efa, log: Callable[[str], None] = print) -> int:
    """Check this node, then remove its startup taint or record why not; an exit code (module constants)."""
    try:
        node = api.call("GET", f"/api/v1/nodes/{node_name}")
    except (urllib.error.URLError, OSError, ValueError) as e:
        log(f"[node-check] cannot read node {node_name}: {e}")
        return EXIT_API
    findings = decide(sysfs, expected_devices, (node.get("status") or {}).get("allocatable") or {}, provider())
    for f in findings:
        log(f"[node-check] {'ok  ' if f.ok else 'FAIL'} {f.check}: {f.detail}")
    try:
        report(api, node_name, node["metadata"].get("uid"), findings)
        if all(f.ok for f in findings):
            removed = remove_startup_taint(api, node)
            log(f"[node-check] node {node_name} proven; " + (f"removed taint {TAINT_KEY}" if removed
                                                              else f"no {TAINT_KEY} taint to remove"))
            return EXIT_PROVEN
    except (urllib.error.URLError, OSError, ValueError) as e:
        log(f"[node-check] the API server refused or failed a call for node {node_name}: {e}")
        return EXIT_API
    log(f"[node-check] node {node_name} NOT proven: it keeps {TAINT_KEY}; see its {CONDITION} condition")
    return EXIT_UNPROVEN


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m efacheck.node_check",
                                description="Prove this node's EFA path, then remove its startup taint.")
    p.add_argument("--node", default=os.environ.get("NODE_NAME"), help="this node's name (default $NODE_NAME)")
    p.add_argument("--sysfs", default="/sys", help="sysfs root holding class/infiniband and module (default /sys)")
    p.add_argument("--expect-devices", type=int, required=True, help="EFA devices the catalogue gives the type")
    a = p.parse_args(argv)
    if not a.node:
        p.error("--node or $NODE_NAME is required")
    return run_check(Api.in_cluster(), a.node, a.sysfs, a.expect_devices)


if __name__ == "__main__":
    sys.exit(main())
