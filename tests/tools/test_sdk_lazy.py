"""tools.sdk_lazy: every name the plan's program reads from a lazily loaded SDK package is the very object the
package's own ``__init__`` binds, and a name the package does not export stays missing."""

from __future__ import annotations

import subprocess
import sys
import textwrap

PROBE = textwrap.dedent('''
    import sys
    from ray_efa_eks.tools import sdk_lazy
    assert "pulumi_aws.ec2" in sdk_lazy.install()
    import pulumi_aws as aws, pulumi_kubernetes as k8s
    names = {
        aws.ec2: ["LaunchTemplate", "LaunchTemplateArgs", "get_subnets_output", "get_subnets", "GetSubnetsResult",
                  "AwaitableGetSubnetsResult", "LaunchTemplateBlockDeviceMappingArgs", "SecurityGroup", "Vpc",
                  "get_capacity_block_reservation", "outputs", "_inputs"],
        aws.s3: ["Bucket", "BucketVersioning", "BucketPolicy"],
        k8s.core.v1: ["Pod", "Namespace", "ConfigMap", "PodSpecArgs", "ContainerArgs", "ServiceAccount"],
        k8s.meta.v1: ["ObjectMetaArgs"],
        k8s.admissionregistration.v1: ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
                                       "ValidatingAdmissionPolicySpecArgs"],
    }
    got = {(m, n): getattr(m, n) for m, ns in names.items() for n in ns}
    lazily = len([k for k in sys.modules if k.startswith("pulumi_aws.ec2.")])
    assert lazily < 20, lazily  # not the whole package
    try:
        aws.ec2.LaunchTemplateBlockDeviceMapping  # an outputs class: no package attribute in the real package
    except AttributeError:
        pass
    else:
        raise AssertionError("outputs name exported")
    for m in names:
        try:
            m._sdk_full("__no_such_name__")  # runs the package's own __init__, as a plain import does
        except AttributeError:
            pass
    bad = [f"{m.__name__}.{n}" for (m, n), v in got.items() if getattr(m, n) is not v]
    assert not bad, bad
    print("ok", lazily)
''')


def test_lazy_names_are_the_packages_own() -> None:
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.startswith("ok"), r.stdout + r.stderr


def test_candidates_follow_the_generated_layout() -> None:
    from ray_efa_eks.tools.sdk_lazy import _candidates

    assert _candidates("LaunchTemplate")[:2] == ["LaunchTemplate", "launch_template"]
    assert _candidates("get_subnets_output")[0] == "get_subnets"
    assert _candidates("AwaitableGetSubnetsResult")[1] == "get_subnets"
    assert _candidates("BucketV2Args")[1] == "bucket_v2"
    assert _candidates("PodSpecArgs")[-2:] == ["_inputs", "_enums"]
