"""Each layout rule: a failing and a passing case, on mock records and on the shape a real preview has."""

from __future__ import annotations

import copy
from typing import Any, Callable

import pytest

from ray_efa_eks.tools import layout, layout_network, layout_node_groups, rules
from ray_efa_eks.components.config.config import ConfigError, StackConfig
from ray_efa_eks.tools.layout import (
    INGRESS,
    MNG,
    RAY_CLUSTER,
    SERVICE,
    SG_EGRESS,
    SUBNET,
    Resource,
    from_mockrun,
    from_policy,
)
from ray_efa_eks.tools.mockrun import run_program
from tests.helpers.preview_shapes import CLUSTER_SG, LAUNCH_TEMPLATE, UNKNOWN_STR, edit, policy_resources, preview_specs


def check(resources: list[Resource], rule: str) -> list[rules.Violation]:
    return rules.check(resources, only=[rule])


def mutate(resources: list[Resource], typ: str, name: str, fn: Callable[[dict[str, Any]], None]) -> list[Resource]:
    """Copy of ``resources`` where ``fn`` edits the props of the one ``typ``/``name``."""
    out, hits = [], 0
    for r in resources:
        if r.type == typ and r.name == name:
            props = copy.deepcopy(r.props)
            fn(props)
            r = Resource(r.type, r.name, r.urn, r.parent, props, r.id, r.deps)
            hits += 1
        out.append(r)
    assert hits == 1, f"no {typ} {name}"
    return out


def extra(name: str, typ: str, props: dict[str, Any]) -> Resource:
    return Resource(typ, name, f"urn:pulumi:dev::ray-efa-eks::{typ}::{name}", None, props, f"{name}-id")


def preview(**kw: Any) -> list[Resource]:
    return from_policy(policy_resources(preview_specs(**kw)))


def raycluster_spec(props: dict[str, Any]) -> dict[str, Any]:
    return props["spec"]


