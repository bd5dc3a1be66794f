"""Cold start: the images from the account's own registry, the proof beside the pull, what the endpoints cost.

Under mocks (account 123456789012, us-east-1): a pull-through cache rule for ECR Public, the ECR interface endpoints
beside the S3 gateway endpoint, every pod's public.ecr.aws image rewritten to the account's registry (any other
registry left as given), the node agent on a small digest-pinned image running only stdlib code, and a pre-pull
DaemonSet that pulls the DLC on a joining GPU node while it is still tainted.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import kubernetes_validate
import pytest

from ray_efa_eks.components import kube
from ray_efa_eks.components.addons import node_agent
from ray_efa_eks.components.config.config import ConfigError, StackConfig
from ray_efa_eks.tools.mockrun import run_program
from tests.helpers.mockruns import shared_run
from tests.helpers.pod_security import violations

ACCOUNT_REGISTRY = "123456789012.dkr.ecr.us-east-1.amazonaws.com"
DLC = "deep-learning-containers/ray:train-ml-cuda-v1.1"
CACHED_DLC = f"{ACCOUNT_REGISTRY}/ray-efa-dev-ecr-public/{DLC}"
PRIVATE = "111122223333.dkr.ecr.us-east-1.amazonaws.com/team/ray:train-ml-cuda-v1.1"
ENDPOINT = "aws:ec2/vpcEndpoint:VpcEndpoint"
RULE = "aws:ecr/pullThroughCacheRule:PullThroughCacheRule"
DS = "kubernetes:apps/v1:DaemonSet"
K8S_VERSION = "1.33.0"


def pod_images(run) -> dict[str, set[str]]:
    """Pod role -> the images its containers (init containers too) run."""
    rc = run.one("kubernetes:ray.io/v1:RayCluster")["spec"]
    specs = {
        "head": rc["headGroupSpec"]["template"]["spec"],
        "worker": rc["workerGroupSpecs"][0]["template"]["spec"],
        "gate": run.one("kubernetes:batch/v1:Job")["spec"]["template"]["spec"],
        "node-agent": run.one(DS, "node-agent")["spec"]["template"]["spec"],
        "prepull": run.one(DS, "image-prepull")["spec"]["template"]["spec"],
    }
    return {k: {c["image"] for c in s.get("initContainers", []) + s["containers"]} for k, s in specs.items()}


def test_a_pull_through_cache_rule_for_ecr_public_and_the_node_role_may_fill_it(default_run):
    rule = default_run.one(RULE)
    assert (rule["ecrRepositoryPrefix"], rule["upstreamRegistryUrl"]) == ("ray-efa-dev-ecr-public", "public.ecr.aws")
    policy = json.loads(default_run.one("aws:iam/rolePolicy:RolePolicy", "image-cache")["policy"])
    (st,) = policy["Statement"]
    assert sorted(st["Action"]) == ["ecr:BatchImportUpstreamImage", "ecr:CreateRepository"]
    assert st["Resource"] == "arn:aws:ecr:us-east-1:123456789012:repository/ray-efa-dev-ecr-public/*"


@pytest.mark.parametrize(
    "stack,prefix",
    [
        ("ray-efa-dev", "ray-efa-dev-ecr-public"),
        ("Team_A.prod", "team-a-prod-ecr-public"),
        ("a-very-long-stack-name-for-the-gpu-team", "a-very-long-stack-n-ecr-public"),  # ECR's 30 characters
        ("---", "ecr-public"),
    ],
)
def test_each_stack_gets_its_own_cache_prefix_within_ecrs_rules(stack, prefix):
    """A pull-through rule's prefix is unique per account and region: two stacks must not ask for the same one."""
    import re

    from ray_efa_eks.components.addons.image_cache import cache_prefix

    got = cache_prefix(stack)
    assert got == prefix and 2 <= len(got) <= 30
    assert re.fullmatch(r"(?:[a-z0-9]+(?:[._-][a-z0-9]+)*/)*[a-z0-9]+(?:[._-][a-z0-9]+)*", got)


