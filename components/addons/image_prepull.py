"""ImagePrePull: each joining GPU node pulls the DLC while its fabric proof runs, not after it.

A GPU node joins with the startup taint (components/addons/node_agent.py), which keeps the Ray worker pod off it until the
node agent has proven the fabric; only then is the worker scheduled and its multi-GB image pulled. A DaemonSet that
tolerates the taint and whose init container runs the DLC (``true``, nothing else) makes the kubelet pull the image
as soon as the node joins, beside the node agent's small image: the AL2023 EKS AMI's kubelet pulls images in parallel
(nodeadm writes ``serializeImagePulls: false``, awslabs/amazon-eks-ami nodeadm/internal/kubelet/config.go
``defaultKubeletSubConfig``). When the taint goes, the worker pod's ``IfNotPresent`` finds the image on disk.

The pod asks for nothing: its own namespace enforces the Pod Security ``restricted`` level, it runs as nobody with a
read-only root, no capabilities, no token, no host namespace. Its long-running container is the node agent's small
image (already on the node) waiting for SIGTERM, so the DaemonSet's pod stays Running and the image stays in use
(the kubelet's image GC removes only unused images).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from ..kube import (
    FABRIC_STARTUP_TAINT,
    GPU_TOLERATION,
    check_guaranteed,
    container_security,
    node_affinity,
    pod_resources,
    pod_security,
)

NAMESPACE = "image-prepull"
NAME = "dlc-prepull"
LABELS = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "ray-efa-eks"}
RESTRICTED_NAMESPACE_LABELS = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}
WAIT = ["python", "-c", "import signal; signal.pause()"]
"""Sleep until SIGTERM (Python's default handler for it ends the process)."""


@dataclass
class ImagePrePullArgs:
    """Inputs of :class:`ImagePrePull`."""

    provider: k8s.Provider
    """Kubernetes provider of the cluster the DaemonSet runs in."""
    image: str
    """The image to pull on every GPU node (the DLC the Ray workers run)."""
    idle_image: str
    """A small image with ``python`` for the waiting container (the node agent's, already on the node)."""
    instance_types: list[str]
    """The stack's GPU instance types: with the GPU role label, the nodes to pull on."""
    startup_taints: list[str] = field(default_factory=lambda: [FABRIC_STARTUP_TAINT])
    """Startup taint keys it tolerates (any effect), so it pulls on a node still being proven."""
    resources: dict[str, dict[str, str]] = field(default_factory=lambda: pod_resources("10m", "32Mi"))
    """Requests == limits (Guaranteed) of each container: ``true`` and a sleeping Python."""
    namespace: str = NAMESPACE
    """Its own namespace, at Pod Security ``restricted`` (its pods need nothing else)."""
    network_policy: bool = True
    """A NetworkPolicy that denies its pods all traffic: they need none (the kubelet pulls, not the pod), and under
    the VPC CNI's standard mode a pod no policy selects would be open to every pod."""


DENY_ALL = {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
"""Selects every pod of the namespace and lets nothing in or out (no ``ingress`` or ``egress`` rule)."""


def pod_spec(args: ImagePrePullArgs) -> dict[str, Any]:
    """The pre-pull pod (validated against the Kubernetes schema and Pod Security ``restricted`` in tests)."""
    if not args.instance_types:
        raise ValueError(
            "ImagePrePull: instance_types is empty; give the stack's GPU instance types (e.g. ['g6.12xlarge'])"
        )
    check_guaranteed(args.resources, "image pre-pull containers")
    common = {"imagePullPolicy": "IfNotPresent", "resources": args.resources, "securityContext": container_security()}
    return {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 5,
        "securityContext": pod_security(),
        "affinity": node_affinity(args.instance_types),
        "tolerations": [dict(GPU_TOLERATION)] + [{"key": k, "operator": "Exists"} for k in args.startup_taints],
        "initContainers": [{"name": "pull", "image": args.image, "command": ["true"], **common}],
        "containers": [{"name": "hold", "image": args.idle_image, "command": list(WAIT), **common}],
    }


class ImagePrePull(pulumi.ComponentResource):
    """Namespace (Pod Security restricted) and the pre-pull DaemonSet on the GPU nodes."""

    daemonset: k8s.apps.v1.DaemonSet

    def __init__(self, name: str, args: ImagePrePullArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ray-efa-eks:index:ImagePrePull", name, None, opts)
        spec = pod_spec(args)  # validates before anything is registered
        ns = k8s.core.v1.Namespace(
            f"{name}-ns",
            metadata={"name": args.namespace, "labels": dict(RESTRICTED_NAMESPACE_LABELS)},
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider),
        )
        meta = {"name": NAME, "namespace": args.namespace, "labels": dict(LABELS)}
        if args.network_policy:
            k8s.networking.v1.NetworkPolicy(
                f"{name}-deny-all",
                metadata={"name": "deny-all", "namespace": args.namespace},
                spec=DENY_ALL,
                opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[ns]),
            )
        # No rollout await: a GPU node's pull takes minutes, and nodes that scale from zero come later; the worker
        # pod's own pull is the fallback when this one has not finished.
        self.daemonset = k8s.apps.v1.DaemonSet(
            f"{name}-daemonset",
            metadata={**meta, "annotations": {"pulumi.com/skipAwait": "true"}},
            spec={
                "selector": {"matchLabels": dict(LABELS)},
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}},
                "template": {"metadata": {"labels": dict(LABELS)}, "spec": spec},
            },
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[ns]),
        )
        self.register_outputs({"namespace": args.namespace})
