"""What a node of a catalogue type offers pods on the EKS AL2023 AMI: its capacity less the kubelet's reservation.

The reservation is nodeadm's (awslabs/amazon-eks-ami ``nodeadm/internal/kubelet/config.go``): CPU 6% of the first
core, 1% of the second, 0.5% of cores 3-4 and 0.25% of the rest (``getCPUMillicoresToReserve``); memory
``11 x maxPods + 255`` MiB (``getMemoryMebibytesToReserve``, maxPods from the catalogue: nodeadm's ENI formula) plus
the hard eviction threshold ``memory.available: 100Mi``. Assumed, not read from a document: the kernel and firmware
keep :data:`KERNEL_MEMORY_SHARE_PERCENT` of the nominal memory out of the capacity the kubelet reports.
"""

from __future__ import annotations

from .instances import InstanceType

KERNEL_MEMORY_SHARE_PERCENT = 6
"""Percent of an instance's nominal memory missing from the node's reported capacity (an assumption: EKS nodes
report some 4-6% less than the instance size; the larger figure is taken, so the fit errs on the safe side)."""
EVICTION_HARD_MIB = 100


def kube_reserved_cpu_m(vcpus: int) -> int:
    """nodeadm's ``getCPUMillicoresToReserve``."""
    total, reserved = vcpus * 1000, 0
    for start, end, per_10k in ((0, 1000, 600), (1000, 2000, 100), (2000, 4000, 50), (4000, total, 25)):
        if total > start:
            reserved += (min(total, end) - start) * per_10k // 10000
    return reserved


def kube_reserved_memory_mib(it: InstanceType) -> int:
    """nodeadm's ``getMemoryMebibytesToReserve``: 11 MiB per pod the node may run, plus 255 MiB."""
    return 11 * it.max_pods + 255


def allocatable_cpu_m(it: InstanceType) -> int:
    return it.vcpus * 1000 - kube_reserved_cpu_m(it.vcpus)


def allocatable_memory_mib(it: InstanceType) -> int:
    capacity = it.memory_mib * (100 - KERNEL_MEMORY_SHARE_PERCENT) // 100
    return capacity - kube_reserved_memory_mib(it) - EVICTION_HARD_MIB
