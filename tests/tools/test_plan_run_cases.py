"""Making a plan (tools/plan_run.py) through its public functions (make_plan, plan_tree, resolve_ref, plan_git_ref):
each condition that decides a plan's error (its exit code 2), a usage error (64) or an unreadable ref (3), asserted
on tiny programs and a throwaway git repository.

The programs here declare one or two resources, so the Pulumi mocks run in well under a second; the git ref's plan
runs the ref's own ``tools/mockrun.py``, which in the throwaway repository is a stand-in that records two resources
(what plan_git_ref decides is how it reads the archive, the stack file and the records, not what mockrun does).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from ray_efa_eks.tools import plan_run as pr
from ray_efa_eks.tools.layout import Resource
from ray_efa_eks.tools.plan_model import PlanError, UsageError
from tests.helpers.mockruns import shared_run

PROGRAM = textwrap.dedent('''
    import pulumi
    import pulumi_aws as aws

    c = pulumi.Config("ray-efa-eks")
    if c.get("fail"):
        raise ValueError("the program refused: " + c.get("fail"))
    aws.ec2.Subnet("sub", vpc_id="vpc-1", cidr_block="10.0.0.0/20", availability_zone="us-east-1a")
''')


def program_dir(tmp_path: Path, stack_file: str | None = "config:\n  aws:region: us-west-2\n") -> Path:
    (tmp_path / "__main__.py").write_text(PROGRAM)
    if stack_file is not None:
        (tmp_path / "Pulumi.dev.yaml").write_text(stack_file)
    return tmp_path / "__main__.py"


# -- make_plan -------------------------------------------------------------------------------------------------------


def test_make_plan_tree_parents_hooked_resources_and_rules():
    parent = Resource("eks:index:Cluster", "eks", "urn:pulumi:dev::p::eks:index:Cluster::eks", None, {})
    child = Resource("aws:eks/cluster:Cluster", "eks", "urn:c", parent.urn, {})
    orphan = Resource("aws:s3/bucket:Bucket", "b", "urn:b", "urn:pulumi:dev::p::x:index:Gone::g", {})
    lt = Resource(pr.HOOKED_TYPES[0], "gpu", "urn:lt", None, {"imageId": "ami-1", "n": 2.0})
    plan = pr.make_plan([parent, child, orphan, lt], source="s", stack="dev", region="us-east-1")
    assert plan.resources == [
        {"type": "aws:ec2/launchTemplate:LaunchTemplate", "name": "gpu", "parent": None},
        {"type": "aws:eks/cluster:Cluster", "name": "eks", "parent": "eks:index:Cluster eks"},
        {"type": "aws:s3/bucket:Bucket", "name": "b", "parent": "x:index:Gone g"},  # a parent not recorded: its URN
        {"type": "eks:index:Cluster", "name": "eks", "parent": None},
    ]
    assert plan.hooked == {"aws:ec2/launchTemplate:LaunchTemplate gpu": {"imageId": "ami-1", "n": 2}}
    assert (plan.source, plan.stack, plan.region, plan.error) == ("s", "dev", "us-east-1", None)
    assert plan.checked and plan.exit_code == (1 if plan.errors else 0)


# -- plan_tree -------------------------------------------------------------------------------------------------------


def test_plan_tree_of_a_program_that_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("PULUMI_CONFIG", '{"x": "1"}')
    plan = pr.plan_tree(program=program_dir(tmp_path), overrides={"ray-efa-eks:gpuNodeCount": "3"})
    assert plan.error is None and plan.region == "us-west-2" and plan.source == "working tree"
    assert [r["type"] for r in plan.resources] == ["aws:ec2/subnet:Subnet"]
    assert plan.config == {"aws:region": "us-west-2", "ray-efa-eks:gpuNodeCount": "3"}
    assert plan.effective["ray-efa-eks:gpuNodeCount"] == ["3", "--config"]
    assert os.environ["PULUMI_CONFIG"] == '{"x": "1"}'  # put back after the run (pulumi up replaces it too)
    assert "coldStart" not in plan.settings  # not the stack: no cold-start model


COMPONENT_PROGRAM = 'import pulumi\n\npulumi.ComponentResource("ray-efa-eks:index:EfaRayCluster", "ray")\n'


@pytest.mark.parametrize(
    "overrides, region, first",
    [
        (
            {},
            "us-east-1",
            "cold start of a g6.12xlarge from zero (20 GiB DLC, account ECR, FastImagePull on): 271-662 s to a Ray "
            "worker, 281-692 s to the first step; the gate waits 1320 s (the model's budget)",
        ),
        # the stack's own keys, read in its own region (an AZ of us-west-2 is no AZ of the default region)
        (
            {
                "ray-efa-eks:gpuInstanceType": "p5.48xlarge",
                "ray-efa-eks:efaCheckWaitSeconds": "1234",
                "ray-efa-eks:availabilityZone": "us-west-2a",
                "other:gpuInstanceType": "g6e.12xlarge",
            },
            "us-west-2",
            "cold start of a p5.48xlarge from zero (20 GiB DLC, account ECR, FastImagePull on): 271-662 s to a Ray "
            "worker, 281-692 s to the first step; the gate waits 1234 s (efaCheckWaitSeconds)",
        ),
    ],
)
def test_the_stacks_plan_carries_the_cold_start_model_of_its_config(tmp_path, overrides, region, first):
    (tmp_path / "__main__.py").write_text(COMPONENT_PROGRAM)
    plan = pr.plan_tree(program=tmp_path / "__main__.py", defaults=True, overrides=overrides, region=region)
    assert plan.error is None, plan.error
    assert plan.settings["coldStart"][0] == first
    assert len(plan.settings["coldStart"]) == 7 and "EC2 launch, boot, nodeadm" in plan.settings["coldStart"][3]


def test_plan_tree_of_a_program_that_fails_is_the_plans_error(tmp_path, monkeypatch):
    monkeypatch.delenv("PULUMI_CONFIG", raising=False)
    plan = pr.plan_tree(program=program_dir(tmp_path), overrides={"ray-efa-eks:fail": "no"}, region="eu-west-1")
    assert plan.error.startswith("ValueError: the program refused: no") and plan.exit_code == 2
    assert plan.region == "eu-west-1" and plan.resources == [] and plan.config["aws:region"] == "eu-west-1"
    assert "PULUMI_CONFIG" not in os.environ


def test_plan_tree_needs_the_stack_file_unless_defaults(tmp_path):
    program = program_dir(tmp_path, stack_file=None)
    with pytest.raises(PlanError, match="stack 'dev' has no Pulumi.dev.yaml"):
        pr.plan_tree(program=program)
    plan = pr.plan_tree(program=program, defaults=True)
    assert plan.error is None and plan.region == "us-east-1"


def test_plan_tree_reads_root_main_by_default(tmp_path, monkeypatch):
    program_dir(tmp_path)
    plan = pr.plan_tree(tmp_path)
    assert plan.error is None and [r["name"] for r in plan.resources] == ["sub"]
    monkeypatch.chdir(tmp_path)
    assert [r["name"] for r in pr.plan_tree().resources] == ["sub"]


# -- resolve_ref and plan_git_ref ------------------------------------------------------------------------------------

STUB_MOCKRUN = textwrap.dedent('''
    """Stand-in for the ref's own mockrun: records two resources, or fails when the config says so or when
    PULUMI_CONFIG reached it; the launch template lists the symlinks the archive's extraction wrote, if any."""
    import os
    from types import SimpleNamespace


    def run_program(config, *, region, program, stack):
        if config.get("ray-efa-eks:fail"):
            raise SystemExit("the base program failed: " + config["ray-efa-eks:fail"])
        if "PULUMI_CONFIG" in os.environ:
            raise SystemExit("PULUMI_CONFIG reached the base program")
        links = sorted(p for p in os.listdir(".") if os.path.islink(p))
        shim = {p: "link" if os.path.islink(os.path.join("ray_efa_eks", p)) else "dir"
                for p in sorted(os.listdir("ray_efa_eks"))}
        sub = SimpleNamespace(type="aws:ec2/subnet:Subnet", name="sub", urn="urn:sub", parent=None,
                              inputs={"availabilityZone": region + "a", "cidrBlock": "10.0.0.0/20"})
        lt = SimpleNamespace(type="aws:ec2/launchTemplate:LaunchTemplate", name="gpu", urn="urn:lt", parent=None,
                             inputs={"imageId": "ami-" + stack, **({"links": links} if links else {}),
                                     **({"shim": shim} if config.get("ray-efa-eks:shim") else {})})
        return SimpleNamespace(resources=[sub, lt], ids={"urn:lt": "lt-1"})
