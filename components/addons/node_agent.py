"""NodeAgent: the one pod per EFA node that reads the host's fabric, and the only hostPath user of the stack.

One DaemonSet, built once, with two containers:

- ``efa-exporter`` (efacheck/efa_exporter.py): every EFA port ``hw_counters`` file in the Prometheus
  text format. No API token.
- ``fabric-proof`` (efacheck/node_check.py): proves the node's EFA path and removes the node's startup
  taint :data:`FABRIC_STARTUP_TAINT`, again every minute (a node group update can put the taint back). It alone
  mounts a projected service account token (the pod mounts none); what that token may do is :func:`rbac_rules`
  narrowed by the ValidatingAdmissionPolicy :func:`own_node_policy` to this one node, this one taint and this one
  condition (docs/security.md, "The node agent's token"). Ray pods read their own node's counters through a node-local
Service (``internalTrafficPolicy: Local``: a client pod's traffic to the ClusterIP goes only to an endpoint on its
own node, and is dropped when that node has none) instead of mounting the host's ``/sys``, so the Ray namespace can
enforce the Pod Security ``baseline`` level.

Why hostPath at all: the kernel creates an RDMA port's ``hw_counters`` only in the init network namespace's view
of sysfs (drivers/infiniband/core/sysfs.c ``setup_port``: ``if (port_num && is_full_dev)``; Linux a1ecb30f9085), so
a pod's own ``/sys`` has none. A read-only bind of the host's ``/sys/class/infiniband`` *and* ``/sys/devices`` (the
class entries are relative symlinks into ``../../devices``) is that view; nothing else of ``/sys`` is mounted, and
neither tree has sub-mounts (cgroupfs, bpffs, debugfs, securityfs live under /sys/fs and /sys/kernel), so
``readOnly`` holds all the way down. hostPath is allowed only at the ``privileged`` Pod Security level, so the agent
has its own namespace labelled ``pod-security.kubernetes.io/enforce: privileged`` in which nothing else runs; the pod
itself asks for nothing privileged: non-root (65534), read-only root filesystem, all capabilities dropped, no
privilege escalation, RuntimeDefault seccomp, no host network/PID/IPC, no API token (``automountServiceAccountToken:
false`` on the service account and the pod).

The code ships as the gate ships efacheck (components/payload.py): the modules it needs (stdlib only, a test holds
them to it) in a ConfigMap, run by a small public slim Python image pinned by digest (the stack's
``nodeAgentImage``), not the multi-GB DLC: the proof runs while the DLC is still being pulled
(components/addons/image_prepull.py). Such an image has no libfabric, so the proof leaves the provider check to each Ray
worker's ``efa-provider-check`` init container (the DLC's own ``fi_info -p efa``, with the device; a failure puts the
taint back) unless ``image_has_libfabric``. ``/sys/module`` is not namespaced, so the module version is the
container's own ``/sys/module/efa/version``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from .. import payload
from ..network.network_policies import allow_all_egress
from ..kube import (
    FABRIC_STARTUP_TAINT,
    GPU_TOLERATION,
    check_guaranteed,
    container_security,
    node_affinity,
    pod_resources,
    pod_security,
)

NAMESPACE = "efa-node-agent"
"""The agent's own namespace (Pod Security ``privileged``: hostPath); nothing else runs there."""
NAME = "node-agent"
SERVICE_NAME = "efa-exporter"
EXPORTER_PORT = 9810
"""efacheck/efa_exporter.py ``DEFAULT_PORT`` (the library never imports efacheck; a test keeps them equal)."""
APP_LABELS = {"app.kubernetes.io/name": "efa-node-agent", "app.kubernetes.io/part-of": "ray-efa-eks"}
HOST_SYSFS = "/host/sys"
"""Where the container sees the host's sysfs trees (the exporter's ``--sysfs``)."""
HOST_SYSFS_PATHS = ("/sys/class/infiniband", "/sys/devices")
"""Exactly what the kernel layout needs: the class entries and the device tree they point into."""
MODULE_VERSION_FILE = "/sys/module/efa/version"
CODE_MOUNT = "/opt/ray-efa-eks"
SHIPPED = (
    "__init__.py",
    "cli.py",
    "efa_counters.py",
    "efa_exporter.py",
    "exit_codes.py",
    "node_check.py",
    "node_api.py",
    "node_findings.py",
    "worker_pods.py",
)
"""The efacheck modules the exporter and the fabric proof need (stdlib only)."""
EXPORTER_MODULE = f"{payload.ROOT}.efacheck.efa_exporter"
PROOF_MODULE = f"{payload.ROOT}.efacheck.node_check"
CODE_VOLUME = "code"
PROOF_CONTAINER = "fabric-proof"
FABRIC_CONDITION = "EfaFabricProven"
"""efacheck/node_check.py ``CONDITION`` (a test keeps them equal)."""
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
"""Where the proof container's projected token is mounted (efacheck/node_check.py ``TOKEN_DIR``)."""
TOKEN_EXPIRATION_S = 3600
"""The projected token's lifetime; the kubelet rotates it, and node_check reads the file on every call."""
EVENTS_NAMESPACE = "default"
"""Where node_check writes its Node Events (a Node is cluster-scoped; ``kubectl describe node`` finds them there)."""
POLICY_NAME = "ray-efa-eks-fabric-proof-own-node"
PRIVILEGED_NAMESPACE_LABELS = {
    "pod-security.kubernetes.io/enforce": "privileged",
    "pod-security.kubernetes.io/enforce-version": "latest",
}
ROLLOUT_TIMEOUT_S = 1200
"""pulumi-kubernetes awaits a DaemonSet's rollout (kstatus, since pulumi/pulumi-kubernetes#2953); the first pod on a
new GPU node waits for the node's launch and join, then its image (the stack's: a slim Python image, not the DLC;
an agent run from the DLC would wait for its multi-GB pull)."""


