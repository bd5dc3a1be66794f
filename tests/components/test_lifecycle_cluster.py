"""The cluster's life as EKS runs it: sequences of ``pulumi up`` on one mocked account.

Each test runs the real program under the strict mocks several times against one :class:`MockAccount`
(tools/mock_account.py), which keeps what EKS holds between runs (the cluster's version, its node groups' versions,
its creator and access entries) and answers the program's reads of the live cluster. Each step asserts what EKS would
do, citing the document:

- UC: EKS user guide, "Update existing cluster to new Kubernetes version"
  (https://docs.aws.amazon.com/eks/latest/userguide/update-cluster.html): "you can update only one minor version at a
  time"; "Once you upgrade a cluster, you can't downgrade"; the managed nodes on the control plane's minor before its
  next update; the summary's order: control plane, then the nodes.
- UNG: EKS user guide, "Update a managed node group for your cluster"
  (https://docs.aws.amazon.com/eks/latest/userguide/update-managed-node-group.html): "The version that you update to
  can't be greater than the control plane's version."
- CA: EKS API reference, CreateAccessConfigRequest
  (https://docs.aws.amazon.com/eks/latest/APIReference/API_CreateAccessConfigRequest.html):
  bootstrapClusterCreatorAdminPermissions gives the IAM principal creating the cluster an admin access entry; it
  cannot be changed after creation. CreateAccessEntry answers ResourceInUseException (409) for a principal that
  already has one.
- PE: pulumi-eks 4.4.0 nodejs/eks/nodes/nodegroup.ts createManagedNodeGroup: ``version`` defaults to the cluster's
  only ``if (!args.version && !args.launchTemplate)``; cluster.ts sets bootstrapClusterCreatorAdminPermissions true
  on its aws:eks/cluster child and ignores changes to it.
"""

from __future__ import annotations

import pytest

from ray_efa_eks.components.cluster.cluster import no_creator_admin
from ray_efa_eks.components.config.config import ConfigError
from ray_efa_eks.tools.aws_rules import AwsRejected
from ray_efa_eks.tools.mock_account import MockAccount, child_access_config
from ray_efa_eks.tools.mockrun import MockRun, run_program
from tests.helpers.mockruns import shared_run

MNG = "eks:index:ManagedNodeGroup"
EKS = "eks:index:Cluster"
ENTRY = "aws:eks/accessEntry:AccessEntry"
CLUSTER = "ray-efa-dev"
A = "arn:aws:iam::123456789012:role/PlatformA"
B = "arn:aws:iam::123456789012:role/PlatformB"
C = "arn:aws:iam::123456789012:role/Someone"
BASE = {"efaCheck": "false"}


@pytest.fixture
def warnings(monkeypatch) -> list[str]:
    import pulumi

    seen: list[str] = []
    monkeypatch.setattr(pulumi.log, "warn", lambda msg, *a, **k: seen.append(msg))
    return seen


def up(account: MockAccount, caller: str = A, **config) -> MockRun:
    """One ``pulumi up`` by ``caller`` on ``account`` (committed only when it succeeds)."""
    return run_program({**BASE, **config}, account=account, caller_arn=caller)


def refused_up(account: MockAccount, exc: type, caller: str = A, **config) -> tuple[Exception, MockRun]:
    before = (
        dict(account.state),
        {n: (c.version, dict(c.node_groups), dict(c.entries)) for n, c in account.clusters.items()},
    )
    record = MockRun()
    with pytest.raises(exc) as e:
        run_program({**BASE, **config}, account=account, caller_arn=caller, record=record)
    after = (
        dict(account.state),
        {n: (c.version, dict(c.node_groups), dict(c.entries)) for n, c in account.clusters.items()},
    )
    assert after == before, "a refused update changes nothing EKS holds"
    return e.value, record


# -- item 1: node groups follow the control plane, one minor at a time --------------------------------------------


def test_every_managed_node_group_carries_the_control_plane_version():
    run = shared_run({**BASE, "kubernetesVersion": "1.34"})
    assert {g.name: g.inputs.get("version") for g in run.of_type(MNG)} == {"system-mng": "1.34", "gpu-mng": "1.34"}
    # both on our own launch template, so pulumi-eks would not fill the version itself (PE)
    assert all(g.inputs.get("launchTemplate") for g in run.of_type(MNG))