def test_ecr_interface_endpoints_beside_the_s3_gateway_endpoint(default_run):
    eps = {e["serviceName"]: e for e in default_run.of_type(ENDPOINT)}
    assert set(eps) == {
        "com.amazonaws.us-east-1.s3",
        "com.amazonaws.us-east-1.ecr.api",
        "com.amazonaws.us-east-1.ecr.dkr",
    }
    private = sorted(f"subnet-{r.name}" for r in default_run.of_type("aws:ec2/subnet:Subnet") if "-private-" in r.name)
    (sg,) = [r for r in default_run.of_type("aws:ec2/securityGroup:SecurityGroup") if r.name == "net-ecr-endpoints"]
    assert sg["ingress"] == [
        {
            "protocol": "tcp",
            "fromPort": 443,
            "toPort": 443,
            "cidrBlocks": ["10.0.0.0/16"],
            "description": "HTTPS from the VPC's nodes and pods",
        }
    ]
    for svc in ("ecr.api", "ecr.dkr"):
        ep = eps[f"com.amazonaws.us-east-1.{svc}"]
        assert (ep["vpcEndpointType"], ep["privateDnsEnabled"]) == ("Interface", True)
        assert sorted(ep["subnetIds"]) == private and ep["securityGroupIds"] == ["net-ecr-endpoints-id"]


@pytest.mark.parametrize(
    "config,dlc,cached",
    [
        ({}, CACHED_DLC, True),
        ({"dlcImage": PRIVATE}, PRIVATE, True),  # a private registry is used as given; the agent's image still cached
        ({"ecrPullThroughCache": "false"}, f"public.ecr.aws/{DLC}", False),
    ],
    ids=["default", "private-dlcImage", "cache-off"],
)
def test_every_pod_pulls_from_the_accounts_registry_by_default(config, dlc, cached):
    run = shared_run(config)
    images = pod_images(run)
    agent = StackConfig.from_mapping({}).nodeAgentImage
    agent = agent.replace("public.ecr.aws/", f"{ACCOUNT_REGISTRY}/ray-efa-dev-ecr-public/") if cached else agent
    assert images == {"head": {dlc}, "worker": {dlc}, "gate": {dlc}, "node-agent": {agent}, "prepull": {dlc, agent}}
    assert len(run.of_type(RULE)) == int(cached)
    assert len(run.of_type(ENDPOINT)) == 1 + 2 * int("ecrPullThroughCache" not in config)


def test_the_node_agent_runs_a_small_image_pinned_by_digest(default_run):
    default = StackConfig.from_mapping({}).nodeAgentImage
    repo, _, digest = default.partition("@")
    assert repo.startswith("public.ecr.aws/docker/library/python:3.12") and "slim" in repo
    assert len(digest) == len("sha256:") + 64 and digest.startswith("sha256:")
    with pytest.raises(ConfigError, match="nodeAgentImage = .* pin it by digest"):
        StackConfig.from_mapping({"nodeAgentImage": "public.ecr.aws/docker/library/python:3.12-slim"})
    proof = [c for c in pod_images(default_run)["node-agent"]]
    assert proof == [f"{ACCOUNT_REGISTRY}/ray-efa-dev-ecr-public/{default.removeprefix('public.ecr.aws/')}"]


def test_what_the_node_agent_runs_imports_the_stdlib_only():
    """A slim Python image has nothing but the stdlib: what every shipped module imports when loaded (its module-level
    statements; a function's own import runs only where that function is called, never in the agent) is the stdlib
    or a shipped sibling."""
    root = Path(node_agent.code_files.__code__.co_filename).parents[2] / "efacheck"

    def loaded(body):
        for node in body:
            yield node
            for part in ("body", "orelse", "finalbody", "handlers"):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    yield from loaded(getattr(node, part, []))

    for name in node_agent.SHIPPED:
        tree = ast.parse((root / name).read_text())
        for node in loaded(tree.body):
            if isinstance(node, ast.Import):
                tops = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                tops = [] if node.level else [(node.module or "").split(".")[0]]
                if node.level:
                    assert (
                        all(f"{a.name}.py" in node_agent.SHIPPED for a in node.names)
                        or f"{node.module}.py" in node_agent.SHIPPED
                    ), f"{name} imports {node.module} (not shipped)"
            else:
                continue
            assert all(t in sys.stdlib_module_names or t == "__future__" for t in tops), f"{name}: {tops}"


def test_the_prepull_pod_tolerates_the_startup_taint_and_is_restricted(default_run):
    ds = default_run.one(DS, "image-prepull")
    ns = default_run.one("kubernetes:core/v1:Namespace", "image-prepull")
    for r in (ds, ns):
        group_version = r.type.split(":")[1].replace("core/", "")
        body = {k: v for k, v in r.inputs.items() if k not in ("apiVersion", "kind")}
        kubernetes_validate.validate(
            {"apiVersion": group_version, "kind": r.type.rsplit(":", 1)[1], **body}, K8S_VERSION, strict=True
        )
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    template = ds["spec"]["template"]
    assert violations(template, "restricted") == []
    assert {"key": kube.FABRIC_STARTUP_TAINT, "operator": "Exists"} in template["spec"]["tolerations"]
    agent = default_run.one(DS, "node-agent")["spec"]["template"]["spec"]
    assert template["spec"]["affinity"] == agent["affinity"]
    (pull,) = template["spec"]["initContainers"]
    assert (pull["image"], pull["command"], pull["imagePullPolicy"]) == (CACHED_DLC, ["true"], "IfNotPresent")