def exporter_url(namespace: str = NAMESPACE, port: int = EXPORTER_PORT) -> str:
    """The node-local Service's URL as a pod sees it (cluster DNS): its own node's exporter."""
    return f"http://{SERVICE_NAME}.{namespace}.svc.cluster.local:{port}/metrics"


@dataclass
class NodeAgentArgs:
    """Inputs of :class:`NodeAgent`."""

    provider: k8s.Provider
    """Kubernetes provider of the cluster the DaemonSet runs in."""
    image: str
    """The agent's image: ``python`` (3.9 or newer) and nothing else is needed; the stack's is a slim Python image
    pinned by digest."""
    instance_types: list[str]
    """The stack's EFA GPU instance types: with our GPU role label, the nodes the agent runs on."""
    namespace: str = NAMESPACE
    """The agent's own namespace, at Pod Security ``privileged`` (its exporter mounts host ``/sys``)."""
    resources: dict[str, dict[str, str]] = field(default_factory=lambda: pod_resources("100m", "128Mi"))
    """Requests == limits (Guaranteed): a Python stdlib HTTP server reading a few dozen files per scrape."""
    startup_taints: list[str] = field(default_factory=lambda: [FABRIC_STARTUP_TAINT])
    """Startup taint keys the agent tolerates (any effect), so it runs on a node still being proven."""
    network_policy: bool = True
    """Admit traffic to the exporter only from ``allowed_namespaces`` (VPC CNI NetworkPolicy enforcement on)."""
    allowed_namespaces: list[str] = field(default_factory=list)
    """Namespaces whose pods may read the exporter (the Ray namespace; a monitoring namespace adds itself)."""
    efa_devices: dict[str, int] = field(default_factory=dict)
    """Instance type -> EFA devices the catalogue gives it (``InstanceType.max_efa_interfaces``); with it the pod
    runs the ``fabric-proof`` container, which removes :data:`FABRIC_STARTUP_TAINT` (empty: exporter only)."""
    proof_resources: dict[str, dict[str, str]] = field(default_factory=lambda: pod_resources("100m", "160Mi"))
    """Requests == limits: a stdlib loop plus one ``fi_info -l`` a minute (libfabric loads its providers)."""
    proof_interval_s: int = 60
    """Seconds between two fabric proofs on a node (``--interval`` of efacheck/node_check.py)."""
    image_has_libfabric: bool = False
    """The image has libfabric's ``fi_info`` (a DLC does): the proof also checks that it lists the efa provider."""
    workers_namespace: str | None = None
    """The Ray namespace: with it the proof also reads the Ray worker pods on its node there (a Role with ``list``
    on pods, :meth:`NodeAgent.grant_worker_read`) and puts the startup taint back when a worker's
    ``efa-provider-check`` init container failed."""
    kubernetes_version: str | None = None
    """The cluster's Kubernetes version: the own-node policy holds every Node field that version's schema has
    (:func:`node_fields`; None: the fields of the oldest version the stack accepts)."""
    extra_containers: list[dict[str, Any]] = field(default_factory=list)
    """More containers in the agent pod."""
    extra_volumes: list[dict[str, Any]] = field(default_factory=list)
    """More volumes in the agent pod (for ``extra_containers``)."""
    depends_on: list[pulumi.Resource] = field(default_factory=list)
    """What the DaemonSet waits for: the GPU node group, so Pulumi's rollout await counts the nodes' pods (a
    DaemonSet created before its nodes joined is "ready" with none)."""