def test_upgrade_moves_the_control_plane_then_the_node_groups(warnings):
    acct = MockAccount()
    up(acct, kubernetesVersion="1.35")
    live = acct.clusters[CLUSTER]
    assert live.version == "1.35" and set(live.node_groups.values()) == {"1.35"}
    run = up(acct, kubernetesVersion="1.36")  # 1.36 is past the calendar this stack holds: a warning, not a refusal
    assert live.version == "1.36"
    # UC: the nodes follow the control plane in the same update; UNG: never above it
    assert live.node_groups == {"system-mng": "1.36", "gpu-mng": "1.36"}
    eks_urn = run.one(EKS).urn
    for g in run.of_type(MNG):  # the node groups depend on the cluster: the engine updates the control plane first
        assert getattr(g.inputs["cluster"], "urn", None) == eks_urn
    assert not [w for w in warnings if "still run an older minor" in w]
    up(acct, kubernetesVersion="1.37")  # the next upgrade finds every managed node on the control plane's minor (UC)
    assert live.version == "1.37" and set(live.node_groups.values()) == {"1.37"}
    assert not [w for w in warnings if "still run an older minor" in w]


def test_skipping_a_minor_is_refused_before_anything_naming_the_order():
    acct = MockAccount()
    up(acct, kubernetesVersion="1.33")
    err, record = refused_up(acct, ConfigError, kubernetesVersion="1.35")
    assert err.key == "kubernetesVersion" and record.resources == []  # refused in preview, before any resource
    msg = str(err)
    assert "one minor version at a time" in msg and "update-cluster.html" in msg  # UC
    assert "set 1.34 and pulumi up, then set 1.35 and pulumi up" in msg
    up(acct, kubernetesVersion="1.34")
    up(acct, kubernetesVersion="1.35")
    assert acct.clusters[CLUSTER].version == "1.35" and set(acct.clusters[CLUSTER].node_groups.values()) == {"1.35"}


def test_a_downgrade_is_refused():
    acct = MockAccount()
    up(acct, kubernetesVersion="1.35")
    err, _ = refused_up(acct, ConfigError, kubernetesVersion="1.34")
    assert "cannot downgrade" in str(err)  # UC: "you can't downgrade"


def test_eks_itself_refuses_the_skip_when_the_program_does_not_check(monkeypatch):
    """The AWS rule stands on its own: with the program's check removed, EKS (the strict mocks) refuses the cluster
    update at the resource, naming the same order (one-minor-at-a-time, UC)."""
    from ray_efa_eks.components import stack

    acct = MockAccount()
    up(acct, kubernetesVersion="1.33")
    monkeypatch.setattr(stack, "upgrade_problem", lambda *_: None)
    err, record = refused_up(acct, AwsRejected, kubernetesVersion="1.35")
    assert err.rule.id == "one-minor-at-a-time" and "set 1.34 and pulumi up" in str(err)
    assert EKS in err.resource, "refused at the cluster, as EKS would"


def test_node_groups_left_behind_are_what_the_old_code_did(monkeypatch, warnings):
    """The model can fail: node groups registered without a version stay on their creation version (PE; EKS
    changes a node group's version only when asked), and the next upgrade warns that they lag."""
    from ray_efa_eks.components.nodes import node_groups

    acct = MockAccount()
    up(acct, kubernetesVersion="1.34")
    real = node_groups.eks.ManagedNodeGroup

    def without_version(*a, **kw):
        kw.pop("version", None)
        return real(*a, **kw)

    monkeypatch.setattr(node_groups.eks, "ManagedNodeGroup", without_version)
    up(acct, kubernetesVersion="1.35")
    assert acct.clusters[CLUSTER].node_groups == {"system-mng": "1.34", "gpu-mng": "1.34"}
    up(acct, kubernetesVersion="1.36")
    assert [w for w in warnings if "still run an older minor than the control plane 1.35" in w]


def _plan(run: MockRun, source: str):
    from ray_efa_eks.tools import layout
    from ray_efa_eks.tools.plan_run import make_plan

    return make_plan(layout.from_mockrun(run), source=source, stack="dev", region="us-east-1")


@pytest.mark.parametrize(
    "before,after,refused",
    [
        ("1.33", "1.35", True),
        ("1.33", "1.34", False),
        ("1.35", "1.34", True),
        ("1.35", "1.36", False),
        ("1.34", "1.34", False),
    ],
)
def test_diff_and_pulumi_up_agree_on_every_version_refusal(before, after, refused):
    """`ray-efa-eks diff` of the two plans and `pulumi up` (the program on an account running ``before``) refuse
    the same changes with the same words (UC)."""
    from ray_efa_eks.tools.plan_diff import diff_plans, render_diff

    acct = MockAccount()
    a = up(acct, kubernetesVersion=before)
    d = diff_plans(_plan(a, "before"), _plan(shared_run({**BASE, "kubernetesVersion": after}), "after"))
    if not refused:
        assert d.refusals == [] and d.exit_code != 2
        up(acct, kubernetesVersion=after)
        return
    err, _ = refused_up(acct, ConfigError, kubernetesVersion=after)
    assert d.exit_code == 2 and len(d.refusals) == 1
    assert err.fix in d.refusals[0], (err.fix, d.refusals)
    assert "EKS would refuse this change" in render_diff(d)


