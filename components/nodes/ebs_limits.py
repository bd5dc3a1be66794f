"""EC2's limits on a gp3 EBS volume: what the GPU root volume's IOPS and throughput may be (a leaf: data and one
check, shared by the stack's config validation, the launch template and the offline AWS rule ``gp3-limits``)."""

from __future__ import annotations

GP3_DOC = "https://docs.aws.amazon.com/ebs/latest/userguide/general-purpose.html"
"""EBS user guide, "General Purpose SSD volumes": gp3 baseline, maxima and the two ratios below."""
GP3_API_DOC = "https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_LaunchTemplateEbsBlockDeviceRequest.html"
"""EC2 API reference, LaunchTemplateEbsBlockDeviceRequest: Iops "gp3: 3,000 - 80,000", Throughput "Valid Range:
Minimum value of 125. Maximum value of 2,000", VolumeSize "gp3: 1 - 65,536 GiB" (botocore 1.44 ships the same)."""
GP3_MAX_GIB = 65536
"""gp3 volume size limit, GiB (GP3_API_DOC VolumeSize, "gp3: 1 - 65,536 GiB"; it was 16,384 before EBS raised it)."""
GP3_BASELINE_IOPS = 3000
"""What every gp3 volume gets, whatever its size, in the price of storage (GP3_DOC)."""
GP3_MAX_IOPS = 80000
GP3_BASELINE_THROUGHPUT = 125
"""MiB/s every gp3 volume gets (GP3_DOC)."""
GP3_MAX_THROUGHPUT = 2000
GP3_IOPS_PER_GIB = 500
"""'The maximum ratio of provisioned IOPS to provisioned volume size is 500 IOPS per GiB' (GP3_DOC)."""
GP3_MIBPS_PER_IOPS = 0.25
"""Throughput at most 0.25 MiB/s per provisioned IOPS: 2,000 MiB/s needs 8,000 IOPS, the 3,000-IOPS baseline carries
at most 750 MiB/s (GP3_DOC)."""


def gp3_problem(size_gib: int, iops: int | None, throughput: int | None) -> str | None:
    """What EC2 refuses in a gp3 volume of ``size_gib`` with ``iops`` and ``throughput`` (None: EC2's default, the
    baseline), or None. The same check serves the stack (before any resource) and the offline AWS rule."""
    eff_iops = GP3_BASELINE_IOPS if iops is None else iops
    if not 1 <= size_gib <= GP3_MAX_GIB:
        return f"gp3 volume size {size_gib} GiB is outside 1..{GP3_MAX_GIB}"
    if iops is not None and not GP3_BASELINE_IOPS <= iops <= GP3_MAX_IOPS:
        return f"gp3 IOPS {iops} is outside {GP3_BASELINE_IOPS}..{GP3_MAX_IOPS}"
    if throughput is not None and not GP3_BASELINE_THROUGHPUT <= throughput <= GP3_MAX_THROUGHPUT:
        return f"gp3 throughput {throughput} MiB/s is outside {GP3_BASELINE_THROUGHPUT}..{GP3_MAX_THROUGHPUT}"
    if iops is not None and iops > GP3_IOPS_PER_GIB * size_gib:
        return (
            f"gp3 IOPS {iops} on {size_gib} GiB is above {GP3_IOPS_PER_GIB} IOPS per GiB "
            f"(at most {GP3_IOPS_PER_GIB * size_gib})"
        )
    if throughput is not None and throughput > GP3_MIBPS_PER_IOPS * eff_iops:
        return (
            f"gp3 throughput {throughput} MiB/s with {eff_iops} IOPS is above {GP3_MIBPS_PER_IOPS} MiB/s per "
            f"provisioned IOPS (at most {int(GP3_MIBPS_PER_IOPS * eff_iops)} MiB/s; {throughput} needs "
            f"{throughput * 4} IOPS)"
        )
    return None