def code_files() -> dict[str, str]:
    """The ConfigMap's payload (components/payload.py): ``ray_efa_eks/__init__.py`` and the SHIPPED modules."""
    return payload.build({"efacheck": SHIPPED})


def host_sysfs_volumes() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, volumeMounts): the host's HOST_SYSFS_PATHS read-only under HOST_SYSFS.

    Type ``Directory``: on an EFA node both exist before any pod runs (the node selector keeps the agent off
    others); a node without them fails the pod visibly instead of serving an empty tree."""
    vols, mounts = [], []
    for path in HOST_SYSFS_PATHS:
        name = "host-sys-" + path.rsplit("/", 1)[-1]
        vols.append({"name": name, "hostPath": {"path": path, "type": "Directory"}})
        mounts.append({"name": name, "mountPath": HOST_SYSFS + path[len("/sys") :], "readOnly": True})
    return vols, mounts


def exporter_container(image: str, resources: dict[str, dict[str, str]]) -> dict[str, Any]:
    check_guaranteed(resources, "node agent efa-exporter container")
    _, mounts = host_sysfs_volumes()
    probe = {"httpGet": {"path": "/healthz", "port": "metrics"}, "periodSeconds": 10, "timeoutSeconds": 3}
    return {
        "name": "efa-exporter",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": [
            "python",
            "-m",
            EXPORTER_MODULE,
            "--sysfs",
            HOST_SYSFS,
            "--port",
            str(EXPORTER_PORT),
            "--module-version-file",
            MODULE_VERSION_FILE,
        ],
        "workingDir": CODE_MOUNT,
        "env": [
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "PYTHONPATH", "value": CODE_MOUNT},
            {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
        ],
        "ports": [{"name": "metrics", "containerPort": EXPORTER_PORT, "protocol": "TCP"}],
        "readinessProbe": probe,
        "livenessProbe": {**probe, "failureThreshold": 6},
        "resources": resources,
        "securityContext": container_security(),
        "volumeMounts": [
            payload.mount(CODE_VOLUME, CODE_MOUNT, read_only=True),
            {"name": "tmp", "mountPath": "/tmp"},
            *mounts,
        ],
    }


def pod_spec(args: NodeAgentArgs, configmap_name: str, files: dict[str, str]) -> dict[str, Any]:
    """The agent's pod spec (validated against the Kubernetes schema and the Pod Security Standards in tests)."""
    if not args.instance_types:
        raise ValueError(
            "NodeAgent: instance_types is empty; give the stack's EFA GPU instance types (e.g. ['g6.12xlarge'])"
        )
    vols, _ = host_sysfs_volumes()
    return {
        "serviceAccountName": NAME,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 10,
        "securityContext": pod_security(),
        "affinity": node_affinity(args.instance_types),
        "tolerations": [dict(GPU_TOLERATION)] + [{"key": k, "operator": "Exists"} for k in args.startup_taints],
        "containers": [
            exporter_container(args.image, args.resources),
            *([proof_container(args)] if args.efa_devices else []),
            *args.extra_containers,
        ],
        "volumes": [
            payload.volume(CODE_VOLUME, configmap_name, files),
            {"name": "tmp", "emptyDir": {"sizeLimit": "16Mi"}},
            *vols,
            *([token_volume()] if args.efa_devices else []),
            *args.extra_volumes,
        ],
    }


def token_volume() -> dict[str, Any]:
    """The pod's service account token, projected (bound to the pod, rotated by the kubelet) with the API server's
    CA: mounted only into the proof container."""
    return {
        "name": "fabric-proof-token",
        "projected": {
            "sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": TOKEN_EXPIRATION_S}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            ]
        },
    }