# -- item 2: access entries do not depend on who runs pulumi up -----------------------------------------------------


def test_b_runs_up_after_a_and_nothing_moves():
    acct = MockAccount()
    first = up(acct, A, clusterAdminArns=[A, B])
    live = acct.clusters[CLUSTER]
    # created without EKS's creator entry (CA): both admins are the stack's own entries
    assert live.creator_arn == A and not live.bootstrap_creator_admin
    assert sorted(r["principalArn"] for r in first.of_type(ENTRY)) == [A, B]
    assert all(urn is not None for urn in live.entries.values())
    second = up(acct, B, clusterAdminArns=[A, B])  # CA: no 409 for A, B's own entry is not deleted
    assert {r.urn: r.inputs["principalArn"] for r in second.of_type(ENTRY)} == {
        r.urn: r.inputs["principalArn"] for r in first.of_type(ENTRY)
    }
    assert set(live.entries) == {A, B}
    third = up(acct, A, clusterAdminArns=[A, B])
    assert [r.inputs for r in third.of_type(ENTRY)] == [r.inputs for r in first.of_type(ENTRY)]


def test_the_last_admin_cannot_be_removed_from_a_cluster_without_the_creator_entry():
    acct = MockAccount()
    up(acct, A, clusterAdminArns=[A])
    err, record = refused_up(acct, ConfigError, A, clusterAdminArns=[], clusterViewerArns=[B])
    assert err.key == "clusterAdminArns" and record.resources == []
    fresh = MockAccount()  # viewers only, on a cluster being created: nobody would be admin
    err, record = refused_up(fresh, ConfigError, A, clusterViewerArns=[B])
    assert err.key == "clusterAdminArns" and record.resources == [] and not fresh.clusters


def test_the_cluster_is_created_without_the_creator_entry_only_when_admins_are_listed():
    run = shared_run({**BASE, "clusterAdminArns": [A]})
    (cluster,) = run.of_type(EKS)
    assert cluster.transforms == [no_creator_admin]
    assert child_access_config(cluster)["bootstrapClusterCreatorAdminPermissions"] is False
    # nobody listed: EKS's default, the creator is the one admin and the stack makes no entry
    bare = shared_run(BASE)
    assert bare.one(EKS).transforms == [] and not bare.of_type(ENTRY)
    assert child_access_config(bare.one(EKS))["bootstrapClusterCreatorAdminPermissions"] is True


def test_old_model_caller_as_creator_would_be_refused(monkeypatch):
    """The model can fail: filtering the *caller* out as the creator (what the code once did) makes B's run ask
    EKS for a second entry for A, and the strict mocks refuse it with 409 (CA)."""
    from ray_efa_eks.components import stack
    from ray_efa_eks.components.cluster.cluster import AccessPlan

    acct = MockAccount()
    callers = iter([A, B])

    def caller_is_creator(cluster, admins, viewers, creator, live):
        return AccessPlan(True, next(callers))

    monkeypatch.setattr(stack, "access_plan", caller_is_creator)
    up(acct, A, clusterAdminArns=[A, B])
    assert acct.clusters[CLUSTER].entries[A] is None  # EKS's creator entry for A
    err, _ = refused_up(acct, AwsRejected, B, clusterAdminArns=[A, B])
    assert err.rule.id == "one-entry-per-principal" and A in str(err) and "409" in str(err)


def test_a_cluster_created_with_the_creator_entry_needs_its_creator_named():
    """A stack created before this change (or with no admins listed) has EKS's creator entry, which never goes away
    (CA: create-only). Listing admins later: the program asks for clusterCreatorArn instead of guessing from the
    caller, then makes entries for the others only, and never replaces the cluster."""
    acct = MockAccount()
    first = up(acct, A)  # nobody listed: created with the creator entry
    assert acct.clusters[CLUSTER].entries == {A: None}
    err, record = refused_up(acct, ConfigError, B, clusterAdminArns=[A, B])
    assert err.key == "clusterCreatorArn" and record.resources == [] and "list-access-entries" in str(err)
    run = up(acct, B, clusterAdminArns=[A, B], clusterCreatorArn=A)
    assert [r["principalArn"] for r in run.of_type(ENTRY)] == [B]
    assert run.one(EKS).inputs == first.one(EKS).inputs and run.one(EKS).transforms == []  # the cluster stays
    assert acct.clusters[CLUSTER].entries[A] is None and acct.clusters[CLUSTER].bootstrap_creator_admin
    # the creator as a viewer cannot be: EKS made it admin
    err, _ = refused_up(acct, ConfigError, B, clusterAdminArns=[B], clusterViewerArns=[A], clusterCreatorArn=A)
    assert err.key == "clusterViewerArns"