''')


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture()
def repo(tmp_path) -> Path:
    r = tmp_path / "repo"
    (r / "tools").mkdir(parents=True)
    (r / "tools" / "__init__.py").write_text("")
    (r / "tools" / "mockrun.py").write_text(STUB_MOCKRUN)
    (r / "__main__.py").write_text("# the program the stand-in mockrun pretends to run\n")
    (r / "Pulumi.dev.yaml").write_text("config:\n  aws:region: us-west-2\n  ray-efa-eks:gpuNodeCount: 2\n")
    git(r.parent, "init", "-q", str(r))
    git(r, "-c", "user.email=t@t", "-c", "user.name=t", "add", "-A")
    git(r, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "base")
    git(r, "tag", "base")
    return r


@pytest.mark.parametrize("ref", ["", "-x", "--output=/tmp/x", "a b", "main\x00", "tab\tref"])
def test_resolve_ref_refuses_what_is_no_ref(ref, tmp_path):
    with pytest.raises(UsageError, match="not a git ref"):
        pr.resolve_ref(ref, tmp_path)


def test_resolve_ref_finds_a_commit_or_says_to_fetch(repo):
    assert pr.resolve_ref("base", repo) == git(repo, "rev-parse", "HEAD")
    with pytest.raises(PlanError, match="no such commit in this repository") as e:
        pr.resolve_ref("origin/nope", repo)
    assert not isinstance(e.value, UsageError)  # exit 3, not 64


def test_plan_git_ref_runs_the_refs_own_code_and_stack_file(repo, monkeypatch):
    monkeypatch.setenv("PULUMI_CONFIG", '{"leak": "1"}')  # never passed to the base program
    plan = pr.plan_git_ref("base", repo, overrides={"ray-efa-eks:gpuNodeCount": "4"})
    assert plan.error is None and plan.source == "git base" and plan.region == "us-west-2"
    assert sorted(r["name"] for r in plan.resources) == ["gpu", "sub"]
    assert plan.hooked == {"aws:ec2/launchTemplate:LaunchTemplate gpu": {"imageId": "ami-dev"}}
    assert plan.config == {"aws:region": "us-west-2", "ray-efa-eks:gpuNodeCount": "4"}
    plan = pr.plan_git_ref("base", repo, region="eu-west-1")
    assert plan.region == "eu-west-1" and plan.error is None


def test_plan_git_ref_errors_are_the_base_plans_not_a_crash(repo):
    missing = pr.plan_git_ref("base", repo, stack="prod")
    assert "Pulumi.prod.yaml does not exist at base" in missing.error and missing.absent is True
    assert missing.region == "us-east-1" and missing.exit_code == 2
    assert pr.plan_git_ref("base", repo, stack="prod", region="eu-west-1").region == "eu-west-1"
    assert pr.plan_git_ref("base", repo, stack="prod", defaults=True).error is None  # defaults: planned anyway
    gone = pr.plan_git_ref("base", repo, program="sub/__main__.py", defaults=True)
    assert "sub/__main__.py does not exist at base" in gone.error and gone.absent is True
    failed = pr.plan_git_ref("base", repo, overrides={"ray-efa-eks:fail": "bad config"})
    assert failed.error == "the base program failed: bad config" and failed.resources == [] and not failed.absent


def test_plan_git_ref_without_records_is_an_error(repo):
    (repo / "tools" / "mockrun.py").write_text("def run_program(config, **kw):\n    import sys\n    sys.exit(0)\n")
    git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qam", "silent")
    assert pr.plan_git_ref("HEAD", repo).error == "no output"  # exit 0 but no records line


def failing_archive(monkeypatch, stderr: bytes) -> None:
    """``git archive`` fails with ``stderr`` (exit 128); every other git call runs."""
    real = subprocess.run

    def run(cmd, *a, **kw):
        if "archive" in cmd:
            return SimpleNamespace(returncode=128, stdout=b"", stderr=stderr)
        return real(cmd, *a, **kw)

    monkeypatch.setattr(pr.subprocess, "run", run)


def test_plan_git_ref_archive_failure_is_unreadable(repo, monkeypatch):
    failing_archive(monkeypatch, b"fatal: not a tree object")
    with pytest.raises(PlanError, match="git archive 'base' failed: fatal: not a tree object"):
        pr.plan_git_ref("base", repo)


def test_plan_git_ref_of_an_older_layout_uses_components_mockrun(repo):
    """Before the four-package layout mockrun lived in components/: the base ref's own is run. Before the fix the
    records script tried ``ray_efa_eks.tools.mockrun`` first, which the editable install answers with this tree's
    mockrun, so the base plan ran this tree's code on the old program (here: no resources, no error)."""
    git(repo, "mv", "tools", "components")
    git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "old layout")
    plan = pr.plan_git_ref("HEAD", repo)
    assert plan.error is None and sorted(r["name"] for r in plan.resources) == ["gpu", "sub"]


@pytest.mark.parametrize(
    "dirs, own, shim",
    [
        ((), (), {"__init__.py": "dir", "tools": "link"}),
        (("training",), (), {"__init__.py": "dir", "tools": "link", "training": "link"}),
        (
            ("components", "efacheck", "training", "docs"),
            (),
            {"__init__.py": "dir", "components": "link", "efacheck": "link", "tools": "link", "training": "link"},
        ),
        (("training",), ("training",), {"__init__.py": "dir", "tools": "link", "training": "dir"}),
    ],
    ids=["tools", "two-packages", "four-packages", "a-package-the-ref-holds-itself"],
)
def test_plan_git_ref_imports_each_package_of_the_ref_as_ray_efa_eks(repo, dirs, own, shim):
    """The base ref's packages are importable as ``ray_efa_eks.<pkg>``: one link each, none where the ref already
    holds ``ray_efa_eks/<pkg>`` itself."""
    for d in dirs:
        (repo / d).mkdir()
        (repo / d / "__init__.py").write_text("")
    for d in own:
        (repo / "ray_efa_eks" / d).mkdir(parents=True)
        (repo / "ray_efa_eks" / d / "__init__.py").write_text("")
    git(repo, "add", "-A")
    git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "--allow-empty", "-qm", "packages")
    plan = pr.plan_git_ref("HEAD", repo, overrides={"ray-efa-eks:shim": "1"})
    assert plan.error is None
    assert plan.hooked["aws:ec2/launchTemplate:LaunchTemplate gpu"]["shim"] == shim


def test_plan_git_ref_of_a_program_alone_uses_the_installed_mockrun(tmp_path):
    """A tree with no mockrun of its own (a program and its stack file) is planned by the installed one."""
    r = tmp_path / "alone"
    r.mkdir()
    program_dir(r)
    git(tmp_path, "init", "-q", str(r))
    git(r, "-c", "user.email=t@t", "-c", "user.name=t", "add", "-A")
    git(r, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "program")
    plan = pr.plan_git_ref("HEAD", r)
    assert plan.error is None and [x["name"] for x in plan.resources] == ["sub"] and plan.region == "us-west-2"


def test_plan_tree_never_lets_pulumi_config_of_the_environment_reach_the_program(tmp_path, monkeypatch):
    """``pulumi up`` replaces PULUMI_CONFIG with the stack's config; the plan runs the program without it too (the
    Pulumi SDK reads a key missing from the set config from PULUMI_CONFIG)."""
    monkeypatch.setenv("PULUMI_CONFIG", '{"ray-efa-eks:fail": "leaked"}')
    plan = pr.plan_tree(program=program_dir(tmp_path))
    assert plan.error is None and plan.stack == "dev"
    assert os.environ["PULUMI_CONFIG"] == '{"ray-efa-eks:fail": "leaked"}'


def test_plan_tree_error_keeps_the_effective_config(tmp_path):
    plan = pr.plan_tree(program=program_dir(tmp_path), overrides={"ray-efa-eks:fail": "no"})
    assert plan.error and plan.effective["ray-efa-eks:fail"] == ["no", "--config"]
    assert plan.effective["aws:region"][0] == "us-west-2"


def test_plan_git_ref_archive_failure_shows_gits_message_whatever_its_bytes(repo, monkeypatch):
    failing_archive(monkeypatch, b"fatal: bad object \xff\n")
    with pytest.raises(PlanError, match="git archive 'base' failed: fatal: bad object \ufffd \\(fetch the ref"):
        pr.plan_git_ref("base", repo)


def test_plan_git_ref_skips_links_out_of_the_tree(repo):
    """git stores a symlink as it is, so a base ref may hold one to an absolute path or out of the repository.
    The archive is extracted with tarfile's "data" filter, which refuses such a member: it is left out (not
    followed, not written) and the rest is planned. Before the fix the refusal escaped as tarfile.AbsoluteLinkError:
    `diff` crashed on any repository with such a link."""
    (repo / "abs").symlink_to("/etc/hostname")
    (repo / "out").symlink_to("../../outside")
    (repo / "inside").symlink_to("__main__.py")
    git(repo, "add", "-A")
    git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "links")
    plan = pr.plan_git_ref("HEAD", repo)
    assert plan.error is None and sorted(r["name"] for r in plan.resources) == ["gpu", "sub"]
    assert plan.hooked["aws:ec2/launchTemplate:LaunchTemplate gpu"]["links"] == ["inside"]


STACK_PROGRAM = textwrap.dedent('''
    import json

    import pulumi
    import pulumi_aws as aws

    class OfferError(ValueError):
        """components/config.py's error: the key and the bad value beside the message (``offer`` sets them)."""

    c = pulumi.Config("ray-efa-eks")
    if c.get("offer"):
        offer = json.loads(c.get("offer"))
        e = OfferError(offer.pop("text").replace("REGION", aws.config.region))
        e.__dict__.update(offer)
        raise e
    aws.ec2.Subnet(f"sub-{pulumi.get_stack()}-{aws.config.region}", vpc_id="vpc-1", cidr_block="10.0.0.0/20",
                   availability_zone=aws.config.region + "a")
