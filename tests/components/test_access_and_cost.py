"""Under Pulumi mocks: EKS access entries, the S3 gateway endpoint, a retained bucket that stays
protected, and cost figures that are per region or say "no price for REGION"."""

from __future__ import annotations

import pytest

from ray_efa_eks.components.nodes import cost
from ray_efa_eks.components.config.config import ConfigError
from ray_efa_eks.components.nodes.instances import CATALOGUE
from ray_efa_eks.tools.mockrun import MockRun, run_program

ACCESS_ENTRY = "aws:eks/accessEntry:AccessEntry"
ASSOCIATION = "aws:eks/accessPolicyAssociation:AccessPolicyAssociation"
ENDPOINT = "aws:ec2/vpcEndpoint:VpcEndpoint"
ROUTE_TABLE = "aws:ec2/routeTable:RouteTable"
BUCKET = "aws:s3/bucket:Bucket"
ADMIN = "arn:aws:iam::123456789012:role/platform-admins"
VIEWER = "arn:aws:iam::123456789012:user/on-call"
POLICY = "arn:aws:eks::aws:cluster-access-policy/"


@pytest.fixture(scope="module")
def access_run() -> MockRun:
    return run_program({"clusterAdminArns": ADMIN, "clusterViewerArns": f"[\"{VIEWER}\"]"})


# -- 2. cluster access ------------------------------------------------------------------------------------------


def test_no_access_entries_unless_configured(default_run):
    assert default_run.of_type(ACCESS_ENTRY) == [] and default_run.of_type(ASSOCIATION) == []


def test_admins_and_viewers_get_access_entries_with_the_managed_policies(access_run):
    cluster = access_run.one("eks:index:Cluster")
    entries = {e["principalArn"]: e for e in access_run.of_type(ACCESS_ENTRY)}
    assert set(entries) == {ADMIN, VIEWER}
    for e in entries.values():
        assert e["type"] == "STANDARD" and e["clusterName"] == cluster["name"]
        assert cluster.urn in e.options["dependencies"]  # the cluster exists before its entries
    policies = {a["principalArn"]: a for a in access_run.of_type(ASSOCIATION)}
    assert policies[ADMIN]["policyArn"] == POLICY + "AmazonEKSClusterAdminPolicy"
    assert policies[VIEWER]["policyArn"] == POLICY + "AmazonEKSAdminViewPolicy"
    for principal, a in policies.items():
        assert a["accessScope"] == {"type": "cluster"} and a["clusterName"] == cluster["name"]
        entry_urn = next(r.urn for r in access_run.of_type(ACCESS_ENTRY) if r["principalArn"] == principal)
        assert entry_urn in a.options["dependencies"]


def _needs(run: MockRun, urn: str, seen: set[str] | None = None) -> set[str]:
    """Every URN ``urn`` waits for: its dependencies, their dependencies, ... (what the engine orders by)."""
    seen = set() if seen is None else seen
    r = run.by_urn(urn)
    for dep in r.options.get("dependencies", []) if r else []:
        if dep not in seen:
            seen.add(dep)
            _needs(run, dep, seen)
    return seen


def test_every_kubernetes_provider_waits_for_the_deployers_access(access_run):
    """A Kubernetes provider created before the access policy associations would apply objects (the KubeRay CRDs
    first) with a principal EKS does not know yet: Unauthorized on a new cluster with clusterAdminArns."""
    grants = {a.urn for a in access_run.of_type(ASSOCIATION)}
    providers = access_run.of_type("pulumi:providers:kubernetes")
    assert len(providers) >= 2 and len(grants) == 2
    for p in providers:
        missing = grants - _needs(access_run, p.urn)
        assert not missing, f"{p.name} does not wait for {sorted(missing)}"


@pytest.mark.parametrize(
    "key,value,message",
    [
        (
            "clusterAdminArns",
            "arn:aws:sts::123456789012:assumed-role/Admin/alice",
            "use the role: arn:aws:iam::123456789012:role/Admin",
        ),
        ("clusterAdminArns", "arn:aws:iam::123456789012:group/admins", "not an IAM role or user ARN"),
        ("clusterViewerArns", "arn:aws:iam::1234:role/short-account", "not an IAM role or user ARN"),
        ("clusterViewerArns", "platform-admins", "not an IAM role or user ARN"),
        ("clusterAdminArns", "arn:aws:iam::123456789012:role/*", "not an IAM role or user ARN"),
    ],
)
def test_bad_arns_are_refused_before_any_resource(key, value, message):
    record = MockRun()
    with pytest.raises(ConfigError, match=f"ray-efa-eks:{key} = .* is invalid: .*") as err:
        run_program({key: value}, record=record)
    assert message in str(err.value) and value in str(err.value)
    assert record.resources == []


