"""NodeAgent: the one pod per EFA node that reads the host's fabric, and the only hostPath user of the stack.

One DaemonSet, built once (issue 36, exporter first; issue 35's per-node fabric proof joins it as a second
container with its own projected token). Today it runs the EFA exporter (efacheck/efa_exporter.py): every EFA port
``hw_counters`` file in the Prometheus text format. Ray pods read their own node's counters through a node-local
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

The code ships as the gate ships efacheck (components/efa_check.py): the modules it needs in a ConfigMap, run by the
DLC image the GPU nodes already pull (no new image). ``/sys/module`` is not namespaced, so the module version is the
container's own ``/sys/module/efa/version``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from .efa_check import EFA_PROOF_PACKAGE, _config_key, _package_dir
from .node_groups import GPU_ROLE, GPU_TOLERATION, ROLE_LABEL
from .raycluster import check_guaranteed, pod_resources

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
SHIPPED = ("__init__.py", "cli.py", "efa_counters.py", "efa_exporter.py")
"""The efacheck modules the exporter needs (stdlib only)."""
STARTUP_TAINT_PREFIX = "startup-taint.cluster-autoscaler.kubernetes.io/"
"""Cluster Autoscaler's startup-taint convention (a taint it ignores in scale-up simulation)."""
FABRIC_STARTUP_TAINT = STARTUP_TAINT_PREFIX + "efa-unproven"
"""The taint a GPU node joins with until its fabric is proven (issue 35); the agent tolerates it, so it runs first."""
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
PRIVILEGED_NAMESPACE_LABELS = {"pod-security.kubernetes.io/enforce": "privileged",
                               "pod-security.kubernetes.io/enforce-version": "latest"}
RUN_AS = 65534
"""nobody: the port counter files are 0444 (RDMA core hw_stats attributes)."""
ROLLOUT_TIMEOUT_S = 1200
"""pulumi-kubernetes awaits a DaemonSet's rollout (kstatus, since pulumi/pulumi-kubernetes#2953); the first pod on a
new GPU node waits for the multi-GB DLC image (the Ray worker beside it pulls the same layers)."""


def exporter_url(namespace: str = NAMESPACE, port: int = EXPORTER_PORT) -> str:
    """The node-local Service's URL as a pod sees it (cluster DNS): its own node's exporter."""
    return f"http://{SERVICE_NAME}.{namespace}.svc.cluster.local:{port}/metrics"


@dataclass
class NodeAgentArgs:
    """Inputs of :class:`NodeAgent`."""

    provider: k8s.Provider
    image: str
    """The DLC image the GPU nodes already pull (the RayCluster's)."""
    instance_types: list[str]
    """The stack's EFA GPU instance types: with our GPU role label, the nodes the agent runs on."""
    namespace: str = NAMESPACE
    resources: dict[str, dict[str, str]] = field(default_factory=lambda: pod_resources("100m", "128Mi"))
    """Requests == limits (Guaranteed): a Python stdlib HTTP server reading a few dozen files per scrape."""
    startup_taints: list[str] = field(default_factory=lambda: [FABRIC_STARTUP_TAINT])
    """Startup taint keys the agent tolerates (any effect), so it runs on a node still being proven."""
    network_policy: bool = True
    """Admit traffic to the exporter only from ``allowed_namespaces`` (VPC CNI NetworkPolicy enforcement on)."""
    allowed_namespaces: list[str] = field(default_factory=list)
    """Namespaces whose pods may read the exporter (the Ray namespace; a monitoring namespace adds itself)."""
    extra_containers: list[dict[str, Any]] = field(default_factory=list)
    """More containers in the agent pod (issue 35's per-node proof, with its own projected token volume)."""
    extra_volumes: list[dict[str, Any]] = field(default_factory=list)
    depends_on: list[pulumi.Resource] = field(default_factory=list)
    """What the DaemonSet waits for: the GPU node group, so Pulumi's rollout await counts the nodes' pods (a
    DaemonSet created before its nodes joined is "ready" with none)."""


def code_files() -> dict[str, str]:
    """``efacheck/<module>.py`` -> source, for the ConfigMap (read as files; the library never imports efacheck)."""
    root = _package_dir(EFA_PROOF_PACKAGE)
    return {f"efacheck/{n}": (root / n).read_text() for n in SHIPPED}