def proof_container(args: NodeAgentArgs) -> dict[str, Any]:
    """efacheck/node_check.py as a loop, reading the same host trees as the exporter plus its own /sys/module."""
    check_guaranteed(args.proof_resources, "node agent fabric-proof container")
    _, mounts = host_sysfs_volumes()
    expect = ",".join(f"{t}={n}" for t, n in sorted(args.efa_devices.items()))
    return {
        "name": PROOF_CONTAINER,
        "image": args.image,
        "imagePullPolicy": "IfNotPresent",
        "command": [
            "python",
            "-m",
            PROOF_MODULE,
            "--sysfs",
            HOST_SYSFS,
            "--module-root",
            "/sys/module",
            "--expect-devices",
            expect,
            "--interval",
            str(args.proof_interval_s),
            "--token-dir",
            TOKEN_DIR,
            *([] if args.image_has_libfabric else ["--skip-provider"]),
            *(["--workers-namespace", args.workers_namespace] if args.workers_namespace else []),
        ],
        "workingDir": CODE_MOUNT,
        "env": [
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "PYTHONPATH", "value": CODE_MOUNT},
            {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
            {"name": "PYTHONUNBUFFERED", "value": "1"},
        ],
        "resources": args.proof_resources,
        "securityContext": container_security(),
        "volumeMounts": [
            payload.mount(CODE_VOLUME, CODE_MOUNT, read_only=True),
            {"name": "tmp", "mountPath": "/tmp"},
            *mounts,
            {"name": "fabric-proof-token", "mountPath": TOKEN_DIR, "readOnly": True},
        ],
    }


def rbac_rules() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(ClusterRole rules, Role rules in :data:`EVENTS_NAMESPACE`): what the proof's token may do by RBAC alone.

    Nodes are cluster-scoped and their names are not known in advance, so RBAC cannot say "my node"
    (``resourceNames`` is a fixed list): get and patch on every node and its status, create Events in one
    namespace. The ValidatingAdmissionPolicy (:func:`own_node_policy`) cuts that down to the own node."""
    return (
        [
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},
            {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
        ],
        [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}],
    )


WORKER_POD_RULES = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
"""The Role in the Ray namespace: ``list`` pods, nothing else (no ``get``, ``watch``, logs, exec or any write).

RBAC cannot make the list carry ``fieldSelector=spec.nodeName=<own node>``: a rule has no selector, and admission
(where the policy below narrows the writes) never sees a read. Kubernetes 1.31+ lets an *authorizer* see a list's
selectors (KEP-4601, ``AuthorizeWithSelectors``), but only webhook and structured authorizers use them, and EKS runs
neither for us. So by RBAC the token may read every pod in the Ray namespace: specs and status (env values set
inline, never a Secret's value: the Ray token is a ``secretKeyRef``); node_check asks only for its own node's."""


def service_account_user(namespace: str = NAMESPACE) -> str:
    return f"system:serviceaccount:{namespace}:{NAME}"


NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
"""The bound token's node (KEP-4193 ``ServiceAccountTokenPodNodeInfo``: beta and on by default in Kubernetes 1.30,
GA in 1.32): the API server puts the pod's ``spec.nodeName`` into the token it issues for the pod, and the
authenticator hands it to admission as ``request.userInfo.extra``."""


NODE_FIELDS: dict[str, tuple[str, ...]] = {
    "metadata": (
        "annotations",
        "creationTimestamp",
        "deletionGracePeriodSeconds",
        "deletionTimestamp",
        "finalizers",
        "generateName",
        "labels",
        "name",
        "namespace",
        "ownerReferences",
        "selfLink",
        "uid",
    ),
    "spec": ("configSource", "externalID", "podCIDR", "podCIDRs", "providerID", "taints", "unschedulable"),
    "status": (
        "addresses",
        "allocatable",
        "capacity",
        "conditions",
        "config",
        "daemonEndpoints",
        "features",
        "images",
        "nodeInfo",
        "phase",
        "runtimeHandlers",
        "volumesAttached",
        "volumesInUse",
    ),
}
"""The Node's fields the own-node policy holds equal (but the taint and the condition it may write), as the Node
schema of Kubernetes 1.32 lists them (ObjectMeta, NodeSpec, NodeStatus); a test pins the list to the schema of every
version the stack accepts. Not held: ``managedFields``, ``resourceVersion`` and ``generation``, which the API server
itself writes on every request (the field manager runs before admission). A field a version lacks must not be named
(the policy's CEL is type-checked against that version's schema, and an expression that does not compile fails the
request under ``failurePolicy: Fail``), hence :data:`NODE_FIELDS_SINCE`."""
NODE_FIELDS_SINCE: dict[tuple[int, int], dict[str, tuple[str, ...]]] = {(1, 35): {"status": ("declaredFeatures",)}}
"""Node fields a later Kubernetes version adds (NodeStatus ``declaredFeatures`` from 1.35)."""


def node_fields(kubernetes_version: str | None = None) -> dict[str, tuple[str, ...]]:
    """:data:`NODE_FIELDS` plus what ``kubernetes_version`` (``1.35``; None: the oldest the stack accepts) adds."""
    out = {k: list(v) for k, v in NODE_FIELDS.items()}
    if kubernetes_version:
        have = tuple(int(p) for p in kubernetes_version.split(".")[:2])
        for since, more in sorted(NODE_FIELDS_SINCE.items()):
            if have >= since:
                for part, names in more.items():
                    out[part] += names
    return {k: tuple(sorted(v)) for k, v in out.items()}


def _same(part: str, key: str) -> str:
    """CEL: ``object.<part>.<key>`` and ``oldObject``'s are both absent or equal."""
    o, old = f"object.{part}.{key}", f"oldObject.{part}.{key}"
    return f"(has({o}) == has({old}) && (!has({o}) || {o} == {old}))"


