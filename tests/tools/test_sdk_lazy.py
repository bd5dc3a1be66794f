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


LAYOUT = textwrap.dedent('''
    import sys
    from ray_efa_eks.tools import sdk_lazy
    sdk_lazy.install()
    import pulumi_aws as aws, pulumi_kubernetes as k8s
    cases = [(aws.ec2, "LaunchTemplate", "pulumi_aws.ec2.launch_template"),
             (aws.ec2, "get_subnets_output", "pulumi_aws.ec2.get_subnets"),
             (aws.ec2, "AwaitableGetVpcResult", "pulumi_aws.ec2.get_vpc"),
             (aws.s3, "BucketV2Args", "pulumi_aws.s3.bucket_v2"),
             (k8s.core.v1, "PodSpecArgs", "pulumi_kubernetes.core.v1._inputs")]
    wrong = []
    for pkg, name, module in cases:
        before = module in sys.modules
        getattr(pkg, name)
        if before or module not in sys.modules:
            wrong.append((name, module, before))
    print("ok" if not wrong else wrong)
''')


def test_a_name_loads_the_module_of_the_generated_layout_that_defines_it() -> None:
    """``X``/``XArgs`` from ``x.py``, ``get_x_output`` and ``AwaitableGetXResult`` from ``get_x.py``, a nested
    ``...Args`` from ``_inputs.py``: each name imports its own module and no earlier."""
    r = subprocess.run([sys.executable, "-c", LAYOUT], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
