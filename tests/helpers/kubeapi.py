"""A small Kubernetes API server for the whole-stack rehearsal: HTTPS on 127.0.0.1, the rehearsal's own pods, nodes
and events, answering with the RBAC and the admission policy the stack renders.

What it implements of the API server, and no more (the calls the stack's containers make):

- authentication: a bearer token the fake issued for a pod's projected ``serviceAccountToken`` volume names the
  ServiceAccount (``system:serviceaccount:<ns>:<name>``) and, as Kubernetes >= 1.30 does in a pod-bound token
  (KEP-4193), the node the pod runs on; no token or an unknown one is 401;
- authorization: RBAC (Role/ClusterRole, RoleBinding/ClusterRoleBinding, as rendered): a request the rules do not
  allow is 403 with the API server's message shape ("... cannot list resource \\"pods\\" in API group \\"\\" in the
  namespace ...");
- admission: every ValidatingAdmissionPolicy rendered, evaluated with :mod:`tests.helpers.vap` (CEL), on UPDATE of
  nodes and nodes/status and CREATE of events; a denial is 422-like ``Invalid`` with the policy's message;
- resources: pods (list with ``labelSelector`` equality terms, get), nodes (get, JSON-patch with ``test``, merge
  patch of ``status.conditions`` keyed by type as the strategic merge of NodeStatus does), events (create).

TLS: a self-signed certificate for IP 127.0.0.1 made with the ``openssl`` CLI; its certificate is the ``ca.crt``
the pods' projected volumes carry (as ``kube-root-ca.crt`` does on a cluster).
"""

from __future__ import annotations

import copy
import json
import ssl
import subprocess
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.helpers import vap
from tests.helpers.autoscaling import json_numbers

GROUPS = {"api": ""}


def json_patch(doc: Any, ops: list[dict[str, Any]]) -> Any:
    """RFC 6902 ``test``/``remove``/``add``/``replace`` on a copy (what node_check sends); a failed test raises."""
    doc = copy.deepcopy(doc)
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].lstrip("/").split("/")]
        parent = doc
        for p in parts[:-1]:
            parent = parent[int(p)] if isinstance(parent, list) else parent.setdefault(p, {})
        last = parts[-1]
        if op["op"] == "test":
            cur = parent[int(last)] if isinstance(parent, list) else parent.get(last)
            if cur != op["value"]:
                raise ValueError(f"test failed at {op['path']}")
        elif op["op"] == "remove":
            del parent[int(last) if isinstance(parent, list) else last]
        elif op["op"] in ("add", "replace"):
            if isinstance(parent, list):
                if last == "-":
                    parent.append(op["value"])
                elif op["op"] == "add":
                    parent.insert(int(last), op["value"])
                else:
                    parent[int(last)] = op["value"]
            else:
                parent[last] = op["value"]
    return doc


class Rbac:
    """The rendered Roles and bindings: may ``user`` do ``verb`` on ``resource`` (``nodes/status`` for a
    subresource) in ``namespace`` (None: cluster-scoped)?"""

    def __init__(self, objects: list[dict[str, Any]]):
        self.roles = {
            (
                o["kind"],
                (o["metadata"].get("namespace") if o["kind"] == "Role" else None),
                o["metadata"]["name"],
            ): o.get("rules") or []
            for o in objects
            if o.get("kind") in ("Role", "ClusterRole")
        }
        self.bindings = [o for o in objects if o.get("kind") in ("RoleBinding", "ClusterRoleBinding")]

    def allows(self, user: str, verb: str, group: str, resource: str, namespace: str | None) -> bool:
        for b in self.bindings:
            if b["kind"] == "RoleBinding" and b["metadata"].get("namespace") != namespace:
                continue
            if not any(
                s.get("kind") == "ServiceAccount" and f"system:serviceaccount:{s.get('namespace')}:{s['name']}" == user
                for s in b.get("subjects") or []
            ):
                continue
            ref = b["roleRef"]
            ns = b["metadata"].get("namespace") if ref["kind"] == "Role" else None
            for rule in self.roles.get((ref["kind"], ns, ref["name"]), []):
                if (
                    (group in rule.get("apiGroups", []) or "*" in rule.get("apiGroups", []))
                    and (resource in rule.get("resources", []) or "*" in rule.get("resources", []))
                    and (verb in rule.get("verbs", []) or "*" in rule.get("verbs", []))
                ):
                    return True
        return False