def host_sysfs_volumes() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, volumeMounts): the host's HOST_SYSFS_PATHS read-only under HOST_SYSFS.

    Type ``Directory``: on an EFA node both exist before any pod runs (the node selector keeps the agent off
    others); a node without them fails the pod visibly instead of serving an empty tree."""
    vols, mounts = [], []
    for path in HOST_SYSFS_PATHS:
        name = "host-sys-" + path.rsplit("/", 1)[-1]
        vols.append({"name": name, "hostPath": {"path": path, "type": "Directory"}})
        mounts.append({"name": name, "mountPath": HOST_SYSFS + path[len("/sys"):], "readOnly": True})
    return vols, mounts


def container_security() -> dict[str, Any]:
    """Nothing the exporter does needs a privilege: reading 0444 files and listening on an unprivileged port."""
    return {"runAsNonRoot": True, "runAsUser": RUN_AS, "runAsGroup": RUN_AS, "privileged": False,
            "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}


def exporter_container(image: str, resources: dict[str, dict[str, str]]) -> dict[str, Any]:
    check_guaranteed(resources, "node agent efa-exporter container")
    _, mounts = host_sysfs_volumes()
    probe = {"httpGet": {"path": "/healthz", "port": "metrics"}, "periodSeconds": 10, "timeoutSeconds": 3}
    return {
        "name": "efa-exporter",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python", "-m", "efacheck.efa_exporter", "--sysfs", HOST_SYSFS, "--port", str(EXPORTER_PORT),
                    "--module-version-file", MODULE_VERSION_FILE],
        "workingDir": CODE_MOUNT,
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "PYTHONPATH", "value": CODE_MOUNT},
                {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}],
        "ports": [{"name": "metrics", "containerPort": EXPORTER_PORT, "protocol": "TCP"}],
        "readinessProbe": probe,
        "livenessProbe": {**probe, "failureThreshold": 6},
        "resources": resources,
        "securityContext": container_security(),
        "volumeMounts": [{"name": "code-efacheck", "mountPath": f"{CODE_MOUNT}/efacheck", "readOnly": True},
                         {"name": "tmp", "mountPath": "/tmp"}, *mounts],
    }


def node_affinity(instance_types: list[str]) -> dict[str, Any]:
    """Our GPU nodes of the stack's EFA types (the EFA device plugin keys its allow-list on the same label)."""
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{
        "matchExpressions": [{"key": ROLE_LABEL, "operator": "In", "values": [GPU_ROLE]},
                             {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": sorted(set(instance_types))}],
    }]}}}


def pod_spec(args: NodeAgentArgs, configmap_name: str, files: dict[str, str]) -> dict[str, Any]:
    """The agent's pod spec (validated against the Kubernetes schema and the Pod Security Standards in tests)."""
    if not args.instance_types:
        raise ValueError("NodeAgent: instance_types is empty; give the stack's EFA GPU instance types "
                         "(e.g. ['g6.12xlarge'])")
    vols, _ = host_sysfs_volumes()
    return {
        "serviceAccountName": NAME,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 10,
        "securityContext": {"runAsNonRoot": True, "runAsUser": RUN_AS, "runAsGroup": RUN_AS,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "affinity": node_affinity(args.instance_types),
        "tolerations": [dict(GPU_TOLERATION)] + [{"key": k, "operator": "Exists"} for k in args.startup_taints],
        "containers": [exporter_container(args.image, args.resources), *args.extra_containers],
        "volumes": [
            {"name": "code-efacheck", "configMap": {"name": configmap_name, "items": [
                {"key": _config_key(p), "path": p.split("/", 1)[1]} for p in sorted(files)]}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "16Mi"}},
            *vols, *args.extra_volumes,
        ],
    }


def service_spec() -> dict[str, Any]:
    """ClusterIP, node-local: a pod reaches only its own node's exporter (never another node's counters)."""
    return {"selector": dict(APP_LABELS), "internalTrafficPolicy": "Local",
            "ports": [{"name": "metrics", "port": EXPORTER_PORT, "targetPort": "metrics", "protocol": "TCP"}]}


def network_policy_spec(namespaces: list[str]) -> dict[str, Any]:
    """Ingress to the exporter port from the named namespaces only."""
    return {"podSelector": {"matchLabels": dict(APP_LABELS)}, "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}
                                  for ns in sorted(set(namespaces))],
                         "ports": [{"protocol": "TCP", "port": EXPORTER_PORT}]}]}


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
        self.namespace = args.namespace
        ns = k8s.core.v1.Namespace(
            f"{name}-ns", metadata={"name": args.namespace, "labels": dict(PRIVILEGED_NAMESPACE_LABELS)},
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider))
        in_ns = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[ns])
        meta = {"namespace": args.namespace, "labels": dict(APP_LABELS)}
        sa = k8s.core.v1.ServiceAccount(f"{name}-sa", metadata={"name": NAME, **meta},
                                        automount_service_account_token=False, opts=in_ns)
        code = k8s.core.v1.ConfigMap(f"{name}-code", metadata={"name": cm_name, **meta},
                                     data={_config_key(p): t for p, t in files.items()}, opts=in_ns)
        self.daemonset = k8s.apps.v1.DaemonSet(
            f"{name}-daemonset", metadata={"name": NAME, **meta},
            spec={"selector": {"matchLabels": dict(APP_LABELS)},
                  "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
                  "template": {"metadata": {"labels": dict(APP_LABELS)}, "spec": spec}},
            opts=pulumi.ResourceOptions.merge(in_ns, pulumi.ResourceOptions(
                depends_on=[ns, sa, code, *args.depends_on], custom_timeouts=pulumi.CustomTimeouts(
                    create=f"{ROLLOUT_TIMEOUT_S}s", update=f"{ROLLOUT_TIMEOUT_S}s"))))
        k8s.core.v1.Service(f"{name}-service", metadata={"name": SERVICE_NAME, **meta}, spec=service_spec(),
                            opts=in_ns)
        if args.network_policy and args.allowed_namespaces:
            k8s.networking.v1.NetworkPolicy(f"{name}-ingress", metadata={"name": f"{SERVICE_NAME}-ingress", **meta},
                                            spec=network_policy_spec(args.allowed_namespaces), opts=in_ns)
        self.exporter_url = exporter_url(args.namespace)
        self.register_outputs({"namespace": args.namespace, "exporterUrl": self.exporter_url})