def test_a_principal_in_both_lists_is_refused():
    with pytest.raises(ConfigError, match="clusterViewerArns .* also in clusterAdminArns"):
        run_program({"clusterAdminArns": ADMIN, "clusterViewerArns": ADMIN})


# -- 3. S3 gateway endpoint ---------------------------------------------------------------------------------------


def test_s3_gateway_endpoint_on_every_private_route_table(default_run):
    (ep,) = [e for e in default_run.of_type(ENDPOINT) if e["vpcEndpointType"] == "Gateway"]
    assert ep["vpcEndpointType"] == "Gateway" and ep["serviceName"] == "com.amazonaws.us-east-1.s3"
    private = {f"{r.name}-id" for r in default_run.of_type(ROUTE_TABLE) if "-private-" in r.name}
    public = {f"{r.name}-id" for r in default_run.of_type(ROUTE_TABLE) if "-private-" not in r.name}
    assert len(private) == 2 and set(ep["routeTableIds"]) == private and not public & set(ep["routeTableIds"])
    assert ep["vpcId"] == default_run.one("aws:ec2/vpc:Vpc").name + "-id"
    assert any("S3 gateway VPC endpoint" in n for n in default_run.outputs["costNotes"])


def test_s3_gateway_endpoint_can_be_turned_off_and_the_cost_note_says_so():
    run = run_program({"s3GatewayEndpoint": "false"})
    assert [e for e in run.of_type(ENDPOINT) if e["vpcEndpointType"] == "Gateway"] == []
    assert any(
        "through the NAT gateway at $0.045/GB" in n and "s3GatewayEndpoint" in n for n in run.outputs["costNotes"]
    )


# -- 4. a retained bucket stays protected -------------------------------------------------------------------------


def _bucket_children(run):
    bucket = run.one(BUCKET, "checkpoints")
    return bucket, [
        r for r in run.resources if r.parent == bucket.parent and r is not bucket and r.type != "aws:kms/key:Key"
    ]


def test_every_protective_setting_of_a_retained_bucket_is_retained(default_run):
    bucket, children = _bucket_children(default_run)
    types = {r.type.split(":")[-1] for r in children}
    assert {
        "BucketPublicAccessBlock",
        "BucketPolicy",
        "BucketServerSideEncryptionConfiguration",
        "BucketVersioning",
        "BucketOwnershipControls",
        "BucketLifecycleConfiguration",
    } <= types
    assert bucket.options["retain_on_delete"] is True
    not_kept = [r.name for r in children if not r.options["retain_on_delete"]]
    assert not_kept == [], f"deleted on `pulumi destroy` while the bucket stays: {not_kept}"


def test_opting_out_of_retain_deletes_them_all():
    _, children = _bucket_children(run_program({"checkpointRetainOnDelete": "false"}))
    assert children and not any(r.options["retain_on_delete"] for r in children)


# -- 5. cost figures that are true ----------------------------------------------------------------------------------


def test_default_region_figure_and_notes(default_run):
    # + the ECR interface endpoints: 2 endpoints x 2 AZs x $0.01/h
    assert default_run.outputs["estimatedHourlyUsd"] == pytest.approx(2 * 4.6016 + 0.4032 + 0.10 + 0.045 + 0.04)
    assert any("NAT gateway data processing: $0.045/GB" in n for n in default_run.outputs["costNotes"])


def test_a_region_without_prices_says_so_in_the_output_and_the_plan():
    run = run_program(region="us-west-2")
    assert "estimatedHourlyUsd" not in run.outputs  # no us-east-1 figure passed off as us-west-2's
    assert run.outputs["costNotes"][0].startswith("no price for us-west-2")
    from ray_efa_eks.tools.plan_run import plan_tree

    plan = plan_tree(overrides={"aws:region": "us-west-2"}, region="us-west-2")
    assert plan.error is None
    assert str(plan.settings["estimatedHourlyUsd"]).startswith("unknown: no price for us-west-2")


def test_no_copied_prices_and_nat_counted_per_gateway():
    from ray_efa_eks.components.nodes.instances import NoPrice

    g6, m7i = CATALOGUE["g6.12xlarge"], CATALOGUE["m7i.xlarge"]
    with pytest.raises(NoPrice, match="no price for eu-west-1"):
        g6.hourly_usd("eu-west-1")
    one = cost.hourly_usd("us-east-1", [(g6, 2), (m7i, 1)], nat_gateways=1)
    two = cost.hourly_usd("us-east-1", [(g6, 2), (m7i, 1)], nat_gateways=2)
    assert two - one == pytest.approx(0.045)
    assert cost.hourly_usd("us-east-1", [(g6, 0), (m7i, 1)], nat_gateways=0) == pytest.approx(0.2016 + 0.10)
    est = cost.estimate("ap-south-1", g6, 2, m7i)
    assert est.hourly_usd is None and est.missing.startswith("no price for ap-south-1")