def test_a_caller_without_an_entry_is_warned(warnings):
    acct = MockAccount()
    up(acct, A, clusterAdminArns=[A, B])
    up(acct, C, clusterAdminArns=[A, B])
    assert [w for w in warnings if w.startswith(f"{C} runs pulumi up but is not in clusterAdminArns")]
    assert not [w for w in warnings if w.startswith(f"{A} runs") or w.startswith(f"{B} runs")]


def test_no_creator_admin_touches_only_the_eks_cluster_child():
    import pulumi

    args = pulumi.ResourceTransformArgs(
        True,
        "aws:eks/cluster:Cluster",
        "x",
        {
            "accessConfig": {"authenticationMode": "API", "bootstrapClusterCreatorAdminPermissions": True},
            "version": "1.35",
        },
        pulumi.ResourceOptions(),
    )
    out = no_creator_admin(args)
    assert out.props["accessConfig"] == {"authenticationMode": "API", "bootstrapClusterCreatorAdminPermissions": False}
    assert out.props["version"] == "1.35"
    other = pulumi.ResourceTransformArgs(True, "aws:iam/role:Role", "x", {}, pulumi.ResourceOptions())
    assert no_creator_admin(other) is None


# -- item 3: cluster AZs by zone ID ---------------------------------------------------------------------------------
# NR: EKS user guide, "View Amazon EKS networking requirements for VPC and subnets"
# (https://docs.aws.amazon.com/eks/latest/userguide/network-reqs.html), Subnet requirements for clusters: no subnet
# in zone IDs use1-az3 (us-east-1), usw1-az2 (us-west-1), cac1-az3 (ca-central-1); Subnet requirements for nodes:
# nodes may use subnets the cluster was not created with. DescribeAvailabilityZones returns each AZ's ZoneName and
# ZoneId, and the mapping differs per account.

SUBNET = "aws:ec2/subnet:Subnet"


def _subnet_azs(run: MockRun, ids) -> list[str]:
    by_id = {run.ids[r.urn]: r.inputs["availabilityZone"] for r in run.of_type(SUBNET)}
    return sorted(by_id[i] for i in ids)


def test_the_mocks_answer_zone_ids_that_differ_from_names():
    from ray_efa_eks.tools.mockrun import region_zone_ids

    ids = region_zone_ids("us-east-1")
    assert ids["us-east-1a"] == "use1-az6" and ids["us-east-1e"] == "use1-az3"  # moto's account
    assert all(ids[n] != n for n in ids)


@pytest.mark.parametrize(
    "mapping,cluster,gpu_own",
    [
        ({}, ["us-east-1a", "us-east-1b"], False),  # moto's mapping: us-east-1e is use1-az3, not used
        ({"us-east-1a": "use1-az3", "us-east-1e": "use1-az6"}, ["us-east-1b", "us-east-1c"], True),
        ({"us-east-1b": "use1-az3", "us-east-1e": "use1-az1"}, ["us-east-1a", "us-east-1c"], False),
    ],
    ids=["moto-account", "gpu-az-is-use1-az3", "second-az-is-use1-az3"],
)
def test_cluster_azs_are_chosen_by_zone_id(mapping, cluster, gpu_own, warnings):
    acct = MockAccount(zone_ids=mapping)
    run = up(acct)  # strict: EKS would refuse a cluster subnet in use1-az3 (NR)
    eks = run.one(EKS)
    subnets = [*eks.inputs["publicSubnetIds"], *eks.inputs["privateSubnetIds"]]
    assert sorted(set(_subnet_azs(run, subnets))) == cluster
    gpu_subnets = run.one(MNG, "gpu").inputs["subnetIds"]
    assert _subnet_azs(run, gpu_subnets) == ["us-east-1a"], "the GPU AZ stays the one configured/offered"
    assert (gpu_subnets[0] not in subnets) == gpu_own  # its own subnet, which the cluster does not get (NR: nodes)
    noted = [w for w in warnings if w.startswith("GPU AZ us-east-1a is zone ID use1-az3")]
    assert bool(noted) == gpu_own  # a warning: no document says a managed node group may or may not use it
    up(acct)  # the next up changes nothing EKS would refuse either


def test_an_account_whose_gpu_az_is_use1_az3_is_refused_by_the_old_choice(monkeypatch):
    """The model can fail: an earlier choice (the GPU AZ is always a cluster AZ, picked by name) puts a
    cluster subnet in use1-az3 in such an account, and the strict mocks refuse the cluster (NR)."""
    from ray_efa_eks.components import stack

    monkeypatch.setattr(stack, "cluster_azs", lambda gpu_az, region=None: [gpu_az, "us-east-1b"])
    acct = MockAccount(zone_ids={"us-east-1a": "use1-az3", "us-east-1e": "use1-az6"})
    err, _ = refused_up(acct, AwsRejected)
    assert err.rule.id == "cluster-subnets-in-azs" and "use1-az3" in str(err)
