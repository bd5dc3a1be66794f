"""Every condition of the least-privilege layout rules (tools/security_rules.py), through the rule functions.

test_security_rules.py breaks each rule on the stack the program builds; here each rule gets the smallest set of
resources that reaches one condition (a preview's unknown value included), and the test asserts what the violation
decides (the container, the missing variables, the namespaces left out; long prose by its fragments) or that
the rule stays silent. No Pulumi engine: milliseconds.
"""

from __future__ import annotations

import copy

import pytest

from ray_efa_eks.tools import security_rules as sr
from ray_efa_eks.tools.layout import HELM_CHART_V4, HELM_RELEASE, UNKNOWN, Resource, Stack


def res(type_: str, name: str, **props) -> Resource:
    return Resource(type_, name, f"urn:pulumi:dev::p::{type_}::{name}", None, props)


def tmpl(labels=None, containers=None, **spec):
    t = {"spec": {"containers": containers if containers is not None else [{"name": "ray"}], **spec}}
    if labels is not None:
        t["metadata"] = {"labels": labels}
    return t


def ray_cluster(name="ray", ns="ray", head=None, workers=None, **meta):
    spec = {"headGroupSpec": {"template": head if head is not None else tmpl()}}
    if workers is not None:
        spec["workerGroupSpecs"] = workers
    return res(sr.RAY_CLUSTER, name, metadata={"name": name, "namespace": ns, **meta}, spec=spec)


def problems(violations) -> list[str]:
    return [v.problem for v in violations]


def said(violations, *fragments: str) -> None:
    """One violation, whose problem says each fragment (the decided values; not the whole wording)."""
    assert len(violations) == 1, problems(violations)
    for f in fragments:
        assert f in violations[0].problem


TOKEN_DEFAULT = ("mount a Kubernetes API token", "automountServiceAccountToken None", "service account default")
CLUSTER_WIDE = ("the operator watches every namespace with a ClusterRole (singleNamespaceInstall is not true)",)


# -- ray_pods and the label selectors of ray-pods-network-policy ------------------------------------------------------


def test_ray_pods_yields_head_and_each_worker_group_with_kuberays_labels():
    workers = [
        {"groupName": "gpu", "template": tmpl({"app": "w"})},
        {"template": tmpl()},
        "junk",
        {"groupName": "bad", "template": {"spec": "x"}},
        {"groupName": "none"},
    ]
    r = ray_cluster(head=tmpl({"app": "h", "ray.io/cluster": "spoofed"}), workers=workers)
    got = [(role, ns, labels) for _, role, ns, labels, _ in sr.ray_pods(Stack([r]))]
    assert got == [
        ("head", "ray", {"app": "h", "ray.io/cluster": "ray", "ray.io/node-type": "head"}),
        ("worker gpu", "ray", {"app": "w", "ray.io/cluster": "ray", "ray.io/node-type": "worker"}),
        ("worker ?", "ray", {"ray.io/cluster": "ray", "ray.io/node-type": "worker"}),
    ]


def test_ray_pods_skips_what_it_cannot_read():
    no_spec = res(sr.RAY_CLUSTER, "a", metadata={"name": "a"})
    no_name = res(sr.RAY_CLUSTER, "b", metadata={"name": UNKNOWN}, spec={"headGroupSpec": {"template": tmpl()}})
    bad_meta = res(sr.RAY_CLUSTER, "c", metadata="x", spec={"headGroupSpec": {"template": tmpl()}})
    assert list(sr.ray_pods(Stack([no_spec, no_name, bad_meta]))) == []
    default_ns = res(sr.RAY_CLUSTER, "d", metadata={"name": "d"}, spec={"headGroupSpec": {"template": tmpl()}})
    assert [(role, ns) for _, role, ns, _, _ in sr.ray_pods(Stack([default_ns]))] == [("head", "default")]