''')


def stack_program(tmp_path: Path, stack: str = "prod") -> Path:
    (tmp_path / "__main__.py").write_text(STACK_PROGRAM)
    (tmp_path / f"Pulumi.{stack}.yaml").write_text("config:\n  aws:region: us-west-2\n")
    return tmp_path / "__main__.py"


def test_plan_tree_runs_the_program_as_the_named_stack_in_the_named_region(tmp_path):
    """The stack reaches the program (``pulumi.get_stack()``) and the effective config's sources; ``region``
    (--config aws:region) reaches the program's provider config."""
    plan = pr.plan_tree(program=stack_program(tmp_path), stack="prod", region="eu-west-1")
    assert plan.error is None and plan.stack == "prod"
    assert [r["name"] for r in plan.resources] == ["sub-prod-eu-west-1"]
    assert plan.settings == pr.make_plan([], source="x", stack="prod", region="eu-west-1").settings
    assert plan.effective["aws:region"] == ["eu-west-1", "--config"]
    assert plan.effective["ray-efa-eks:gpuNodeCount"][1] == "default"
    plan = pr.plan_tree(program=stack_program(tmp_path), stack="prod")
    assert plan.effective["aws:region"] == ["us-west-2", "Pulumi.prod.yaml"]


NOT_OFFERED = "gpuInstanceType {} is not offered in any AZ of REGION"


def offer(itype="g6.12xlarge", text=NOT_OFFERED, **attrs) -> str:
    return json.dumps({"text": text.format(itype), "key": "gpuInstanceType", "value": itype, **attrs})


@pytest.mark.parametrize(
    "error, where",
    [
        (offer(), "regions"),
        (offer("zz9.nothing"), " (EC2's offerings data, tools/offerings.json, lists it in no region)"),
        (json.dumps({"text": NOT_OFFERED.format("g6.12xlarge"), "value": "g6.12xlarge"}), ""),  # no key
        (offer(key="systemInstanceType"), ""),
        (offer(text="gpuInstanceType {} is not a GPU type"), ""),
        (offer(value=None), ""),
    ],
    ids=["offered-elsewhere", "offered-nowhere", "no-key", "another-key", "another-error", "no-value"],
)
def test_plan_tree_error_plan_names_where_the_gpu_type_is_offered(tmp_path, error, where):
    """The program's error is the plan's (exit 2) with its source, stack and region; for a GPU type the region does
    not offer, it adds the regions EC2's offerings data lists it in."""
    from ray_efa_eks.tools import mockrun

    plan = pr.plan_tree(
        program=stack_program(tmp_path), stack="prod", overrides={"ray-efa-eks:offer": error}, source="base"
    )
    assert (plan.source, plan.stack, plan.region, plan.exit_code) == ("base", "prod", "us-west-2", 2)
    said = f"OfferError: {json.loads(error)['text'].replace('REGION', 'us-west-2')}"
    if where == "regions":
        regions = ", ".join(r for r in mockrun.OFFERINGS if mockrun.offered_azs(r, "g6.12xlarge"))
        assert regions and plan.error == f"{said} (EC2's offerings data, tools/offerings.json, lists it in: {regions})"
    else:
        assert plan.error == said + where


def test_make_plan_settings_are_the_regions_and_a_recorded_parent_is_named_by_its_label():
    """settings_of prices the nodes in the plan's region (prices are held for us-east-1 only); a parent recorded
    in the plan is named by its own type and name even where its URN does not spell them (the base ref's records)."""
    from ray_efa_eks.tools import layout

    resources = layout.from_mockrun(shared_run())
    east = pr.make_plan(resources, source="s", stack="dev", region="us-east-1")
    west = pr.make_plan(resources, source="s", stack="dev", region="us-west-2")
    # with the ECR interface endpoints: 2 endpoints x 2 AZs x $0.01/h
    assert east.settings["estimatedHourlyUsd"] == 9.7914 and east.settings["estimatedIdleHourlyUsd"] == 0.5882
    assert west.settings["estimatedHourlyUsd"].startswith("unknown: no price for us-west-2 (m7i.2xlarge")
    parent = Resource("eks:index:Cluster", "eks", "urn:short", None, {})
    child = Resource("aws:eks/cluster:Cluster", "eks", "urn:c", "urn:short", {})
    plan = pr.make_plan([parent, child], source="s", stack="dev", region="us-east-1")
    assert plan.resources[0] == {"type": "aws:eks/cluster:Cluster", "name": "eks", "parent": "eks:index:Cluster eks"}


def test_plan_git_ref_error_plans_keep_source_stack_and_region(repo):
    missing = pr.plan_git_ref("base", repo, stack="prod")
    assert (missing.source, missing.stack, missing.region) == ("git base", "prod", "us-east-1")
    gone = pr.plan_git_ref("base", repo, program="sub/__main__.py", region="eu-west-1", defaults=True)
    assert (gone.source, gone.stack, gone.region) == ("git base", "dev", "eu-west-1")
    failed = pr.plan_git_ref("base", repo, overrides={"ray-efa-eks:fail": "x"})
    assert (failed.source, failed.stack, failed.region) == ("git base", "dev", "us-west-2")
    planned = pr.plan_git_ref("base", repo)
    assert (planned.source, planned.stack, planned.region) == ("git base", "dev", "us-west-2")


def test_plan_git_ref_archive_failure_says_how_to_fetch(repo, monkeypatch):
    failing_archive(monkeypatch, b"fatal: not a tree object\n")
    with pytest.raises(PlanError) as e:
        pr.plan_git_ref("base", repo)
    for fragment in (
        "git archive 'base' failed: fatal: not a tree object",
        "fetch the ref first; in CI use",
        "fetch-depth: 0",
    ):
        assert fragment in str(e.value)


def test_resolve_ref_messages_say_what_to_name(tmp_path, repo):
    with pytest.raises(UsageError) as e:
        pr.resolve_ref("-x", tmp_path)
    for fragment in (
        "--diff '-x'",
        "not a git ref",
        "so it cannot be read as an option",
        "--diff origin/main",
        "or a saved plan: --diff old.json new.json",
    ):
        assert fragment in str(e.value)
    with pytest.raises(PlanError) as e:
        pr.resolve_ref("nope", repo)
    for fragment in ("--diff 'nope'", "no such commit", "git fetch origin nope", "fetch-depth: 0"):
        assert fragment in str(e.value)


def test_a_process_the_base_program_starts_imports_the_base_code(repo):
    """The base plan's PYTHONPATH is the archive, so a child process (``python -m ray_efa_eks...``) that the base
    program starts in another directory runs the base ref's code too, not this checkout's (the editable install's,
    or whatever our PYTHONPATH names). In the archive's own directory ``-c``/``-m`` would find it anyway (sys.path[0]
    is the working directory)."""
    (repo / "tools" / "mockrun.py").write_text(
        STUB_MOCKRUN.replace(
            '"imageId": "ami-" + stack,',
            '"imageId": "ami-" + stack, "child": __import__("subprocess").run([__import__("sys").executable, "-c", '
            '"import ray_efa_eks.tools.mockrun as m, os; print(os.path.realpath(m.__file__))"], capture_output=True, '
            'text=True, cwd="/").stdout.strip(),',
        )
    )
    git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qam", "child")
    plan = pr.plan_git_ref("HEAD", repo)
    child = plan.hooked["aws:ec2/launchTemplate:LaunchTemplate gpu"]["child"]
    assert child.endswith("/tools/mockrun.py") and Path(child).parent.parent.name.startswith("plan-base-")


def test_a_base_program_that_hangs_is_the_base_plans_error(repo, monkeypatch):
    """subprocess.run's timeout raises TimeoutExpired: before the fix it escaped `diff` as a traceback."""
    (repo / "tools" / "mockrun.py").write_text("def run_program(config, **kw):\n    import time\n    time.sleep(60)\n")
    git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qam", "hangs")
    monkeypatch.setattr(pr, "BASE_PLAN_TIMEOUT_S", 1)
    plan = pr.plan_git_ref("HEAD", repo)
    assert "the program at HEAD ran past 1 s under the mocks and was stopped" in plan.error
    assert (plan.source, plan.stack, plan.region, plan.exit_code) == ("git HEAD", "dev", "us-west-2", 2)


@pytest.mark.parametrize(
    "hangs, says",
    [
        ("rev-parse", "--diff 'main': git rev-parse did not answer within 120 s"),
        ("archive", "git archive 'main' did not finish within 120 s"),
    ],
)
def test_git_that_never_answers_is_the_plans_error_with_its_deadline(tmp_path, monkeypatch, hangs, says):
    """Every git call of a diff has a deadline (GIT_TIMEOUT_S): a git that hangs (a lock, a slow filesystem) ends the
    plan with an error naming the step and the figure, not a wait for ever."""

    def git(argv, *a, **kw):
        assert kw.get("timeout") == pr.GIT_TIMEOUT_S, argv  # every git call carries the deadline
        if hangs in argv:
            raise subprocess.TimeoutExpired(argv, kw.get("timeout"))
        return SimpleNamespace(returncode=0, stdout="0" * 40 + "\n", stderr="")  # rev-parse: a commit

    monkeypatch.setattr(pr.subprocess, "run", git)
    with pytest.raises(PlanError, match=re.escape(says)):
        pr.plan_git_ref("main", tmp_path)