def worker(props: dict[str, Any]) -> dict[str, Any]:
    return props["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]


def head(props: dict[str, Any]) -> dict[str, Any]:
    return props["spec"]["headGroupSpec"]


@pytest.fixture(scope="module")
def default(default_run) -> list[Resource]:
    return from_mockrun(default_run)


@pytest.fixture(scope="module")
def efa_off() -> list[Resource]:
    return from_mockrun(run_program({"efa": "false", "efaCheck": "false"}))


def test_default_p5_and_efa_off_stacks_pass(default, p5_run, efa_off):
    assert rules.check(default) == []
    assert rules.check(from_mockrun(p5_run)) == []
    assert rules.check(efa_off) == []


@pytest.mark.parametrize("kw", [{}, {"instance_type": "p5.48xlarge"}, {"subnet_ids_known": False, "sg_known": False}])
def test_preview_shape_passes(kw):
    assert rules.check(preview(**kw)) == []


def test_unknown_rule_id_is_refused(default):
    with pytest.raises(ValueError, match="unknown rule.*known: gpu-one-az"):
        rules.check(default, only=["no-such-rule"])


def test_violation_is_one_line_with_rule_resource_and_fix():
    v = rules.Violation(
        "one-image", "kubernetes:ray.io/v1:RayCluster ray", "head runs a but worker group gpu runs b", "use one"
    )
    assert (
        v.line()
        == "[one-image] kubernetes:ray.io/v1:RayCluster ray: head runs a but worker group gpu runs b. Fix: use one"
    )
    assert "\n" not in v.line()


# -- gpu-one-az ----------------------------------------------------------------------------------------------------


def _two_subnets(props: dict[str, Any]) -> None:
    props["subnetIds"] = ["subnet-net-private-us-east-1a", "subnet-net-private-us-east-1b"]


def _pulumi_eks_efa(props: dict[str, Any], az: str = "us-east-1a") -> None:
    """The node group as pulumi-eks's enableEfaSupport shape: no launch template of ours, pulumi-eks filters subnets."""
    props.pop("launchTemplate")
    props.update(enableEfaSupport=True, placementGroupAvailabilityZone=az)


def test_gpu_one_az_fails_when_gpu_subnets_span_two_azs_without_efa_filter(default):
    # Our node group gets the already-filtered subnet list: two AZs there is two AZs for the nodes.
    [v] = check(mutate(default, MNG, "gpu-mng", _two_subnets), "gpu-one-az")
    assert v.resource == f"{MNG} gpu-mng"
    assert "us-east-1a" in v.problem and "us-east-1b" in v.problem and "Network.gpu_subnet_id" in v.fix


def test_gpu_one_az_passes_when_pulumi_eks_filters_to_the_placement_az(default):
    # enableEfaSupport + placementGroupAvailabilityZone: pulumi-eks keeps only the placement AZ's subnets.
    def pulumi_eks_two_subnets(props):
        _two_subnets(props)
        _pulumi_eks_efa(props)

    assert check(mutate(default, MNG, "gpu-mng", pulumi_eks_two_subnets), "gpu-one-az") == []


def test_gpu_one_az_fails_when_no_subnet_is_in_the_placement_az(default):
    def wrong_az(props):
        _pulumi_eks_efa(props, "us-east-1d")

    [v] = check(mutate(default, MNG, "gpu-mng", wrong_az), "gpu-one-az")
    assert "none of its subnets is in placementGroupAvailabilityZone us-east-1d" in v.problem


def test_gpu_one_az_fails_for_gpu_node_groups_in_different_azs(default):
    gpu = next(r for r in default if r.type == MNG and r.name == "gpu-mng")
    props = copy.deepcopy(gpu.props)
    props.update(subnetIds=["subnet-net-private-us-east-1b"], placementGroupAvailabilityZone="us-east-1b")
    second = Resource(MNG, "gpu2-mng", gpu.urn.replace("gpu-mng", "gpu2-mng"), gpu.parent, props, "gpu2-id")
    [v] = check(default + [second], "gpu-one-az")
    assert v.resource == "stack" and "us-east-1a: gpu-mng" in v.problem and "us-east-1b: gpu2-mng" in v.problem


def test_gpu_one_az_system_node_group_may_span_azs(default):
    system = next(r for r in default if r.type == MNG and r.name == "system-mng")
    assert len(system.props["subnetIds"]) == 2 and check(default, "gpu-one-az") == []


def test_gpu_one_az_preview_shape():
    [v] = check(preview(subnet_azs=("us-east-1a", "us-east-1b")), "gpu-one-az")
    assert v.resource == f"{MNG} gpu-mng" and "2 AZs" in v.problem
    # subnet ids unknown during the first preview: the node group's dependencies name the candidates, which
    # pulumi-eks will filter to the placement AZ, so two candidate AZs cannot be judged yet...
    assert check(preview(subnet_azs=("us-east-1a", "us-east-1b"), subnet_ids_known=False), "gpu-one-az") == []
    # ...but one candidate AZ is known to be the AZ.
    st = layout.Stack(preview(subnet_ids_known=False))
    assert [g.azs for g in layout_node_groups.gpu_node_groups(st)] == [["us-east-1a"]]


def test_gpu_one_az_preview_without_placement_group_judges_the_candidates():
    specs = [
        s
        for s in preview_specs(subnet_azs=("us-east-1a", "us-east-1b"), subnet_ids_known=False)
        if s["type"] != "aws:ec2/placementGroup:PlacementGroup"
    ]
    [v] = check(from_policy(policy_resources(specs)), "gpu-one-az")
    assert "2 AZs" in v.problem


# -- efa-interfaces ------------------------------------------------------------------------------------------------


def test_efa_interfaces_fails_when_node_group_lacks_efa_but_pods_request_it(default):
    def no_efa(props):
        props.pop("networkInterfaces")

    [v] = check(mutate(default, LAUNCH_TEMPLATE, "gpu-lt", no_efa), "efa-interfaces")
    assert v.resource == f"{MNG} gpu-mng" and "no EFA interface (launch template)" in v.problem
    assert "requests vpc.amazonaws.com/efa" in v.problem and "efa_network_interfaces" in v.fix


def test_efa_interfaces_preview_shape_reads_the_launch_template():
    [v] = check(preview(efa_count=0), "efa-interfaces")
    assert v.resource == f"{MNG} gpu-mng" and "(launch template)" in v.problem
    st = layout.Stack(preview(instance_type="p5.48xlarge"))
    assert [g.efa_interfaces for g in layout_node_groups.gpu_node_groups(st)] == [32]


def test_efa_interfaces_fails_when_pods_request_more_than_the_nodes_have():
    [v] = check(preview(pod_instance_type="p5.48xlarge"), "efa-interfaces")
    assert v.resource == f"{RAY_CLUSTER} ray-raycluster"
    assert "requests 32 vpc.amazonaws.com/efa" in v.problem and "has 1 per node" in v.problem


def test_efa_interfaces_from_the_programs_own_launch_template(default, p5_run):
    """The program's node group names its own launch template; the rule counts that template's EFA interfaces."""
    for resources, count in ((default, 1), (from_mockrun(p5_run), 32)):
        [g] = layout_node_groups.gpu_node_groups(layout.Stack(resources))
        assert (g.efa_interfaces, g.efa_source, g.security_group_ids) == (
            count,
            "launch template",
            ["sg-ray-efa-dev-cluster"],
        )
        assert g.placement_strategy == "cluster" and g.capacity_type == "ON_DEMAND" and g.reservation is None
    # one interface short of what the p5 pods request
    short = mutate(from_mockrun(p5_run), LAUNCH_TEMPLATE, "gpu-lt", lambda p: p["networkInterfaces"].pop())
    [v] = check(short, "efa-interfaces")
    assert "requests 32 vpc.amazonaws.com/efa" in v.problem and "has 31 per node" in v.problem


def test_efa_interfaces_from_pulumi_eks_enable_efa_support(default):
    """The pulumi-eks shape still reads: enableEfaSupport without a launch template means the catalogue's count."""
    st = layout.Stack(mutate(default, MNG, "gpu-mng", _pulumi_eks_efa))
    [g] = layout_node_groups.gpu_node_groups(st)
    assert (g.efa_interfaces, g.efa_source, g.placement_strategy) == (1, "pulumi-eks enableEfaSupport", "cluster")
    assert check(st, "efa-interfaces") == []


@pytest.mark.parametrize("capacity", ["on-demand", "reservation", "capacity-block"])
@pytest.mark.parametrize("shape", ["own", "pulumi-eks"])
def test_preview_shapes_of_both_launch_templates_pass_and_read_alike(shape, capacity):
    if shape == "pulumi-eks" and capacity != "on-demand":
        pytest.skip(
            "pulumi-eks's enableEfaSupport has no reservation target (why the stack builds its own launch template)"
        )
    st = layout.Stack(preview(instance_type="p5.48xlarge", shape=shape, capacity=capacity))
    [g] = layout_node_groups.gpu_node_groups(st)
    assert g.efa_interfaces == 32 and g.security_group_ids == [CLUSTER_SG] and g.azs == ["us-east-1a"]
    assert g.placement_strategy == ("cluster" if capacity == "on-demand" else None)
    assert g.capacity_type == ("CAPACITY_BLOCK" if capacity == "capacity-block" else "ON_DEMAND")
    assert g.market_type == ("capacity-block" if capacity == "capacity-block" else None)
    assert g.reservation == (None if capacity == "on-demand" else "cr-0123456789abcdef0")
    assert rules.check(st) == []
    # the rules read our template in a preview too: no interfaces -> a violation
    no_efa = preview(instance_type="p5.48xlarge", shape=shape, capacity=capacity, efa_count=0)
    assert [(v.rule, v.resource) for v in rules.check(no_efa)] == [("efa-interfaces", f"{MNG} gpu-mng")]


def test_efa_interfaces_not_required_when_efa_is_off(efa_off):
    assert layout_network.efa_intent(layout.Stack(efa_off)) == []
    assert check(efa_off, "efa-interfaces") == []


# -- efa-sg-self-rule ----------------------------------------------------------------------------------------------


def test_efa_sg_self_rule_fails_without_the_egress_rule(default):
    without = [r for r in default if r.type != SG_EGRESS]
    [v] = check(without, "efa-sg-self-rule")
    assert v.resource == f"{MNG} gpu-mng" and "no security group has an all-traffic egress rule to itself" in v.problem
    assert "SecurityGroupEgressRule" in v.fix


@pytest.mark.parametrize(
    "edit_props,expect",
    [
        ({"ipProtocol": "tcp"}, "allow only some protocols"),
        ({"referencedSecurityGroupId": "sg-somewhere-else"}, "no security group has an all-traffic egress rule"),
    ],
)
def test_efa_sg_self_rule_fails_for_partial_or_foreign_rules(default, edit_props, expect):
    [v] = check(mutate(default, SG_EGRESS, "gpu-efa-self-egress", lambda p: p.update(edit_props)), "efa-sg-self-rule")
    assert expect in v.problem


def test_efa_sg_self_rule_preview_shape_checks_the_interfaces_group():
    specs = edit(
        preview_specs(),
        SG_EGRESS,
        "gpu-efa-self-egress",
        securityGroupId="sg-other",
        referencedSecurityGroupId="sg-other",
    )
    [v] = check(from_policy(policy_resources(specs)), "efa-sg-self-rule")
    assert f"the EFA interfaces join {CLUSTER_SG}" in v.problem
    assert check(preview(), "efa-sg-self-rule") == []
    assert check(preview(self_rule=False), "efa-sg-self-rule")[0].rule == "efa-sg-self-rule"


def test_efa_sg_self_rule_preview_with_unknown_group_ids_is_not_a_violation():
    # First preview: the cluster SG does not exist yet, so both ids are unknown; only `up` can tell.
    assert check(preview(sg_known=False), "efa-sg-self-rule") == []


def test_efa_sg_self_rule_inline_security_group_needs_ingress_too():
    specs = preview_specs(self_rule=False)
    specs.append(
        {
            "type": "aws:ec2/securityGroup:SecurityGroup",
            "name": "efa-sg",
            "urn": "urn:pulumi:dev::p::aws:ec2/securityGroup:SecurityGroup::efa-sg",
            "parent": None,
            "props": {"id": CLUSTER_SG, "egress": [{"protocol": "-1", "self": True, "fromPort": 0, "toPort": 0}]},
        }
    )
    [v] = check(from_policy(policy_resources(specs)), "efa-sg-self-rule")
    assert "no all-traffic ingress rule from itself" in v.problem
    specs[-1]["props"]["ingress"] = [{"protocol": "-1", "self": True, "fromPort": 0, "toPort": 0}]
    assert check(from_policy(policy_resources(specs)), "efa-sg-self-rule") == []


def test_efa_sg_self_rule_not_required_when_efa_is_off(efa_off):
    assert not [r for r in efa_off if r.type == SG_EGRESS] and check(efa_off, "efa-sg-self-rule") == []


# -- gpu-capacity --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def block() -> list[Resource]:
    return from_mockrun(
        run_program(
            {
                "gpuInstanceType": "p5.48xlarge",
                "gpuCapacity": "capacity-block",
                "efaCheck": "false",
                "gpuCapacityReservationId": "cr-0123456789abcdef0",
                "availabilityZone": "us-east-1a",
            }
        )
    )


def test_gpu_capacity_passes_the_programs_capacity_block_and_reservation_stacks(block):
    assert rules.check(block) == []
    odcr = from_mockrun(
        run_program(
            {
                "gpuCapacity": "reservation",
                "gpuCapacityReservationId": "cr-0a1b2c3d4e5f60718",
                "gpuInstanceType": "g6e.48xlarge",
                "availabilityZone": "us-east-1c",
                "efaCheck": "false",
            }
        )
    )
    assert rules.check(odcr) == []


def test_gpu_capacity_fails_for_pulumi_eks_efa_support_on_a_capacity_block(default):
    """The issue's own failure: enableEfaSupport always adds a placement group and its own target-less template."""

    def block_via_pulumi_eks(props):
        _pulumi_eks_efa(props)
        props["capacityType"] = "CAPACITY_BLOCK"

    found = check(mutate(default, MNG, "gpu-mng", block_via_pulumi_eks), "gpu-capacity")
    problems = " | ".join(v.problem for v in found)
    assert len(found) == 3 and all(v.resource == f"{MNG} gpu-mng" for v in found)
    assert "no instanceMarketOptions.marketType capacity-block" in problems
    assert "targets no capacity reservation" in problems
    assert (
        "cluster placement group created by pulumi-eks enableEfaSupport" in problems and "GpuCapacity" in found[0].fix
    )


def test_gpu_capacity_fails_for_a_market_type_without_capacity_type(block):
    [v] = check(mutate(block, MNG, "gpu-mng", lambda p: p.update(capacityType="ON_DEMAND")), "gpu-capacity")
    assert "marketType capacity-block but node group capacityType ON_DEMAND" in v.problem


def test_gpu_capacity_fails_for_a_new_placement_group_next_to_a_reservation(default):
    def reserve(props):
        props["capacityReservationSpecification"] = {
            "capacityReservationTarget": {"capacityReservationId": "cr-0a1b2c3d"}
        }

    [v] = check(mutate(default, LAUNCH_TEMPLATE, "gpu-lt", reserve), "gpu-capacity")
    assert "cluster placement group created by the stack next to a capacity reservation cr-0a1b2c3d" in v.problem
    # preview shape: the template names the group through its dependency only
    specs = preview_specs(capacity="reservation")
    lt = next(s for s in specs if s["type"] == LAUNCH_TEMPLATE)
    pg_urn = lt["urn"].replace(LAUNCH_TEMPLATE, "aws:ec2/placementGroup:PlacementGroup").replace("gpu-lt", "gpu-pg")
    specs.append(
        {
            "type": "aws:ec2/placementGroup:PlacementGroup",
            "name": "gpu-pg",
            "urn": pg_urn,
            "parent": lt["parent"],
            "props": {"strategy": "cluster", "name": UNKNOWN_STR},
        }
    )
    lt["props"]["placement"] = {"groupName": UNKNOWN_STR}
    lt["deps"]["placement"] = [pg_urn]
    [v] = check(from_policy(policy_resources(specs)), "gpu-capacity")
    assert "next to a capacity reservation cr-0123456789abcdef0" in v.problem


# -- guaranteed-qos ------------------------------------------------------------------------------------------------


def test_guaranteed_qos_fails_when_requests_differ_from_limits(default):
    def burstable(props):
        worker(props)["resources"]["requests"]["cpu"] = "40"

    [v] = check(mutate(default, RAY_CLUSTER, "ray-raycluster", burstable), "guaranteed-qos")
    assert v.resource == f"{RAY_CLUSTER} ray-raycluster"
    assert "container ray-worker (worker gpu): requests.cpu=40 != limits.cpu=44" in v.problem


def test_guaranteed_qos_fails_without_limits(default):
    def no_limits(props):
        props["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "500m", "memory": "1Gi"}}

    [v] = check(mutate(default, "kubernetes:batch/v1:Job", "efa-check-job", no_limits), "guaranteed-qos")
    assert "no cpu or memory limit" in v.problem


def test_guaranteed_qos_compares_quantities_and_defaults_requests_to_limits(default):
    def equivalent(props):
        res = worker(props)["resources"]
        res["requests"]["cpu"] = "44000m"
        res["limits"]["memory"] = "176128Mi"  # == 172Gi

    assert check(mutate(default, RAY_CLUSTER, "ray-raycluster", equivalent), "guaranteed-qos") == []

    def limits_only(props):
        worker(props)["resources"].pop("requests")

    assert check(mutate(default, RAY_CLUSTER, "ray-raycluster", limits_only), "guaranteed-qos") == []


# -- one-image -----------------------------------------------------------------------------------------------------


def test_one_image_fails_when_workers_run_another_image(default):
    def other(props):
        worker(props)["image"] = "rayproject/ray:2.58.0-gpu"

    [v] = check(mutate(default, RAY_CLUSTER, "ray-raycluster", other), "one-image")
    assert (
        "head runs 123456789012.dkr.ecr.us-east-1.amazonaws.com/ray-efa-dev-ecr-public/deep-learning-containers/ray:"
        "train-ml-cuda-v1.1" in v.problem
    )
    assert "worker group gpu runs rayproject/ray:2.58.0-gpu" in v.problem and "dlcImage" in v.fix
    assert check(default, "one-image") == []


# -- pinned-image --------------------------------------------------------------------------------------------------


def test_config_refuses_latest_so_the_rule_is_tested_on_built_resources():
    with pytest.raises(ConfigError, match="dlcImage"):
        StackConfig.from_mapping({"dlcImage": "rayproject/ray:latest"})


@pytest.mark.parametrize(
    "image,expect",
    [
        ("rayproject/ray:latest", "mutable :latest tag"),
        ("rayproject/ray", "has no tag"),
        ("registry.example:5000/ray", "has no tag"),
    ],
)
def test_pinned_image_fails_for_latest_or_untagged(default, image, expect):
    def set_all(props):
        for c in [head(props)["template"]["spec"]["containers"][0], worker(props)]:
            c["image"] = image

    found = check(mutate(default, RAY_CLUSTER, "ray-raycluster", set_all), "pinned-image")
    assert [v.problem.split(":")[0] for v in found] == [
        "container ray-head (head)",
        "container ray-worker (worker gpu)",
    ]
    assert all(expect in v.problem for v in found)


def test_pinned_image_accepts_tags_and_digests(default):
    def digest(props):
        worker(props)["image"] = "public.ecr.aws/x/ray@sha256:" + "a" * 64

    assert check(mutate(default, RAY_CLUSTER, "ray-raycluster", digest), "pinned-image") == []
    assert check(default, "pinned-image") == []


# -- private-dashboard ---------------------------------------------------------------------------------------------


def test_private_dashboard_fails_for_a_public_head_load_balancer(default):
    [v] = check(
        mutate(default, RAY_CLUSTER, "ray-raycluster", lambda p: head(p).update(serviceType="LoadBalancer")),
        "private-dashboard",
    )
    assert "serviceType is LoadBalancer with dashboard-host 0.0.0.0" in v.problem and "port-forward" in v.fix


def test_private_dashboard_passes_for_loopback_dashboard_or_internal_balancer(default):
    def loopback(p):
        head(p).update(serviceType="LoadBalancer")
        head(p)["rayStartParams"]["dashboard-host"] = "127.0.0.1"

    def internal(p):
        head(p).update(
            serviceType="LoadBalancer",
            headService={
                "metadata": {"annotations": {"service.beta.kubernetes.io/aws-load-balancer-scheme": "internal"}}
            },
        )

    for fn in (loopback, internal):
        assert check(mutate(default, RAY_CLUSTER, "ray-raycluster", fn), "private-dashboard") == []
    assert check(default, "private-dashboard") == []


def test_private_dashboard_fails_for_a_load_balancer_service_or_ingress_to_the_dashboard(default):
    lb = extra(
        "dash",
        SERVICE,
        {
            "spec": {
                "type": "LoadBalancer",
                "selector": {"ray.io/node-type": "head"},
                "ports": [{"port": 80, "targetPort": 8265}],
            }
        },
    )
    ing = extra(
        "dash",
        INGRESS,
        {
            "metadata": {"annotations": {"alb.ingress.kubernetes.io/scheme": "internet-facing"}},
            "spec": {
                "rules": [
                    {
                        "http": {
                            "paths": [
                                {
                                    "path": "/",
                                    "pathType": "Prefix",
                                    "backend": {"service": {"name": "ray-head-svc", "port": {"number": 8265}}},
                                }
                            ]
                        }
                    }
                ]
            },
        },
    )
    found = check(default + [lb, ing], "private-dashboard")
    assert [v.resource for v in found] == [f"{SERVICE} dash", f"{INGRESS} dash"]
    internal_ing = extra(
        "dash", INGRESS, {**ing.props, "metadata": {"annotations": {"alb.ingress.kubernetes.io/scheme": "internal"}}}
    )
    restricted = extra("dash", SERVICE, {"spec": {**lb.props["spec"], "loadBalancerSourceRanges": ["203.0.113.0/24"]}})
    assert check(default + [internal_ing, restricted], "private-dashboard") == []


def test_private_dashboard_fails_for_kuberay_ingress(default):
    [v] = check(
        mutate(default, RAY_CLUSTER, "ray-raycluster", lambda p: head(p).update(enableIngress=True)),
        "private-dashboard",
    )
    assert "enableIngress" in v.problem


# -- unknowns never fail a rule ------------------------------------------------------------------------------------


def test_unknown_values_are_not_violations():
    specs = preview_specs()
    rc = next(s for s in specs if s["type"] == RAY_CLUSTER)
    from tests.helpers.preview_shapes import UNKNOWN_STR

    rc["props"]["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["image"] = UNKNOWN_STR
    lt = next(s for s in specs if s["type"] == LAUNCH_TEMPLATE)
    lt["props"]["networkInterfaces"] = UNKNOWN_STR
    assert rules.check(from_policy(policy_resources(specs))) == []


def test_subnets_resolve_by_mock_id(default):
    st = layout.Stack(default)
    assert st.resolve("subnet-net-private-us-east-1a").type == SUBNET


# -- host-access ----------------------------------------------------------------------------------------

DAEMONSET, JOB, NAMESPACE = "kubernetes:apps/v1:DaemonSet", "kubernetes:batch/v1:Job", "kubernetes:core/v1:Namespace"


def test_host_access_passes_for_the_node_agent_alone(default):
    assert check(default, "host-access") == []
    agent = next(r for r in default if r.type == DAEMONSET)
    assert [v for v in agent.props["spec"]["template"]["spec"]["volumes"] if "hostPath" in v]  # it does use the host


def test_host_access_fails_for_a_ray_pod_that_mounts_the_host_even_in_a_privileged_namespace(default):
    def mount(p):
        pod = p["spec"]["workerGroupSpecs"][0]["template"]["spec"]
        pod["volumes"].append({"name": "host-sys", "hostPath": {"path": "/sys"}})

    [v] = check(mutate(default, RAY_CLUSTER, "ray-raycluster", mount), "host-access")
    assert v.rule == "host-access" and v.resource == f"{RAY_CLUSTER} ray-raycluster"
    assert "a Ray worker gpu pod uses the host (hostPath volume host-sys" in v.problem and "node agent" in v.fix
    privileged_ray = mutate(
        mutate(default, RAY_CLUSTER, "ray-raycluster", mount),
        NAMESPACE,
        "ray-ns",
        lambda p: p["metadata"]["labels"].update({"pod-security.kubernetes.io/enforce": "privileged"}),
    )
    assert [v.resource for v in check(privileged_ray, "host-access")] == [f"{RAY_CLUSTER} ray-raycluster"]


def test_host_access_fails_for_the_agent_outside_a_privileged_namespace_and_for_host_namespaces(default):
    unlabelled = mutate(default, NAMESPACE, "node-agent-ns", lambda p: p["metadata"].pop("labels"))
    [v] = check(unlabelled, "host-access")
    assert "namespace efa-node-agent, which does not enforce Pod Security privileged" in v.problem
    host_net = mutate(default, JOB, "efa-check-job", lambda p: p["spec"]["template"]["spec"].update(hostNetwork=True))
    [v] = check(host_net, "host-access")
    assert v.resource == f"{JOB} efa-check-job" and "hostNetwork" in v.problem


def test_host_access_skips_an_unknown_namespace(default):
    unknown = mutate(
        default, DAEMONSET, "node-agent-daemonset", lambda p: p["metadata"].update(namespace=layout.UNKNOWN)
    )
    assert check(unknown, "host-access") == []