def _same_part(part: str, fields: dict[str, tuple[str, ...]], allowed: str = "") -> str:
    """CEL: every field of ``object.<part>`` but ``allowed`` equals ``oldObject``'s (a missing part counts as empty)."""
    keys = " && ".join(_same(part, k) for k in fields[part] if k != allowed)
    return f"(has(object.{part}) == has(oldObject.{part}) && (!has(object.{part}) || ({keys})))"


def own_node_policy(
    namespace: str = NAMESPACE,
    taint: str = FABRIC_STARTUP_TAINT,
    condition: str = FABRIC_CONDITION,
    kubernetes_version: str | None = None,
) -> dict[str, Any]:
    """ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1, GA in Kubernetes 1.30): the node agent's token may
    change only the node its pod runs on, and there exactly one thing per request: remove ``taint`` or add exactly it
    back (``<taint>=true:NoSchedule``, after a Ray worker's provider check failed), or write the ``condition`` in the
    status. Every other field of the old Node (:func:`node_fields`: metadata with its ownerReferences and
    finalizers, the rest of the spec, addresses, daemonEndpoints, nodeInfo, images...) must stay equal, so the token
    can neither hand the Node to the garbage collector nor rewrite the addresses the API server dials. Events only
    about that node."""
    fields = node_fields(kubernetes_version)

    def taints(o: str) -> str:
        return f"(has({o}.spec.taints) ? {o}.spec.taints : [])"

    def conds(o: str) -> str:
        return f"(has({o}.status.conditions) ? {o}.status.conditions : [])"

    node = "request.resource.resource == 'nodes'"
    same_meta = _same_part("metadata", fields)
    removes = (
        f"({taints('oldObject')}.exists(t, t.key == '{taint}') && "
        f"{taints('object')} == {taints('oldObject')}.filter(t, t.key != '{taint}'))"
    )
    # put back after a Ray worker's provider check failed: the old list plus exactly one NoSchedule taint, value true
    adds = (
        f"(!{taints('oldObject')}.exists(t, t.key == '{taint}') && "
        f"size({taints('object')}) == size({taints('oldObject')}) + 1 && "
        f"{taints('object')}.filter(t, t.key != '{taint}') == {taints('oldObject')} && "
        f"{taints('object')}.exists(t, t.key == '{taint}' && t.effect == 'NoSchedule' && "
        "has(t.value) && t.value == 'true' && !has(t.timeAdded)))"
    )
    return {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": ["UPDATE"],
                    "resources": ["nodes", "nodes/status"],
                },
                {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["events"]},
            ]
        },
        "matchConditions": [
            {
                "name": "the-node-agent",
                "expression": f"request.userInfo.username == '{service_account_user(namespace)}'",
            }
        ],
        "variables": [
            {
                "name": "own",
                "expression": f"'{NODE_NAME_EXTRA}' in request.userInfo.extra && "
                f"size(request.userInfo.extra['{NODE_NAME_EXTRA}']) == 1 ? "
                f"request.userInfo.extra['{NODE_NAME_EXTRA}'][0] : ''",
            }
        ],
        "validations": [
            {
                "expression": "variables.own != ''",
                "reason": "Forbidden",
                "message": f"the token names no node ({NODE_NAME_EXTRA}: Kubernetes >= 1.30 puts it in a pod's token)",
            },
            {
                "expression": f"!({node}) || object.metadata.name == variables.own",
                "reason": "Forbidden",
                "message": "the node agent may change only the node its pod runs on",
            },
            {
                "expression": f"!({node} && request.subResource == '') || "
                f"(({removes} || {adds}) && {same_meta} && {_same_part('spec', fields, 'taints')} && "
                f"{_same_part('status', fields)})",
                "reason": "Forbidden",
                "message": f"on its node the node agent may only remove the taint {taint} or put it back",
            },
            {
                "expression": f"!({node} && request.subResource == 'status') || "
                f"({conds('object')}.filter(c, c.type != '{condition}') == "
                f"{conds('oldObject')}.filter(c, c.type != '{condition}') && "
                f"{_same_part('status', fields, 'conditions')} && {same_meta} && "
                f"{_same_part('spec', fields)})",
                "reason": "Forbidden",
                "message": f"in its node's status the node agent may only write {condition}",
            },
            {
                "expression": "request.resource.resource != 'events' || "
                "(object.involvedObject.kind == 'Node' && object.involvedObject.name == variables.own)",
                "reason": "Forbidden",
                "message": "the node agent may only write Events about its own node",
            },
        ],
    }


