"""Device plugins: advertise ``nvidia.com/gpu`` and ``vpc.amazonaws.com/efa`` to the scheduler.

Both charts ship default scheduling constraints that EKS GPU nodes do not meet on their own (see
``/work/shared/charts/README.md``; tests/test_device_plugins.py checks the merged values against each chart's own
``values.yaml``):

- nvidia-device-plugin (0.17.1 .. 0.20.0) requires one of three node labels (NFD's ``pci-10de.present``, Tegra's
  ``cpu-model.vendor_id`` or ``nvidia.com/gpu.present``) that neither EKS nor the chart (NFD off by default) sets,
  so its DaemonSet would schedule nowhere and no ``nvidia.com/gpu`` would be advertised. Helm merges maps and
  *replaces* lists, so we set ``affinity...nodeSelectorTerms`` to one term on our own GPU role label.
- aws-efa-k8s-device-plugin turns ``supportedInstanceLabels`` into a required ``In`` affinity on the instance type
  (a type missing from the chart's list schedules nothing) and tolerates no taint, while our GPU nodes carry the
  ``nvidia.com/gpu`` NoSchedule taint. We set the list to the stack's own GPU types and add the toleration.

Versions current for the catalogue (``/work/shared/charts/README.md`` has the chart -> image table and
the upstream commits):

- EFA chart v0.5.30 (image v0.5.20). Images before v0.5.6 count p6-b200's two ``ibp*`` NVLink RDMA controllers as
  EFA devices (10 advertised instead of 8) and NCCL fails; the fix first shipped in chart v0.5.10 (eks-charts
  2a91e368, 2025-06-02; aws/sagemaker-hyperpod-cli#282). :func:`check_versions` refuses an older chart when the
  stack's types include one it breaks (:data:`EFA_MIN_CHART`).
- NVIDIA chart 0.17.1 with ``mofedEnabled: false``. Plugin 0.19.0-0.19.2 default ``mofed-enabled`` to true and
  inject every ``/dev/infiniband/uverbs*`` (EFA's included) into every GPU container (NVIDIA/k8s-device-plugin#1692,
  fixed in 0.19.3 by #1841); the chart passes ``MOFED_ENABLED`` only when the value is a bool, so ``false`` turns
  it off on any version, and :func:`check_versions` refuses 0.19.0-0.19.2 with ``mofedEnabled`` overridden to
  anything but false.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from ..nodes.instances import CATALOGUE
from ..kube import GPU_ROLE, GPU_TOLERATION, ROLE_LABEL, merge, startup_toleration

NVIDIA_REPO = "https://nvidia.github.io/k8s-device-plugin"
EKS_CHARTS_REPO = "https://aws.github.io/eks-charts"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
"""Well-known label the kubelet sets on every node; the EFA chart's allow-list keys on it."""


@dataclass
class DevicePluginsArgs:
    """Inputs of :class:`DevicePlugins` (chart versions pinned; override to upgrade)."""

    provider: k8s.Provider
    """Kubernetes provider of the cluster the charts install into."""
    efa: bool = True
    """Install the EFA device plugin too (``vpc.amazonaws.com/efa``); False: the NVIDIA one alone."""
    nvidia_chart_version: str = "0.17.1"
    """The ``nvidia-device-plugin`` chart (NVIDIA/k8s-device-plugin); 0.19.0-0.19.2 only with ``mofedEnabled: false``
    (their default injects every uverbs device, EFA's included, into every GPU container; docs/security.md)."""
    efa_chart_version: str = "v0.5.30"
    """The ``aws-efa-k8s-device-plugin`` chart (aws/eks-charts); before v0.5.10 it is refused on p6-b200,
    whose NVLink RDMA controllers it counts as EFA devices."""
    namespace: str = "kube-system"
    """Namespace of both Helm releases."""
    instance_types: list[str] | None = None
    """GPU instance types of the stack's GPU nodes (the EFA chart's allow-list).
    None: every EFA GPU type in the catalogue."""
    extra_values: dict[str, Any] = field(default_factory=dict)
    """``{"nvidia": {...}, "efa": {...}}`` merged over ours the way Helm merges (maps recursively, lists replace)."""
    startup_taints: list[str] = field(default_factory=list)
    """Startup taint keys the GPU nodes join with: both plugins tolerate them, since the node's fabric proof reads
    the EFA plugin's allocatable (a plugin waiting for the proof would hold the node unproven for ever)."""


EFA_MIN_CHART = {
    "p6-b200.48xlarge": (
        (0, 5, 10),
        "EFA device plugin images before v0.5.6 (charts before v0.5.10) "
        "count its two ibp* NVLink RDMA controllers as EFA devices (10 instead of 8) and "
        "NCCL fails (aws/sagemaker-hyperpod-cli#282)",
    )
}
"""Instance type -> (first EFA chart version that works on it, why older ones do not)."""
NVIDIA_MOFED_DEFAULT_ON = ((0, 19, 0), (0, 19, 2))
"""NVIDIA device plugin versions whose ``mofed-enabled`` defaults to true (NVIDIA/k8s-device-plugin#1692)."""