def test_without_libfabric_in_its_image_the_proof_leaves_the_provider_to_the_workers(default_run):
    (proof,) = [
        c
        for c in default_run.one(DS, "node-agent")["spec"]["template"]["spec"]["containers"]
        if c["name"] == node_agent.PROOF_CONTAINER
    ]
    assert "--skip-provider" in proof["command"]


def test_cost_notes_carry_the_endpoint_hours_and_no_nat_charge_for_images(default_run):
    notes = default_run.outputs["costNotes"]
    assert any(
        "ECR interface endpoints (ecr.api, ecr.dkr): 4 endpoint-AZs at $0.01/h each = $0.04/h" in n for n in notes
    ), notes
    (nat,) = [n for n in notes if n.startswith("NAT gateway data processing")]
    assert "not the stack's images" in nat and "public registries" not in nat
    off = shared_run({"ecrPullThroughCache": "false"})
    assert default_run.outputs["estimatedHourlyUsd"] - off.outputs["estimatedHourlyUsd"] == pytest.approx(0.04)
    (nat_off,) = [n for n in off.outputs["costNotes"] if n.startswith("NAT gateway data processing")]
    assert "pulls from public registries" in nat_off and "about $0.97 per GPU node pulling a 20 GiB DLC" in nat_off
    assert not any("ECR interface endpoints" in n for n in off.outputs["costNotes"])


def test_the_plan_prices_the_endpoints_too():
    from ray_efa_eks.tools.plan_run import plan_tree

    on, off = plan_tree(), plan_tree(overrides={"ray-efa-eks:ecrPullThroughCache": "false"})
    assert on.error is None and off.error is None
    assert on.settings["estimatedHourlyUsd"] - off.settings["estimatedHourlyUsd"] == pytest.approx(0.04)


def test_a_gpu_az_outside_the_cluster_subnets_gets_its_own_endpoint_interfaces():
    run = run_program({"gpuInstanceType": "p5.48xlarge"})
    ecr = [e for e in run.of_type(ENDPOINT) if e["vpcEndpointType"] == "Interface"]
    subnets = {f"subnet-{r.name}" for r in run.of_type("aws:ec2/subnet:Subnet") if "-private-" in r.name}
    assert ecr and all(set(e["subnetIds"]) == subnets for e in ecr)


def test_the_agents_own_command_proves_a_node_where_no_fi_info_exists(default_run, tmp_path, monkeypatch):
    """The proof container's command as the DaemonSet renders it, run against a loopback API and a kernel-shaped
    sysfs with no ``fi_info`` anywhere on PATH (the slim image has none): the node is proven and its taint removed."""
    from ray_efa_eks.efacheck import node_check as nc
    from tests.efacheck.test_node_check import GPU_TAINT, STARTUP, FakeApi, _node
    from tests.helpers.sysfs import kernel_sysfs

    (proof,) = [
        c
        for c in default_run.one(DS, "node-agent")["spec"]["template"]["spec"]["containers"]
        if c["name"] == node_agent.PROOF_CONTAINER
    ]
    args = proof["command"][3:]  # after python -m ray_efa_eks.efacheck.node_check
    sysfs = str(kernel_sysfs(tmp_path))
    args[args.index("--sysfs") + 1] = sysfs
    args[args.index("--module-root") + 1] = f"{sysfs}/module"
    node = _node("gpu-a", [GPU_TAINT, STARTUP])
    node["metadata"]["labels"] = {"node.kubernetes.io/instance-type": "g6.12xlarge"}
    fake = FakeApi({"gpu-a": node})
    try:
        monkeypatch.setattr(nc.Api, "in_cluster", classmethod(lambda cls, token_dir=None: fake.api))
        monkeypatch.setenv("PATH", str(tmp_path / "empty"))
        assert (
            nc.run_cli(nc.main, [*args, "--node", "gpu-a", "--once"], "python -m ray_efa_eks.efacheck.node_check")
            == nc.EXIT_PROVEN
        )
        assert fake.nodes["gpu-a"]["spec"]["taints"] == [GPU_TAINT]
    finally:
        fake.close()