class KubeApi:
    """The server and its state. ``pods[(ns, name)]``, ``nodes[name]``, ``events``; ``requests`` records every
    call as ``(user, verb, path, status)``."""

    def __init__(self, objects: list[dict[str, Any]], workdir: Path):
        objects = [json_numbers(o) for o in objects]
        self.rbac = Rbac(objects)
        self.policies = [o["spec"] for o in objects if o.get("kind") == "ValidatingAdmissionPolicy"]
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str, str, int]] = []
        self.tokens: dict[str, tuple[str, str | None]] = {}
        self.lock = threading.RLock()
        workdir.mkdir(parents=True, exist_ok=True)
        self.ca = workdir / "ca.crt"
        key = workdir / "tls.key"
        subprocess.run(
            [
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "1",
                "-subj",
                "/CN=kube-apiserver",
                "-addext",
                "subjectAltName=IP:127.0.0.1",
                "-keyout",
                str(key),
                "-out",
                str(self.ca),
            ],
            check=True,
            capture_output=True,
        )
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:  # quiet
                pass

            def _do(self, method: str) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n)) if n else None
                status, out = api.handle(
                    method, self.path, self.headers.get("Authorization", ""), body, self.headers.get("Content-Type", "")
                )
                data = json.dumps(out).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._do("GET")

            def do_PATCH(self) -> None:
                self._do("PATCH")

            def do_POST(self) -> None:
                self._do("POST")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(self.ca), str(key))
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- identities -------------------------------------------------------------------------------------------
    def issue_token(self, namespace: str, service_account: str, node: str | None) -> str:
        """The token the kubelet projects for a pod of ``service_account`` on ``node``."""
        token = f"tok-{len(self.tokens)}-{namespace}-{service_account}"
        self.tokens[token] = (f"system:serviceaccount:{namespace}:{service_account}", node)
        return token

    # -- state the rehearsal drives ---------------------------------------------------------------------------
    def put_node(self, node: dict[str, Any]) -> None:
        with self.lock:
            self.nodes[node["metadata"]["name"]] = node

    def node(self, name: str) -> dict[str, Any]:
        with self.lock:
            return copy.deepcopy(self.nodes[name])

    def put_pod(self, pod: dict[str, Any]) -> None:
        with self.lock:
            self.pods[(pod["metadata"]["namespace"], pod["metadata"]["name"])] = pod

    def delete_pod(self, namespace: str, name: str) -> None:
        with self.lock:
            self.pods.pop((namespace, name), None)

    def refused(self) -> list[tuple[str, str, str, int]]:
        return [r for r in self.requests if r[3] in (401, 403, 422)]

    # -- the API ----------------------------------------------------------------------------------------------
    def handle(self, method: str, raw_path: str, auth: str, body: Any, content_type: str) -> tuple[int, Any]:
        url = urllib.parse.urlsplit(raw_path)
        parts = url.path.strip("/").split("/")
        token = auth.removeprefix("Bearer ").strip()
        who = self.tokens.get(token)
        user = who[0] if who else "system:anonymous"
        status, out = self._route(method, parts, urllib.parse.parse_qs(url.query), who, body, content_type)
        with self.lock:
            self.requests.append((user, method, url.path, status))
        return status, out

    @staticmethod
    def _status(code: int, reason: str, message: str) -> tuple[int, Any]:
        return code, {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "reason": reason,
            "message": message,
            "code": code,
        }

    def _route(
        self,
        method: str,
        parts: list[str],
        query: dict[str, list[str]],
        who: tuple[str, str | None] | None,
        body: Any,
        content_type: str,
    ) -> tuple[int, Any]:
        if who is None:
            return self._status(401, "Unauthorized", "Unauthorized")
        user, node_of_token = who
        if parts[:2] != ["api", "v1"]:
            return self._status(404, "NotFound", "the server could not find the requested resource")
        rest = parts[2:]
        namespace = None
        if rest and rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        resource, name, sub = rest[0], (rest[1] if len(rest) > 1 else None), (rest[2] if len(rest) > 2 else "")
        verb = {"GET": "get" if name else "list", "PATCH": "patch", "POST": "create"}[method]
        rname = resource + (f"/{sub}" if sub else "")
        if not self.rbac.allows(user, verb, "", rname, namespace):
            where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
            return self._status(
                403,
                "Forbidden",
                f'{rname} is forbidden: User "{user}" cannot {verb} resource "{resource}" in API group ""{where}',
            )
        with self.lock:
            if resource == "pods":
                return self._pods(namespace, name, query)
            if resource == "nodes":
                return self._nodes(method, name, sub, user, node_of_token, body, content_type)
            if resource == "events" and method == "POST":
                req = vap.request(user, "CREATE", "events", body, node_name=node_of_token)
                denied = self._admit(req)
                if denied:
                    return denied
                self.events.append(body)
                return 201, body
        return self._status(404, "NotFound", f"{rname} not served by the rehearsal's API")

    def _admit(self, request: dict[str, Any]) -> tuple[int, Any] | None:
        for spec in self.policies:
            ok, messages = vap.admit(spec, request)
            if not ok:
                return self._status(422, "Invalid", "ValidatingAdmissionPolicy denied request: " + "; ".join(messages))
        return None

    def _pods(self, namespace: str | None, name: str | None, query: dict[str, list[str]]) -> tuple[int, Any]:
        if name:
            pod = self.pods.get((namespace, name))
            return (200, copy.deepcopy(pod)) if pod else self._status(404, "NotFound", f'pods "{name}" not found')
        terms = [t.split("=", 1) for s in query.get("labelSelector", []) for t in s.split(",") if "=" in t]
        fields = [t.split("=", 1) for s in query.get("fieldSelector", []) for t in s.split(",") if "=" in t]
        items = [
            copy.deepcopy(p)
            for (ns, _), p in sorted(self.pods.items())
            if ns == namespace
            and all((p["metadata"].get("labels") or {}).get(k) == v for k, v in terms)
            and all(k == "spec.nodeName" and p["spec"].get("nodeName") == v for k, v in fields)
        ]
        return 200, {"kind": "PodList", "apiVersion": "v1", "items": items}

    def _nodes(
        self,
        method: str,
        name: str | None,
        sub: str,
        user: str,
        node_of_token: str | None,
        body: Any,
        content_type: str,
    ) -> tuple[int, Any]:
        old = self.nodes.get(name or "")
        if old is None:
            return self._status(404, "NotFound", f'nodes "{name}" not found')
        if method == "GET":
            return 200, copy.deepcopy(old)
        if "json-patch" in content_type:
            try:
                new = json_patch(old, body)
            except (ValueError, KeyError, IndexError) as e:
                return self._status(
                    422, "Invalid", f"the server rejected our request due to an error in our request: {e}"
                )
        else:  # merge patch of status.conditions (strategic merge keys conditions by type)
            new = copy.deepcopy(old)
            conds = {c["type"]: c for c in (new.get("status") or {}).get("conditions") or []}
            for c in ((body or {}).get("status") or {}).get("conditions") or []:
                conds[c["type"]] = {**conds.get(c["type"], {}), **c}
            new.setdefault("status", {})["conditions"] = list(conds.values())
        denied = self._admit(vap.request(user, "UPDATE", "nodes", new, old, subresource=sub, node_name=node_of_token))
        if denied:
            return denied
        self.nodes[name] = new
        return 200, copy.deepcopy(new)