def chart_version(text: str) -> tuple[int, int, int]:
    """``v0.5.30`` / ``0.19.1`` -> (0, 5, 30); anything else raises ValueError."""
    parts = str(text).removeprefix("v").split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"chart version {text!r}: expected MAJOR.MINOR.PATCH (e.g. v0.5.30 or 0.17.1)")
    return int(parts[0]), int(parts[1]), int(parts[2])


def check_versions(args: "DevicePluginsArgs") -> None:
    """Refuse device plugin versions known to break on the stack's GPU types, naming the reason and the fix."""
    if args.efa:
        efa = chart_version(args.efa_chart_version)
        for t in _efa_types(args.instance_types):
            floor = EFA_MIN_CHART.get(t)
            if floor and efa < floor[0]:
                raise ValueError(
                    f"DevicePlugins: efa_chart_version {args.efa_chart_version} on {t}: {floor[1]}; use "
                    f"chart v{'.'.join(map(str, floor[0]))} or later (the default is v0.5.30)"
                )
    nvidia = chart_version(args.nvidia_chart_version)
    lo, hi = NVIDIA_MOFED_DEFAULT_ON
    mofed = merge(nvidia_values(), args.extra_values.get("nvidia", {})).get("mofedEnabled")
    if lo <= nvidia <= hi and mofed is not False:
        raise ValueError(
            f"DevicePlugins: nvidia_chart_version {args.nvidia_chart_version} with mofedEnabled "
            f"{mofed!r}: plugin 0.19.0-0.19.2 inject every /dev/infiniband/uverbs* device, EFA's included, "
            "into every GPU container (NVIDIA/k8s-device-plugin#1692); keep mofedEnabled false or use "
            "0.19.3 or later"
        )


def _efa_types(instance_types: list[str] | None) -> list[str]:
    return (
        instance_types
        if instance_types is not None
        else [t.name for t in CATALOGUE.values() if t.gpus and t.efa_supported]
    )


def _on_gpu_nodes(startup_taints: list[str] | None = None) -> dict[str, Any]:
    return {
        "nodeSelector": {ROLE_LABEL: GPU_ROLE},
        "tolerations": [dict(GPU_TOLERATION), *(startup_toleration(k) for k in startup_taints or [])],
    }


def nvidia_values(startup_taints: list[str] | None = None) -> dict[str, Any]:
    """Overrides for nvidia-device-plugin: our GPU label replaces the chart's NFD/forced-label affinity terms."""
    term = {"matchExpressions": [{"key": ROLE_LABEL, "operator": "In", "values": [GPU_ROLE]}]}
    return {
        **_on_gpu_nodes(startup_taints),
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}},
        "mofedEnabled": False,
    }


def efa_values(instance_types: list[str] | None = None, startup_taints: list[str] | None = None) -> dict[str, Any]:
    """Overrides for aws-efa-k8s-device-plugin: the allow-list is exactly our GPU types; tolerate the GPU taint and
    the startup taints."""
    types = _efa_types(instance_types)
    return {
        **_on_gpu_nodes(startup_taints),
        "supportedInstanceLabels": {"keys": [INSTANCE_TYPE_LABEL], "values": sorted(set(types))},
    }


class DevicePlugins(pulumi.ComponentResource):
    """NVIDIA and AWS EFA device plugins as pinned Helm releases on the GPU nodes."""

    releases: list[k8s.helm.v3.Release]

    def __init__(self, name: str, args: DevicePluginsArgs, opts: pulumi.ResourceOptions | None = None):
        check_versions(args)  # before anything is registered
        super().__init__("ray-efa-eks:index:DevicePlugins", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)
        self.releases = [
            k8s.helm.v3.Release(
                f"{name}-nvidia",
                chart="nvidia-device-plugin",
                version=args.nvidia_chart_version,
                repository_opts={"repo": NVIDIA_REPO},
                namespace=args.namespace,
                values=merge(nvidia_values(args.startup_taints), args.extra_values.get("nvidia", {})),
                opts=child,
            )
        ]
        if args.efa:
            self.releases.append(
                k8s.helm.v3.Release(
                    f"{name}-efa",
                    chart="aws-efa-k8s-device-plugin",
                    version=args.efa_chart_version,
                    repository_opts={"repo": EKS_CHARTS_REPO},
                    namespace=args.namespace,
                    values=merge(
                        efa_values(args.instance_types, args.startup_taints), args.extra_values.get("efa", {})
                    ),
                    opts=child,
                )
            )
        self.register_outputs({})
