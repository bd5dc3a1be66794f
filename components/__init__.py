"""Reusable Pulumi components for Ray Train on EKS with EFA (VPC, EKS, node groups, KubeRay, EFA gate).

The modules live in one folder per layer (``config/``, ``network/``, ``cluster/``, ``nodes/``, ``ray/``, ``addons/``,
``observability/``, ``storage/``, ``queues/``), the way pulumi-eks keeps ``cluster/``, ``nodes/`` and ``addons/``;
``stack.py`` (``EfaRayCluster``) composes them, and ``kube.py`` holds the labels, tolerations and pod helpers
they share. The package itself (``ray_efa_eks.components``: ``Cluster``, ``ClusterArgs``, ...) is the stable path to
every component: the names below load on first use, so importing a config grammar does not import the Pulumi SDKs."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the same names, seen by type checkers and import-graph tools
    from .addons.cluster_autoscaler import ClusterAutoscaler, ClusterAutoscalerArgs
    from .addons.device_plugins import DevicePlugins, DevicePluginsArgs
    from .addons.efa_check import Deadlines, EfaCheckJob, EfaCheckJobArgs
    from .addons.image_cache import ImageCache, ImageCacheArgs
    from .addons.image_prepull import ImagePrePull, ImagePrePullArgs
    from .addons.node_agent import NodeAgent, NodeAgentArgs
    from .cluster.cluster import Cluster, ClusterArgs
    from .cluster.pod_identity import PodStorageAccess, PodStorageAccessArgs
    from .config.config import ConfigError, StackConfig
    from .config.errors import ArgError
    from .network.network import Network, NetworkArgs
    from .nodes.instances import CATALOGUE, InstanceType, lookup
    from .nodes.node_groups import EfaGpuNodeGroup, EfaGpuNodeGroupArgs, SystemNodeGroup, SystemNodeGroupArgs
    from .observability.metrics_rules import AlertThresholds
    from .observability.observability import Observability, ObservabilityArgs
    from .queues.job_queues import JobQueues, JobQueuesArgs
    from .ray.kuberay import KubeRayOperator, KubeRayOperatorArgs
    from .ray.ray_autoscaler import AutoscalerArgs
    from .ray.raycluster import RayCluster, RayClusterArgs, WorkerGroupArgs
    from .stack import EfaRayCluster, EfaRayClusterArgs
    from .storage.checkpoint_bucket import CheckpointBucket, CheckpointBucketArgs

EXPORTS: dict[str, tuple[str, ...]] = {
    "stack": ("EfaRayCluster", "EfaRayClusterArgs"),
    "config.config": ("ConfigError", "StackConfig"),
    "config.errors": ("ArgError",),
    "network.network": ("Network", "NetworkArgs"),
    "cluster.cluster": ("Cluster", "ClusterArgs"),
    "cluster.pod_identity": ("PodStorageAccess", "PodStorageAccessArgs"),
    "nodes.instances": ("CATALOGUE", "InstanceType", "lookup"),
    "nodes.node_groups": ("EfaGpuNodeGroup", "EfaGpuNodeGroupArgs", "SystemNodeGroup", "SystemNodeGroupArgs"),
    "ray.kuberay": ("KubeRayOperator", "KubeRayOperatorArgs"),
    "ray.raycluster": ("RayCluster", "RayClusterArgs", "WorkerGroupArgs"),
    "ray.ray_autoscaler": ("AutoscalerArgs",),
    "addons.device_plugins": ("DevicePlugins", "DevicePluginsArgs"),
    "addons.cluster_autoscaler": ("ClusterAutoscaler", "ClusterAutoscalerArgs"),
    "addons.node_agent": ("NodeAgent", "NodeAgentArgs"),
    "addons.efa_check": ("Deadlines", "EfaCheckJob", "EfaCheckJobArgs"),
    "addons.image_cache": ("ImageCache", "ImageCacheArgs"),
    "addons.image_prepull": ("ImagePrePull", "ImagePrePullArgs"),
    "observability.observability": ("Observability", "ObservabilityArgs"),
    "observability.metrics_rules": ("AlertThresholds",),
    "storage.checkpoint_bucket": ("CheckpointBucket", "CheckpointBucketArgs"),
    "queues.job_queues": ("JobQueues", "JobQueuesArgs"),
}
"""Each public name's module, relative to this package (the ``TYPE_CHECKING`` imports above, as data)."""
_HOME = {name: module for module, names in EXPORTS.items() for name in names}
__all__ = [
    "AlertThresholds",
    "ArgError",
    "AutoscalerArgs",
    "CATALOGUE",
    "CheckpointBucket",
    "CheckpointBucketArgs",
    "Cluster",
    "ClusterArgs",
    "ClusterAutoscaler",
    "ClusterAutoscalerArgs",
    "ConfigError",
    "Deadlines",
    "DevicePlugins",
    "DevicePluginsArgs",
    "EfaCheckJob",
    "EfaCheckJobArgs",
    "EfaGpuNodeGroup",
    "EfaGpuNodeGroupArgs",
    "EfaRayCluster",
    "EfaRayClusterArgs",
    "ImageCache",
    "ImageCacheArgs",
    "ImagePrePull",
    "ImagePrePullArgs",
    "InstanceType",
    "JobQueues",
    "JobQueuesArgs",
    "KubeRayOperator",
    "KubeRayOperatorArgs",
    "Network",
    "NetworkArgs",
    "NodeAgent",
    "NodeAgentArgs",
    "Observability",
    "ObservabilityArgs",
    "PodStorageAccess",
    "PodStorageAccessArgs",
    "RayCluster",
    "RayClusterArgs",
    "StackConfig",
    "SystemNodeGroup",
    "SystemNodeGroupArgs",
    "WorkerGroupArgs",
    "lookup",
]
"""Every name of EXPORTS (a literal, so linters see the TYPE_CHECKING imports used)."""


def __getattr__(name: str) -> Any:
    """A public name, imported from its layer module on first use (PEP 562)."""
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