def service_spec() -> dict[str, Any]:
    """ClusterIP, node-local: a pod reaches only its own node's exporter (never another node's counters)."""
    return {
        "selector": dict(APP_LABELS),
        "internalTrafficPolicy": "Local",
        "ports": [{"name": "metrics", "port": EXPORTER_PORT, "targetPort": "metrics", "protocol": "TCP"}],
    }


def network_policy_spec(namespaces: list[str]) -> dict[str, Any]:
    """Ingress to the exporter port from the named namespaces only."""
    return {
        "podSelector": {"matchLabels": dict(APP_LABELS)},
        "policyTypes": ["Ingress"],
        "ingress": [
            {
                "from": [
                    {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}
                    for ns in sorted(set(namespaces))
                ],
                "ports": [{"protocol": "TCP", "port": EXPORTER_PORT}],
            }
        ],
    }


class NodeAgent(pulumi.ComponentResource):
    """Namespace (Pod Security privileged), ServiceAccount (no token), code ConfigMap, DaemonSet, node-local
    Service and its NetworkPolicy."""

    daemonset: k8s.apps.v1.DaemonSet
    namespace: str
    exporter_url: str
    """What a pod on an EFA node reads for its own node's counters (the Ray containers' RAY_EFA_EKS_EFA_EXPORTER)."""

    def __init__(self, name: str, args: NodeAgentArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ray-efa-eks:index:NodeAgent", name, None, opts)
        files = code_files()
        cm_name = f"{NAME}-code"
        spec = pod_spec(args, cm_name, files)  # validates before anything is registered
        self._args, self._name = args, name
        self.namespace = args.namespace
        ns = k8s.core.v1.Namespace(
            f"{name}-ns",
            metadata={"name": args.namespace, "labels": dict(PRIVILEGED_NAMESPACE_LABELS)},
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider),
        )
        in_ns = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[ns])
        meta = {"namespace": args.namespace, "labels": dict(APP_LABELS)}
        sa = k8s.core.v1.ServiceAccount(
            f"{name}-sa", metadata={"name": NAME, **meta}, automount_service_account_token=False, opts=in_ns
        )
        code = k8s.core.v1.ConfigMap(
            f"{name}-code", metadata={"name": cm_name, **meta}, data=payload.config_map_data(files), opts=in_ns
        )
        rbac: list[pulumi.Resource] = []
        if args.efa_devices:  # the fabric proof's token: RBAC, then the admission policy that narrows it
            rbac = self._proof_access(name, args, opts=pulumi.ResourceOptions(parent=self, provider=args.provider))
        self.daemonset = k8s.apps.v1.DaemonSet(
            f"{name}-daemonset",
            metadata={"name": NAME, **meta},
            spec={
                "selector": {"matchLabels": dict(APP_LABELS)},
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
                "template": {"metadata": {"labels": dict(APP_LABELS)}, "spec": spec},
            },
            opts=pulumi.ResourceOptions.merge(
                in_ns,
                pulumi.ResourceOptions(
                    depends_on=[ns, sa, code, *rbac, *args.depends_on],
                    custom_timeouts=pulumi.CustomTimeouts(
                        create=f"{ROLLOUT_TIMEOUT_S}s", update=f"{ROLLOUT_TIMEOUT_S}s"
                    ),
                ),
            ),
        )
        k8s.core.v1.Service(f"{name}-service", metadata={"name": SERVICE_NAME, **meta}, spec=service_spec(), opts=in_ns)
        if args.network_policy:  # strict mode: the proof's API calls
            k8s.networking.v1.NetworkPolicy(
                f"{name}-egress", metadata={"name": f"{NAME}-egress", **meta}, spec=allow_all_egress(), opts=in_ns
            )
        if args.network_policy and args.allowed_namespaces:
            k8s.networking.v1.NetworkPolicy(
                f"{name}-ingress",
                metadata={"name": f"{SERVICE_NAME}-ingress", **meta},
                spec=network_policy_spec(args.allowed_namespaces),
                opts=in_ns,
            )
        self.exporter_url = exporter_url(args.namespace)
        self.register_outputs({"namespace": args.namespace, "exporterUrl": self.exporter_url})

    def grant_worker_read(self, ray_namespace: pulumi.Resource) -> list[pulumi.Resource]:
        """Role + RoleBinding in the Ray namespace (:data:`WORKER_POD_RULES`), created once that namespace exists
        (the RayCluster's ``after_namespace`` hook, so both exist before any worker pod); [] without the proof."""
        args = self._args
        if not (args.efa_devices and args.workers_namespace):
            return []
        opts = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[ray_namespace])
        meta = {"name": f"ray-efa-eks:{NAME}-workers", "namespace": args.workers_namespace, "labels": dict(APP_LABELS)}
        role = k8s.rbac.v1.Role(f"{self._name}-workers-role", metadata=meta, rules=WORKER_POD_RULES, opts=opts)
        binding = k8s.rbac.v1.RoleBinding(
            f"{self._name}-workers-binding",
            metadata=meta,
            role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": meta["name"]},
            subjects=[{"kind": "ServiceAccount", "name": NAME, "namespace": args.namespace}],
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[role])),
        )
        return [role, binding]

    def _proof_access(self, name: str, args: NodeAgentArgs, opts: pulumi.ResourceOptions) -> list[pulumi.Resource]:
        """ClusterRole + binding (nodes), Role + binding (Events in one namespace), the ValidatingAdmissionPolicy
        and its binding. The policy and its binding come first: the token can do nothing they do not allow."""
        cluster_rules, event_rules = rbac_rules()
        subject = [{"kind": "ServiceAccount", "name": NAME, "namespace": args.namespace}]
        labels = {"labels": dict(APP_LABELS)}
        policy = k8s.admissionregistration.v1.ValidatingAdmissionPolicy(
            f"{name}-own-node-policy",
            metadata={"name": POLICY_NAME, **labels},
            spec=own_node_policy(args.namespace, kubernetes_version=args.kubernetes_version),
            opts=opts,
        )
        binding = k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
            f"{name}-own-node-binding",
            metadata={"name": POLICY_NAME, **labels},
            spec={"policyName": POLICY_NAME, "validationActions": ["Deny"]},
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[policy])),
        )
        first = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[policy, binding]))
        role_name = f"ray-efa-eks:{NAME}"
        cr = k8s.rbac.v1.ClusterRole(
            f"{name}-nodes-role", metadata={"name": role_name, **labels}, rules=cluster_rules, opts=first
        )
        crb = k8s.rbac.v1.ClusterRoleBinding(
            f"{name}-nodes-binding",
            metadata={"name": role_name, **labels},
            role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role_name},
            subjects=subject,
            opts=pulumi.ResourceOptions.merge(first, pulumi.ResourceOptions(depends_on=[cr])),
        )
        meta = {"name": role_name, "namespace": EVENTS_NAMESPACE, **labels}
        role = k8s.rbac.v1.Role(f"{name}-events-role", metadata=meta, rules=event_rules, opts=first)
        rb = k8s.rbac.v1.RoleBinding(
            f"{name}-events-binding",
            metadata=meta,
            role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role_name},
            subjects=subject,
            opts=pulumi.ResourceOptions.merge(first, pulumi.ResourceOptions(depends_on=[role])),
        )
        return [policy, binding, cr, crb, role, rb]
