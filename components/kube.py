"""The Kubernetes labels, taints, tolerations and pod helpers every layer shares (a leaf: it imports nothing of ours).

The node groups set a role label and taint, and every pod that must land on (or stay off) those nodes selects or
tolerates it; the Pod Security contexts, Guaranteed-QoS resources and Helm value merging are the same for each
component that renders a pod or a chart. One definition here keeps the setter and the selectors in step."""

from __future__ import annotations

from typing import Any

ROLE_LABEL = "ray-efa-eks/role"
SYSTEM_ROLE = "system"
GPU_ROLE = "gpu"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}
GPU_TOLERATION = {"key": GPU_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}
"""The pod-side match of GPU_TAINT (Kubernetes spells the effect NoSchedule)."""
POD_EFFECT = {"NO_SCHEDULE": "NoSchedule", "PREFER_NO_SCHEDULE": "PreferNoSchedule", "NO_EXECUTE": "NoExecute"}
"""The EKS API's taint effects as Kubernetes spells them."""


def startup_taint(key: str) -> dict[str, str]:
    """A startup taint as the node group's EKS API takes it (NoSchedule: it keeps pods off, evicts nothing)."""
    return {"key": key, "value": "true", "effect": "NO_SCHEDULE"}


def startup_toleration(key: str) -> dict[str, str]:
    """The toleration a DaemonSet that must run on an unproven node carries (that key, any value, NoSchedule)."""
    return {"key": key, "operator": "Exists", "effect": "NoSchedule"}


STARTUP_TAINT_PREFIX = "startup-taint.cluster-autoscaler.kubernetes.io/"
"""Cluster Autoscaler's startup-taint convention (a taint it ignores in scale-up simulation)."""
FABRIC_STARTUP_TAINT = STARTUP_TAINT_PREFIX + "efa-unproven"
"""The taint a GPU node joins with until its fabric is proven; the node agent tolerates it, so it runs first."""
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
"""The kubelet's well-known label with the node's EC2 instance type."""


def node_affinity(instance_types: list[str]) -> dict[str, Any]:
    """Our GPU nodes of the stack's EFA types (the EFA device plugin keys its allow-list on the same label)."""
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": ROLE_LABEL, "operator": "In", "values": [GPU_ROLE]},
                            {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": sorted(set(instance_types))},
                        ],
                    }
                ]
            }
        }
    }


RUN_AS = 65534
"""``nobody``: what the node agent and the image pre-pull run as (the EFA port counter files the agent reads are
0444, RDMA core hw_stats attributes)."""


def pod_security() -> dict[str, Any]:
    """The pod-level securityContext of a pod that runs as ``nobody`` (the node agent, the image pre-pull)."""
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS,
        "runAsGroup": RUN_AS,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security() -> dict[str, Any]:
    """The container securityContext of a ``nobody`` pod that needs no privilege: the node agent's exporter reads
    0444 files and listens on an unprivileged port; the image pre-pull only waits."""
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS,
        "runAsGroup": RUN_AS,
        "privileged": False,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
"""Label the API server sets on every namespace to its name (NamespaceDefaultLabelName)."""
METRICS_PORTS = {"metrics": 8080, "as-metrics": 44217, "dash-metrics": 44227}
"""What Prometheus scrapes on a Ray pod: ``metrics-export-port`` (KubeRay sets 8080, utils.DefaultMetricsPort),
the autoscaler's and the dashboard's metrics (KubeRay config/prometheus/podMonitor.yaml)."""
METRICS_NAMESPACE = "monitoring"
"""Default namespace of the metrics scraper (kube-prometheus-stack) admitted to :data:`METRICS_PORTS`."""
POD_SECURITY_LABELS = {
    "pod-security.kubernetes.io/enforce": "baseline",
    "pod-security.kubernetes.io/enforce-version": "latest",
    "pod-security.kubernetes.io/warn": "restricted",
    "pod-security.kubernetes.io/warn-version": "latest",
    "pod-security.kubernetes.io/audit": "restricted",
    "pod-security.kubernetes.io/audit-version": "latest",
}
"""The Ray namespace enforces Pod Security ``baseline`` (no hostPath, host namespaces, privileged); ``restricted``
is warned and audited. Every pod we create there passes ``baseline`` (tests/components/test_pod_security.py)."""
POD_SECURITY_CONTEXT = {"seccompProfile": {"type": "RuntimeDefault"}}
"""Pod-level asks of Pod Security ``restricted`` that the DLC image allows (docs/security.md): the container
runtime's default seccomp profile. Not ``runAsNonRoot``: the DLC image runs as root (no USER in its build), and a
numeric non-root ``runAsUser`` would leave Ray, pip (runtime_env) and the EFA/NCCL libraries without a home or
writable site-packages."""
CONTAINER_SECURITY_CONTEXT = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
"""Container-level asks of ``restricted``: no setuid escalation and no capabilities, on every Ray container (head,
GPU workers, the workers' ``efa-provider-check``) and the gate's. Ray, the Jobs API, ``ray job submit`` and Ray
Train need none (Ray runs as an unprivileged user in its own images; tests/training/test_worker_constraints.py runs
a cluster and a training run with no capabilities, no_new_privs and a 64 KiB RLIMIT_MEMLOCK); root without
capabilities can still write the root-owned files of the image and /tmp/ray.

EFA and NCCL need none either. Opening ``/dev/infiniband/uverbs*`` is file access (the device plugin puts the node
into the container). Registering host memory with the EFA device pins it through ib_umem_get (Linux
drivers/infiniband/core/umem.c), which refuses a pin past ``RLIMIT_MEMLOCK`` unless the process has CAP_IPC_LOCK;
containers never got CAP_IPC_LOCK (it is not among containerd's default capabilities), and Pod Security
``baseline``, which namespace ``ray`` enforces, does not allow adding it. So the limit is what it was: the one the
container inherits (the AL2023 node's containerd base runtime spec sets only RLIMIT_NOFILE, amazon-eks-ami
nodeadm/internal/containerd/base-runtime-spec.json). Dropping the default set removes NET_RAW (raw sockets,
ARP/ICMP spoofing in the pod network), SETUID/SETGID, DAC_OVERRIDE, CHOWN, FOWNER, MKNOD, KILL and the rest from
the pods that hold the GPUs, the EFA devices and the S3 credentials."""


def check_guaranteed(resources: dict[str, dict[str, Any]], where: str) -> None:
    """Requests must equal limits for every resource (Guaranteed QoS); raise otherwise."""
    req, lim = resources.get("requests", {}), resources.get("limits", {})
    if not req or not lim:
        raise ValueError(f"{where}: requests and limits are both required for Guaranteed QoS")
    if {k: str(v) for k, v in req.items()} != {k: str(v) for k, v in lim.items()}:
        raise ValueError(
            f"{where}: requests {req} != limits {lim}; set them equal (Guaranteed QoS) "
            "so one throttled rank cannot stall the others"
        )
    for k in ("cpu", "memory"):
        if k not in req:
            raise ValueError(f"{where}: {k} missing from requests/limits (Guaranteed QoS needs cpu and memory)")


def pod_resources(cpu: str, memory: str, extra: dict[str, int] | None = None) -> dict[str, dict[str, str]]:
    """Equal requests and limits."""
    amounts = {"cpu": cpu, "memory": memory, **{k: str(v) for k, v in (extra or {}).items()}}
    return {"requests": dict(amounts), "limits": dict(amounts)}


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Helm's value coalescing: maps merge key by key, anything else (lists, scalars) replaces; None deletes."""
    out = dict(base)
    for k, v in override.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge(out[k], v)
        else:
            out[k] = v
    return out