@pytest.mark.parametrize(
    "selector, labels, want",
    [
        (UNKNOWN, {"a": "1"}, None),
        ({}, {"a": "1"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "1"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
        ({"matchLabels": {"a": "1"}}, {}, False),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]}, {"a": "2"}, True),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]}, {"a": "2"}, False),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]}, {}, False),
        ({"matchExpressions": [{"key": "a", "operator": "In"}]}, {"a": "1"}, False),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {"a": "2"}, True),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {"a": "1"}, False),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {}, False),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {}, True),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": "1"}, False),
        (
            {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]},
            {"a": "2"},
            False,
        ),  # unknown operator
        ({"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "Exists"}]}, {"a": "1"}, False),
        (
            {"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "Exists"}]},
            {"a": "1", "b": ""},
            True,
        ),
    ],
)
def test_network_policy_selects_by_the_label_selector_semantics(selector, labels, want):
    """A NetworkPolicy of the head's namespace selects the head pod (labelled ``labels`` plus KubeRay's) as a
    Kubernetes label selector does; a selector only ``up`` knows may select it (the rule stays silent)."""
    v = sr.ray_pods_network_policy(Stack([ray_cluster(head=tmpl(labels)), netpol(podSelector=selector)]))
    assert len(v) == (0 if want in (True, None) else 1)
    if v:
        assert "namespace ray" in v[0].problem and "head pods" in v[0].problem


# -- gate-no-api-token -----------------------------------------------------------------------------------------------


def job(name="gate", ns="ray", **pod):
    return res(
        sr.JOB,
        name,
        metadata={"name": name, "namespace": ns},
        spec={"template": {"spec": {"containers": [{"name": "gate"}], **pod}}},
    )


def sa(name, ns="ray", mount=None):
    props = {"metadata": {"name": name, "namespace": ns}}
    if mount is not None:
        props["automountServiceAccountToken"] = mount
    return res("kubernetes:core/v1:ServiceAccount", name, **props)


TOKEN_VOL = {"name": "tok", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}


def test_gate_no_api_token_silent_on_the_stacks_gate():
    assert sr.gate_no_api_token(Stack([job(automountServiceAccountToken=False)])) == []
    assert sr.gate_no_api_token(Stack([job(automountServiceAccountToken=UNKNOWN)])) == []  # only up knows
    assert sr.gate_no_api_token(Stack([res(sr.JOB, "x", spec={"template": "?"})])) == []  # no readable pod spec
    # the account says no, the pod says nothing: no token
    assert sr.gate_no_api_token(Stack([job(serviceAccountName="gate"), sa("gate", mount=False)])) == []
    assert sr.gate_no_api_token(Stack([job(serviceAccount="gate"), sa("gate", mount=False)])) == []  # old field


def test_gate_no_api_token_each_way_a_token_gets_in():
    v = sr.gate_no_api_token(Stack([job()]))
    said(v, *TOKEN_DEFAULT)
    assert v[0].rule == "gate-no-api-token" and v[0].resource == f"{sr.JOB} gate" and v[0].fix == sr.GATE_TOKEN_FIX
    assert v[0].urn == "urn:pulumi:dev::p::kubernetes:batch/v1:Job::gate"
    assert problems(
        sr.gate_no_api_token(
            Stack([job(automountServiceAccountToken=True, serviceAccountName="g"), sa("g", mount=False)])
        )
    ) == ["its pods mount a Kubernetes API token (automountServiceAccountToken True, service account g)"]
    # the account that says no is in another namespace: it is not this pod's
    assert len(sr.gate_no_api_token(Stack([job(serviceAccountName="g"), sa("g", ns="other", mount=False)]))) == 1
    assert len(sr.gate_no_api_token(Stack([job(serviceAccountName="g"), sa("g", mount=True)]))) == 1
    assert len(sr.gate_no_api_token(Stack([job(serviceAccountName="g"), sa("g")]))) == 1


def test_gate_no_api_token_projected_volumes():
    mounted = job(
        automountServiceAccountToken=False,
        serviceAccountName="audit",
        volumes=[TOKEN_VOL, "junk"],
        containers=[{"name": "gate", "volumeMounts": [{"name": "tok"}, "junk"]}, {"volumeMounts": []}],
    )
    assert problems(sr.gate_no_api_token(Stack([mounted]))) == [
        "container gate mounts the projected token volume ['tok']"
    ]
    unnamed = job(
        automountServiceAccountToken=False,
        serviceAccountName="a",
        volumes=[TOKEN_VOL],
        containers=[{"volumeMounts": [{"name": "tok"}]}],
    )
    assert problems(sr.gate_no_api_token(Stack([unnamed]))) == ["container ? mounts the projected token volume ['tok']"]
    # projected into an init container only (not a main container), of a named account: allowed
    init_only = job(
        automountServiceAccountToken=False,
        serviceAccountName="audit",
        volumes=[TOKEN_VOL],
        initContainers=[{"name": "audit", "volumeMounts": [{"name": "tok"}]}],
    )
    assert sr.gate_no_api_token(Stack([init_only])) == []
    # ... of the default account: refused
    default_sa = job(automountServiceAccountToken=False, volumes=[TOKEN_VOL])
    said(
        sr.gate_no_api_token(Stack([default_sa])),
        "token of the namespace's default ServiceAccount",
        "is projected into its pods",
    )
    # a projected volume of config maps only is no token
    cm = {"name": "cm", "projected": {"sources": [{"configMap": {"name": "x"}}, None]}}
    no_token = job(
        automountServiceAccountToken=False,
        volumes=[cm, {"name": "e", "emptyDir": {}}],
        containers=[{"name": "gate", "volumeMounts": [{"name": "cm"}]}],
    )
    assert sr.gate_no_api_token(Stack([no_token])) == []


# -- ray-pods-network-policy -----------------------------------------------------------------------------------------


def netpol(name="np", ns="ray", **spec):
    meta = {"name": name} if ns is None else {"name": name, "namespace": ns}
    return res(sr.NETWORK_POLICY, name, metadata=meta, spec=spec)


SELECT_CLUSTER = {"matchLabels": {"ray.io/cluster": "ray"}}


def test_network_policy_selecting_every_ray_pod_is_silent():
    rc = ray_cluster(workers=[{"groupName": "gpu", "template": tmpl()}])
    assert sr.ray_pods_network_policy(Stack([rc, netpol(podSelector=SELECT_CLUSTER)])) == []
    assert sr.ray_pods_network_policy(Stack([rc, netpol(podSelector=UNKNOWN)])) == []  # unknown: silent
    assert sr.ray_pods_network_policy(Stack([rc])) == []  # no policies at all: the documented opt-out
    default = ray_cluster(ns="default")
    assert sr.ray_pods_network_policy(Stack([default, netpol(ns=None, podSelector={})])) == []


def test_network_policy_each_way_a_pod_is_left_out():
    rc = ray_cluster(workers=[{"groupName": "gpu", "template": tmpl()}])
    head_only = netpol(podSelector={"matchLabels": {"ray.io/node-type": "head"}})
    v = sr.ray_pods_network_policy(Stack([rc, head_only]))
    assert problems(v) == ["no NetworkPolicy of namespace ray selects the worker gpu pods"]
    assert v[0].rule == "ray-pods-network-policy" and v[0].fix == sr.NETPOL_FIX
    other_ns = netpol(ns="other", podSelector={})
    assert problems(sr.ray_pods_network_policy(Stack([rc, other_ns]))) == [
        "no NetworkPolicy of namespace ray selects the head pods",
        "no NetworkPolicy of namespace ray selects the worker gpu pods",
    ]
    egress_only = netpol(podSelector={}, policyTypes=["Egress"])
    assert len(sr.ray_pods_network_policy(Stack([rc, egress_only]))) == 2  # selects, but holds no ingress
    unread = res(sr.NETWORK_POLICY, "np", metadata={"namespace": "ray"}, spec=UNKNOWN)
    assert len(sr.ray_pods_network_policy(Stack([rc, unread]))) == 2
    both = netpol(podSelector={}, policyTypes=["Ingress", "Egress"])
    assert sr.ray_pods_network_policy(Stack([rc, both])) == []


# -- kuberay-single-namespace ----------------------------------------------------------------------------------------


def kuberay(values, chart="kuberay-operator", typ=HELM_RELEASE):
    return res(typ, "kuberay", chart=chart, values=values)


def test_kuberay_single_namespace_each_condition():
    rc = ray_cluster(ns="ray")
    ok = {"singleNamespaceInstall": True, "watchNamespace": ["ray"]}
    assert sr.kuberay_single_namespace(Stack([rc, kuberay(ok)])) == []
    oci = kuberay(ok, chart="oci://x/kuberay-operator", typ=HELM_CHART_V4)
    assert sr.kuberay_single_namespace(Stack([rc, oci])) == []
    cluster_wide = sr.kuberay_single_namespace(Stack([rc, kuberay({"watchNamespace": ["ray"]})]))
    assert problems(cluster_wide) == list(CLUSTER_WIDE)
    assert cluster_wide[0].fix == sr.KUBERAY_FIX and cluster_wide[0].rule == "kuberay-single-namespace"
    assert len(sr.kuberay_single_namespace(Stack([rc, kuberay({"singleNamespaceInstall": "true"})]))) == 1
    missing = sr.kuberay_single_namespace(
        Stack([rc, ray_cluster("b", ns="b"), kuberay({"singleNamespaceInstall": True, "watchNamespace": ["ray"]})])
    )
    assert problems(missing) == ["watchNamespace ['ray'] leaves out the RayCluster namespace(s) ['b']"]
    default_ns = res(sr.RAY_CLUSTER, "d", metadata={"name": "d"})
    assert problems(sr.kuberay_single_namespace(Stack([default_ns, kuberay(ok)]))) == [
        "watchNamespace ['ray'] leaves out the RayCluster namespace(s) ['default']"
    ]
    # single namespace without a list (the chart's default: the release namespace): not judged here
    assert sr.kuberay_single_namespace(Stack([rc, kuberay({"singleNamespaceInstall": True})])) == []
    # silent on what it cannot read or is not the operator
    assert sr.kuberay_single_namespace(Stack([rc, kuberay({"singleNamespaceInstall": UNKNOWN})])) == []
    assert (
        sr.kuberay_single_namespace(Stack([rc, kuberay({"singleNamespaceInstall": True, "watchNamespace": UNKNOWN})]))
        == []
    )
    assert sr.kuberay_single_namespace(Stack([rc, kuberay(UNKNOWN)])) == []
    assert sr.kuberay_single_namespace(Stack([rc, kuberay({}, chart="kuberay-apiserver")])) == []
    assert sr.kuberay_single_namespace(Stack([rc, kuberay({}, chart=UNKNOWN)])) == []


# -- ray-pods-region -------------------------------------------------------------------------------------------------

GOOD_ENV = [
    {"name": "AWS_REGION", "value": "us-east-1"},
    {"name": "AWS_DEFAULT_REGION", "value": "us-east-1"},
    {"name": "AWS_EC2_METADATA_DISABLED", "value": "true"},
]


def with_env(env, name="ray"):
    return ray_cluster(head=tmpl(containers=[{"name": name, "env": env}]))


def test_ray_pods_region_each_condition():
    assert sr.ray_pods_region(Stack([with_env(GOOD_ENV)])) == []
    assert sr.ray_pods_region(Stack([with_env(UNKNOWN)])) == []
    assert sr.ray_pods_region(Stack([ray_cluster(head=tmpl(containers=[{"name": "ray"}]))])) == []  # no env list
    unknown_value = [*GOOD_ENV[:2], {"name": "AWS_EC2_METADATA_DISABLED", "value": UNKNOWN}, "junk"]
    assert sr.ray_pods_region(Stack([with_env(unknown_value)])) == []
    v = sr.ray_pods_region(Stack([with_env([])]))
    assert problems(v) == ["container ray (head) lacks AWS_REGION, AWS_DEFAULT_REGION, AWS_EC2_METADATA_DISABLED=true"]
    assert v[0].rule == "ray-pods-region" and v[0].fix == sr.REGION_FIX
    off = [*GOOD_ENV[:2], {"name": "AWS_EC2_METADATA_DISABLED", "value": "false"}]
    assert problems(sr.ray_pods_region(Stack([with_env(off)]))) == [
        "container ray (head) lacks AWS_EC2_METADATA_DISABLED=true"
    ]
    assert problems(sr.ray_pods_region(Stack([with_env(GOOD_ENV[1:])]))) == ["container ray (head) lacks AWS_REGION"]
    nameless = ray_cluster(head=tmpl(containers=[{"env": GOOD_ENV[:1] + GOOD_ENV[2:]}]))
    assert problems(sr.ray_pods_region(Stack([nameless]))) == ["container ? (head) lacks AWS_DEFAULT_REGION"]


def test_ray_pods_region_a_container_only_a_preview_knows_is_passed_over():
    """A preview can hand over a container that is itself unknown: the rule reads it as nothing, not a crash
    (it called ``.get`` on it before checking it was a mapping: AttributeError before the fix)."""
    assert sr.ray_pods_region(Stack([ray_cluster(head=tmpl(containers=[UNKNOWN, "junk"]))])) == []
    # the same in the gate's Job (gate-no-api-token read each container's volumeMounts)
    gate = job(automountServiceAccountToken=False, serviceAccountName="a", volumes=[TOKEN_VOL], containers=[UNKNOWN])
    assert sr.gate_no_api_token(Stack([gate])) == []


# -- device-plugin-versions ------------------------------------------------------------------------------------------


def chart(name, version, values=None, typ=HELM_RELEASE):
    return res(typ, name, chart=name, version=version, values=values if values is not None else {})


P6 = res("eks:index:ManagedNodeGroup", "gpu", instanceTypes=["p6-b200.48xlarge"])
P6_LT = res("aws:ec2/launchTemplate:LaunchTemplate", "lt", instanceType="p6-b200.48xlarge")


def test_efa_plugin_versions_on_p6_b200():
    old = chart("aws-efa-k8s-device-plugin", "v0.5.9")
    v = sr.device_plugin_versions(Stack([P6, old]))
    assert len(v) == 1 and v[0].problem.startswith("chart v0.5.9 on p6-b200.48xlarge: EFA device plugin images before")
    assert v[0].rule == "device-plugin-versions" and v[0].fix == sr.PLUGINS_FIX
    assert len(sr.device_plugin_versions(Stack([P6_LT, old]))) == 1  # the type in a launch template
    assert sr.device_plugin_versions(Stack([P6, chart("aws-efa-k8s-device-plugin", "v0.5.10")])) == []  # the floor
    assert (
        sr.device_plugin_versions(Stack([res("eks:index:ManagedNodeGroup", "g", instanceTypes=["g6.12xlarge"]), old]))
        == []
    )
    # the chart's own allow-list, when set, says where the plugin runs
    listed = chart(
        "oci://x/aws-efa-k8s-device-plugin",
        "0.5.9",
        {"supportedInstanceLabels": {"values": ["p6-b200.48xlarge"]}},
        typ=HELM_CHART_V4,
    )
    assert len(sr.device_plugin_versions(Stack([listed]))) == 1
    elsewhere = chart("aws-efa-k8s-device-plugin", "0.5.9", {"supportedInstanceLabels": {"values": ["p5.48xlarge"]}})
    assert sr.device_plugin_versions(Stack([P6, elsewhere])) == []
    unknown_list = chart("aws-efa-k8s-device-plugin", "0.5.9", {"supportedInstanceLabels": {"values": UNKNOWN}})
    assert len(sr.device_plugin_versions(Stack([P6, unknown_list]))) == 1  # falls back to the stack's types
    assert len(sr.device_plugin_versions(Stack([P6, chart("aws-efa-k8s-device-plugin", "0.5.9", UNKNOWN)]))) == 1


@pytest.mark.parametrize(
    "version, values, bad",
    [
        ("0.19.0", {}, True),
        ("0.19.2", {"mofedEnabled": True}, True),
        ("v0.19.1", {"mofedEnabled": "false"}, True),
        ("0.19.1", {"mofedEnabled": False}, False),
        ("0.19.1", {"mofedEnabled": UNKNOWN}, False),
        ("0.18.9", {}, False),
        ("0.19.3", {}, False),
        ("0.19.1", UNKNOWN, True),
    ],
)
def test_nvidia_plugin_mofed_versions(version, values, bad):
    v = sr.device_plugin_versions(Stack([chart("nvidia-device-plugin", version, values)]))
    assert len(v) == int(bad)
    if bad:
        mofed = values.get("mofedEnabled") if isinstance(values, dict) else None
        assert v[0].problem.startswith(
            f"chart {version} with mofedEnabled {mofed!r} injects every /dev/infiniband/uverbs*"
        )


def test_device_plugin_versions_silent_on_what_it_cannot_read():
    assert sr.device_plugin_versions(Stack([P6, chart("aws-efa-k8s-device-plugin", UNKNOWN)])) == []
    assert sr.device_plugin_versions(Stack([P6, res(HELM_RELEASE, "x", chart=UNKNOWN, version="0.5.9")])) == []
    assert sr.device_plugin_versions(Stack([P6, chart("aws-efa-k8s-device-plugin", "0.5")])) == []  # not a version
    assert sr.device_plugin_versions(Stack([P6, chart("other-chart", "0.5.9")])) == []


# -- pod-security-baseline -------------------------------------------------------------------------------------------


def test_pod_security_baseline_judges_the_head_and_jobs_only():
    priv = tmpl(hostNetwork=True)
    v = sr.pod_security_baseline(Stack([ray_cluster(head=priv)]))
    assert len(v) == 1 and v[0].problem.startswith("head: ") and "hostNetwork" in v[0].problem
    assert v[0].rule == "pod-security-baseline" and v[0].fix == sr.PSS_FIX
    # a worker may need more (EFA, GPUs): not judged by this rule
    assert sr.pod_security_baseline(Stack([ray_cluster(workers=[{"groupName": "gpu", "template": priv}])])) == []
    gate = res(sr.JOB, "gate", spec={"template": copy.deepcopy(priv)})
    v = sr.pod_security_baseline(Stack([gate]))
    assert len(v) == 1 and v[0].problem.startswith("pod: ") and v[0].resource == f"{sr.JOB} gate"
    assert sr.pod_security_baseline(Stack([ray_cluster(), res(sr.JOB, "ok", spec={"template": tmpl()})])) == []
    assert (
        sr.pod_security_baseline(
            Stack(
                [res(sr.JOB, "u", spec={"template": UNKNOWN}), res(sr.JOB, "s", spec={"template": {"spec": UNKNOWN}})]
            )
        )
        == []
    )


# -- each rule reads on past what it passes over ---------------------------------------------------------------------


def test_gate_no_api_token_judges_the_jobs_after_one_it_cannot_read():
    unread = [res(sr.JOB, "a", spec={"template": "?"}), job("b", automountServiceAccountToken=UNKNOWN)]
    said(sr.gate_no_api_token(Stack([*unread, job("c")])), *TOKEN_DEFAULT)
    # a container only up knows, then one that mounts the token
    later = job(
        automountServiceAccountToken=False,
        serviceAccountName="a",
        volumes=[TOKEN_VOL],
        containers=[UNKNOWN, {"name": "gate", "volumeMounts": [{"name": "tok"}]}],
    )
    assert problems(sr.gate_no_api_token(Stack([later]))) == [
        "container gate mounts the projected token volume ['tok']"
    ]


def test_gate_no_api_token_an_unnamed_service_account_is_not_the_pods_default():
    """A ServiceAccount with no name in the program (autonamed: only up knows it) that turns the token off is not the
    account of a pod that names none: that pod runs as ``default``, which mounts a token."""
    unnamed = res(
        "kubernetes:core/v1:ServiceAccount", "x", metadata={"namespace": "ray"}, automountServiceAccountToken=False
    )
    said(sr.gate_no_api_token(Stack([job(), unnamed])), *TOKEN_DEFAULT)


def test_kuberay_single_namespace_judges_the_releases_after_one_it_passes_over():
    rc = ray_cluster(ns="ray")
    bad = kuberay({"watchNamespace": ["ray"]})
    passed_over = (
        kuberay({}, chart="kuberay-apiserver"),
        kuberay(UNKNOWN),
        kuberay({"singleNamespaceInstall": UNKNOWN}),
    )
    for first in passed_over:
        said(sr.kuberay_single_namespace(Stack([rc, first, bad])), *CLUSTER_WIDE)


def test_ray_pods_region_judges_the_containers_after_one_without_env():
    rc = ray_cluster(head=tmpl(containers=[{"name": "sidecar"}, {"name": "ray", "env": []}]))
    assert problems(sr.ray_pods_region(Stack([rc]))) == [
        "container ray (head) lacks AWS_REGION, AWS_DEFAULT_REGION, AWS_EC2_METADATA_DISABLED=true"
    ]


def test_device_plugin_versions_judges_the_charts_after_one_it_cannot_read():
    old = chart("aws-efa-k8s-device-plugin", "v0.5.9")
    for first in (chart("aws-efa-k8s-device-plugin", UNKNOWN), chart("aws-efa-k8s-device-plugin", "0.5")):
        v = sr.device_plugin_versions(Stack([P6, first, old]))
        assert [x.problem.split(":")[0] for x in v] == ["chart v0.5.9 on p6-b200.48xlarge"]


def test_nvidia_plugin_mofed_message_names_the_issue():
    v = sr.device_plugin_versions(Stack([chart("nvidia-device-plugin", "0.19.0", {})]))
    said(
        v,
        "chart 0.19.0 with mofedEnabled None",
        "/dev/infiniband/uverbs*",
        "every GPU container",
        "NVIDIA/k8s-device-plugin#1692",
    )


def test_pod_security_baseline_judges_the_jobs_after_one_it_cannot_read():
    bad = res(sr.JOB, "gate", spec={"template": tmpl(hostNetwork=True)})
    v = sr.pod_security_baseline(Stack([res(sr.JOB, "u", spec={"template": UNKNOWN}), bad]))
    assert len(v) == 1 and v[0].resource == f"{sr.JOB} gate" and "hostNetwork" in v[0].problem


def test_kuberay_single_namespace_judges_an_oci_chart_v4_and_names_rule_and_fix():
    """The operator installed as a helm.sh/v4 Chart from an OCI reference is judged like a Release (the chart's last
    path component), and the leaves-out problem carries the rule's id and fix like the cluster-wide one."""
    rc, b = ray_cluster(ns="ray"), ray_cluster("b", ns="b")
    oci = kuberay(
        {"singleNamespaceInstall": True, "watchNamespace": ["ray"]}, chart="oci://x/kuberay-operator", typ=HELM_CHART_V4
    )
    (v,) = sr.kuberay_single_namespace(Stack([rc, b, oci]))
    assert v.problem == "watchNamespace ['ray'] leaves out the RayCluster namespace(s) ['b']"
    assert (v.rule, v.fix, v.resource) == ("kuberay-single-namespace", sr.KUBERAY_FIX, f"{HELM_CHART_V4} kuberay")


def test_ray_pods_reads_the_clusters_after_one_it_cannot_read():
    no_spec = res(sr.RAY_CLUSTER, "a", metadata={"name": "a"})
    assert [(r.name, role) for r, role, _, _, _ in sr.ray_pods(Stack([no_spec, ray_cluster("b")]))] == [("b", "head")]


def test_every_violation_carries_its_rules_id_and_fix():
    """The id routes a violation to its CrossGuard policy and `check-rules` line; the fix is what the reader does.
    Each problem of a rule that has several wordings, not only the first."""
    mounted = job(
        automountServiceAccountToken=False,
        volumes=[TOKEN_VOL],
        containers=[{"name": "gate", "volumeMounts": [{"name": "tok"}]}],
    )
    mofed = chart("nvidia-device-plugin", "0.19.0", {})
    got = [*sr.gate_no_api_token(Stack([mounted])), *sr.device_plugin_versions(Stack([mofed]))]
    assert [(v.problem.split(" ")[0], v.rule, v.fix) for v in got] == [
        ("container", "gate-no-api-token", sr.GATE_TOKEN_FIX),
        ("a", "gate-no-api-token", sr.GATE_TOKEN_FIX),
        ("chart", "device-plugin-versions", sr.PLUGINS_FIX),
    ]


def test_every_violation_names_the_resource_it_judged():
    """The resource (and its URN) is where the plan and CrossGuard point the reader: each way each rule reports."""
    rc = ray_cluster(workers=[{"groupName": "gpu", "template": tmpl()}])
    mounted = job(
        automountServiceAccountToken=False,
        serviceAccountName="a",
        volumes=[TOKEN_VOL],
        containers=[{"name": "gate", "volumeMounts": [{"name": "tok"}]}],
    )
    default_sa = job(automountServiceAccountToken=False, volumes=[TOKEN_VOL])
    efa, mofed = chart("aws-efa-k8s-device-plugin", "v0.5.9"), chart("nvidia-device-plugin", "0.19.0", {})
    wide = kuberay({"watchNamespace": ["ray"]})
    cases = [
        (sr.gate_no_api_token(Stack([job()])), job()),
        (sr.gate_no_api_token(Stack([mounted])), mounted),
        (sr.gate_no_api_token(Stack([default_sa])), default_sa),
        (sr.ray_pods_network_policy(Stack([rc, netpol(podSelector={"matchLabels": {"x": "y"}})])), rc),
        (sr.kuberay_single_namespace(Stack([rc, wide])), wide),
        (sr.ray_pods_region(Stack([with_env([])])), with_env([])),
        (sr.device_plugin_versions(Stack([P6, efa])), efa),
        (sr.device_plugin_versions(Stack([mofed])), mofed),
    ]
    for got, judged in cases:
        assert got and all((v.resource, v.urn) == (judged.label, judged.urn) for v in got), (judged.label, got)


# -- monitoring-hardened ----------------------------------------------------------------------------------------------

KPS_HTTP = (
    "reloadStrategy 'HTTP (the chart default)': prometheus-operator starts Prometheus with --web.enable-lifecycle "
    "(POST /-/quit, /-/reload)"
)
DCGM_SYS_ADMIN = "the exporter gets SYS_ADMIN (the chart's default securityContext adds it for DCGM_FI_PROF_* counters)"


def release(chart_ref, values, ns="monitoring", name=None, typ=HELM_RELEASE):
    props = {"chart": chart_ref, "values": values}
    if ns is not None:
        props["namespace"] = ns
    return res(typ, name or chart_ref.split("/")[-1], **props)


def kps(strategy=None, **kw):
    spec = {} if strategy is None else {"reloadStrategy": strategy}
    return release("kube-prometheus-stack", {"prometheus": {"prometheusSpec": spec}}, **kw)


def dcgm(ctx=None, **kw):
    return release("dcgm-exporter", {} if ctx is None else {"securityContext": ctx}, **kw)


@pytest.mark.parametrize(
    "resources, want",
    [
        ([kps("ProcessSignal"), dcgm({"capabilities": {"add": []}})], []),
        ([kps()], [KPS_HTTP]),
        ([kps("HTTP")], [KPS_HTTP.replace("'HTTP (the chart default)'", "'HTTP'")]),
        ([kps(UNKNOWN)], []),  # a preview's unknown: passed over
        # an OCI chart (helm.sh/v4 Chart) is judged by its last path component, and only that
        ([release("oci://ghcr.io/x/kube-prometheus-stack", {}, typ=HELM_CHART_V4)], [KPS_HTTP]),
        ([release("oci://ghcr.io/x/not-kube-prometheus-stack", {}, typ=HELM_CHART_V4)], []),
        ([release("kube-prometheus-stack", "junk")], []),
        ([dcgm()], [DCGM_SYS_ADMIN]),
        ([dcgm("junk")], [DCGM_SYS_ADMIN]),
        ([dcgm({"capabilities": {"add": ["NET_RAW", "SYS_ADMIN"]}})], [DCGM_SYS_ADMIN]),
        ([dcgm({"privileged": True, "capabilities": {"add": []}})], ["the exporter runs privileged"]),
        # what a preview cannot know is passed over, and the releases after it are still judged
        (
            [dcgm({"capabilities": {"add": UNKNOWN}}, name="a"), dcgm({"privileged": True})],
            ["the exporter runs privileged"],
        ),
        ([dcgm({"privileged": UNKNOWN}, name="a"), dcgm()], [DCGM_SYS_ADMIN]),
    ],
)
def test_monitoring_hardened_judges_each_chart(resources, want):
    got = sr.monitoring_hardened(Stack(resources))
    assert problems(got) == want
    assert all(
        (v.rule, v.fix, v.resource, v.urn)
        == ("monitoring-hardened", sr.MONITORING_FIX, resources[-1].label, resources[-1].urn)
        for v in got
    )


SAFE = [kps("ProcessSignal"), dcgm({"capabilities": {"add": []}}, ns="gpu-metrics")]


@pytest.mark.parametrize(
    "policies, want",
    [
        ([], []),  # networkPolicy: false, the documented opt-out: not judged
        ([netpol(ns="monitoring", podSelector={}), netpol(ns="gpu-metrics", podSelector={})], []),
        (
            [netpol(ns="monitoring", podSelector={})],
            [("dcgm-exporter", "no NetworkPolicy of namespace gpu-metrics selects its pods")],
        ),
        (
            [netpol(ns="ray", podSelector={}), netpol(ns="monitoring", podSelector={"matchLabels": {"app": "x"}})],
            [
                ("kube-prometheus-stack", "no NetworkPolicy of namespace monitoring selects its pods"),
                ("dcgm-exporter", "no NetworkPolicy of namespace gpu-metrics selects its pods"),
            ],
        ),
    ],
)
def test_monitoring_hardened_wants_a_network_policy_over_both_namespaces(policies, want):
    got = sr.monitoring_hardened(Stack([*SAFE, *policies]))
    assert [(v.resource.split(" ")[-1], v.problem) for v in got] == want
    assert all((v.rule, v.fix) == ("monitoring-hardened", sr.MONITORING_FIX) for v in got)


def test_monitoring_hardened_judges_the_namespaces_after_one_it_cannot_read():
    unnamed = kps("ProcessSignal", ns=None, name="a")
    got = sr.monitoring_hardened(Stack([unnamed, kps("ProcessSignal"), netpol(ns="ray", podSelector={})]))
    assert [(v.resource, v.urn, v.problem) for v in got] == [
        (kps().label, kps().urn, "no NetworkPolicy of namespace monitoring selects its pods")
    ]


# -- node-role-least-privilege ----------------------------------------------------------------------------------------

EC2_TRUST = (
    '{"Statement": [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]}'
)
CNI = "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy"
ECR_READ = "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly"


def role(name, trust=EC2_TRUST, role_name=None, id_=None):
    props = {"assumeRolePolicy": trust, **({"name": role_name} if role_name else {})}
    return Resource("aws:iam/role:Role", name, f"urn:pulumi:dev::p::aws:iam/role:Role::{name}", None, props, id=id_)


def attach(name, role_ref, policy):
    return res("aws:iam/rolePolicyAttachment:RolePolicyAttachment", name, role=role_ref, policyArn=policy)


@pytest.mark.parametrize(
    "resources, want",
    [
        # the role named by its resource name, its IAM name or its id; each EC2 role counts
        (
            [
                role("gpu"),
                role("sys", role_name="sys-role-123"),
                attach("a", "gpu", CNI),
                attach("b", "sys-role-123", ECR_READ),
            ],
            {"a": "AmazonEKS_CNI_Policy", "b": "AmazonEC2ContainerRegistryReadOnly"},
        ),
        ([role("gpu", id_="gpu-role-id"), attach("a", "gpu-role-id", CNI)], {"a": "AmazonEKS_CNI_Policy"}),
        # a policy is judged by its name, the ARN's last part (under a path too)
        (
            [role("gpu"), attach("a", "gpu", "arn:aws:iam::123456789012:policy/team/AmazonEKS_CNI_Policy")],
            {"a": "AmazonEKS_CNI_Policy"},
        ),
        ([role("gpu"), attach("a", "gpu", "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryPullOnly")], {}),
        ([role("gpu"), attach("a", "gpu", UNKNOWN)], {}),
        # not a node role: trusted by another service, by an AWS principal whatever its name, or unreadable
        ([role("ci", '{"Statement": [{"Principal": {"Service": "eks.amazonaws.com"}}]}'), attach("a", "ci", CNI)], {}),
        (
            [
                role("x", '{"Statement": [{"Principal": {"AWS": "arn:aws:iam::1:role/ec2.amazonaws.com"}}]}'),
                attach("a", "x", CNI),
            ],
            {},
        ),
        ([role("bad", "{not json"), attach("a", "bad", CNI)], {}),
        ([role("bad", {"Statement": "x"}), attach("a", "bad", CNI)], {}),
        ([attach("a", None, CNI), role("gpu")], {}),
    ],
)
def test_node_role_least_privilege_each_condition(resources, want):
    got = sr.node_role_least_privilege(Stack(resources))
    by_name = {r.name: r for r in resources}
    assert {
        v.resource.split(" ")[-1]: v.problem.split(":")[0].removeprefix("the node role holds ") for v in got
    } == want
    for v in got:
        a = by_name[v.resource.split(" ")[-1]]
        name = want[a.name]
        assert (v.rule, v.fix, v.resource, v.urn, v.severity) == (
            "node-role-least-privilege",
            sr.NODE_ROLE_FIX,
            a.label,
            a.urn,
            sr.WARNING,
        )
        assert v.problem == f"the node role holds {name}: {sr.NODE_ROLE_EXTRA[name]}"
