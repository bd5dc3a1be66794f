"""The offline plan: default stack layout, JSON, --check exit codes, --diff of two plans and of a git ref."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ray_efa_eks.tools import rules
from ray_efa_eks.tools.layout import MNG
from ray_efa_eks.tools.plan import main
from ray_efa_eks.tools.plan_model import MissingStack, Plan
from ray_efa_eks.tools.stack_file import read_stack, stack_config

ROOT = Path(__file__).resolve().parents[2]

PUBLIC_DASHBOARD = '''
import pulumi_kubernetes as k8s
k8s.core.v1.Service("dashboard-lb", metadata={"namespace": "ray"}, spec={
    "type": "LoadBalancer", "selector": {"ray.io/node-type": "head"}, "ports": [{"name": "dashboard", "port": 8265}]})
'''


@pytest.fixture(autouse=True)
def in_project_root(monkeypatch):
    """The plan, like pulumi, works on the program in the current directory."""
    monkeypatch.chdir(ROOT)


def run_cli(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


@pytest.fixture(scope="module")
def plans(tmp_path_factory) -> dict[str, Path]:
    """Saved --json plans of the default stack and of gpuInstanceType=p5.48xlarge."""
    out = tmp_path_factory.mktemp("plans")
    paths = {}
    with contextlib.chdir(ROOT):
        for name, extra in (("default", []), ("p5", ["--config", "gpuInstanceType=p5.48xlarge"])):
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                assert main(["--json", *extra]) == 0
            paths[name] = out / f"{name}.json"
            paths[name].write_text(buf.getvalue())
    return paths


def test_default_plan_text(capsys):
    code, out = run_cli(capsys)
    assert code == 0
    for expected in [
        "Offline plan of working tree: stack dev, region us-east-1",
        "node group gpu-mng: 0..2 x g6.12xlarge (4 GPU each), subnets in us-east-1a, EFA interfaces/node 1, placement cluster",
        "estimated cost idle: $0.59/hour",  # with the ECR interface endpoints (4 endpoint-AZs x $0.01/h)
        "node group system-mng: 1 x m7i.2xlarge (0 GPU each), subnets in us-east-1a, us-east-1b, EFA interfaces/node 0",
        "GPU subnets: net-private-us-east-1a (us-east-1a)",
        "KubeRay chart: 1.7.0",
        "image tags: sha256:032c52613401895aa3d418a4c563d2d05f993bc3ecc065c8f4e2280978acd249, train-ml-cuda-v1.1",
        "estimated cost: $9.79/hour",
        f"Layout rules: all {len(rules.RULE_IDS)} pass",
        "├─ ray-efa-eks:index:EfaGpuNodeGroup  gpu",
        "│  └─ eks:index:ManagedNodeGroup  gpu-mng",
    ]:
        assert expected in out, expected
    worker = next(line for line in out.splitlines() if "ray-raycluster worker gpu" in line).split()
    assert worker[3:9] == [
        "0..2",
        "44",
        "172Gi",
        "4",
        "1",
        "yes",
    ]  # replicas (autoscaled) cpu memory GPU EFA Guaranteed
    head = next(line for line in out.splitlines() if "ray-raycluster head" in line).split()
    assert head[2:8] == ["1", "2", "8Gi", "0", "0", "yes"]


def test_default_plan_json(plans, default_run):
    p = json.loads(plans["default"].read_text())
    s = p["settings"]
    assert s["nodeGroups"]["gpu-mng"] == {
        "instanceTypes": "g6.12xlarge",
        "nodes": "0..2",
        "gpusPerNode": 4,
        "subnetAzs": "us-east-1a",
        "efaInterfacesPerNode": 1,
        "placement": "cluster",
        "capacity": "on-demand",
        "launchTemplate": s["nodeGroups"]["gpu-mng"]["launchTemplate"],
    }
    assert len(s["nodeGroups"]["gpu-mng"]["launchTemplate"]) == 8  # fingerprint of the template's inputs
    assert (
        s["nodeGroups"]["system-mng"]["instanceTypes"] == "m7i.2xlarge" and s["nodeGroups"]["system-mng"]["nodes"] == 1
    )
    assert s["gpuSubnets"] == {"net-private-us-east-1a": "us-east-1a"}
    assert s["kuberayChartVersion"] == "1.7.0" and s["imageTags"] == (
        "sha256:032c52613401895aa3d418a4c563d2d05f993bc3ecc065c8f4e2280978acd249, train-ml-cuda-v1.1"
    )
    assert s["pods"]["ray-raycluster worker gpu"] == {
        "replicas": "0..2",
        "image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/ray-efa-dev-ecr-public/deep-learning-containers/ray:train-ml-cuda-v1.1",
        "cpu": "44",
        "memory": "172Gi",
        "gpu": 4,
        "efa": 1,
        "guaranteedQoS": "yes",
    }
    assert s["estimatedHourlyUsd"] == pytest.approx(default_run.outputs["estimatedHourlyUsd"])
    assert {"type": MNG, "name": "gpu-mng", "parent": "ray-efa-eks:index:EfaGpuNodeGroup gpu"} in p["resources"]
    assert len(p["resources"]) == len(default_run.resources)
    assert p["rules"] == {
        "checked": [
            "gpu-one-az",
            "efa-interfaces",
            "efa-sg-self-rule",
            "gpu-capacity",
            "guaranteed-qos",
            "one-image",
            "pinned-image",
            "private-dashboard",
            "host-access",
            "pods-fit",
            "pod-identity-trust-scoped",
            "pod-identity-trust-keys",
            "gate-no-api-token",
            "ray-pods-network-policy",
            "kuberay-single-namespace",
            "ray-pods-region",
            "device-plugin-versions",
            "pod-security-baseline",
            "monitoring-hardened",
            "node-role-least-privilege",
            "queue-quota-fits",
        ],
        "violations": [],
    }
    assert Plan.from_json(p).to_json() == p


def test_diff_default_vs_p5_shows_interfaces_gpus_and_cost(capsys, plans):
    code, out = run_cli(capsys, "--diff", str(plans["default"]), str(plans["p5"]))
    assert code == 0
    for row in [
        "| node group `gpu-mng` instance type | g6.12xlarge | p5.48xlarge |",
        "| node group `gpu-mng` EFA interfaces/node | 1 | 32 |",
        "| node group `gpu-mng` GPUs/node | 4 | 8 |",
        "| pod `ray-raycluster worker gpu` EFA interfaces | 1 | 32 |",
        "| pod `ray-raycluster worker gpu` GPU | 4 | 8 |",
        "| estimated $/hour | 9.79 | 110.67 |",
        "Resources: none added or removed",
        f"Layout rules: ✅ all {len(rules.RULE_IDS)} pass.",
    ]:
        assert row in out, row
    assert "system-mng" not in out  # unchanged settings are not listed


def test_diff_json_and_identical_plans(capsys, plans):
    code, out = run_cli(capsys, "--diff", str(plans["default"]), str(plans["p5"]), "--json")
    changed = {c["setting"]: (c["before"], c["after"]) for c in json.loads(out)["changed"]}
    assert changed["node group `gpu-mng` EFA interfaces/node"] == (1, 32)
    assert changed["estimated $/hour"] == (pytest.approx(9.7914), pytest.approx(110.6682))
    code, out = run_cli(capsys, "--diff", str(plans["default"]), str(plans["default"]))
    assert code == 0 and "No setting changed." in out


def _broken_program(tmp_path: Path) -> Path:
    prog = tmp_path / "broken" / "__main__.py"
    prog.parent.mkdir()
    prog.write_text(
        f"import runpy\nrunpy.run_path({str(ROOT / '__main__.py')!r}, run_name='__main__')\n{PUBLIC_DASHBOARD}"
    )
    shutil.copy2(ROOT / "Pulumi.dev.yaml", prog.parent / "Pulumi.dev.yaml")  # the plan refuses a stack without its file
    return prog


def test_check_prints_one_line_per_broken_rule_and_exits_1(capsys, tmp_path):
    code, out = run_cli(capsys, "--program", str(_broken_program(tmp_path)), "--check")
    assert code == 1
    lines = out.strip().splitlines()
    aws = next(i for i, ln in enumerate(lines) if ln.startswith("AWS API rules"))
    layout_lines, aws_lines = lines[:aws], lines[aws:]
    assert layout_lines[0] == f"Layout rules: 1 of {len(rules.RULE_IDS)} broken (private-dashboard):"
    assert len(layout_lines) == 2
    assert layout_lines[1].startswith("[private-dashboard] kubernetes:core/v1:Service dashboard-lb: ")
    assert "Fix: keep the head Service ClusterIP" in layout_lines[1]
    # the AWS API rules the runner enforced, each with its source document
    from ray_efa_eks.tools.aws_rules import RULES

    assert aws_lines[0].endswith(f"all {len(RULES)} pass") and len(aws_lines) == 1 + len(RULES)
    for rule, line in zip(RULES, aws_lines[1:]):
        assert line.strip().startswith(f"[{rule.id}]") and rule.source_url in line


def test_check_names_the_aws_rule_a_program_breaks(capsys, monkeypatch):
    from ray_efa_eks.components.cluster import pod_identity

    monkeypatch.setattr(
        pod_identity,
        "pod_identity_trust_policy",
        lambda *a: json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"Service": "pods.eks.amazonaws.com"},
                        "Action": ["sts:AssumeRole"],
                    }
                ],
            }
        ),
    )  # no sts:TagSession
    code, out = run_cli(capsys, "--check")
    assert code == 2
    assert "IAM would refuse aws:iam/role:Role ray-storage-role" in out and "[aws-rule pod-identity-trust;" in out
    assert (
        "AWS API rules (the runner refuses the request at its resource, as AWS would: exit 2): "
        "pod-identity-trust broken" in out
    )


def test_program_error_exits_2_and_names_the_key(capsys):
    code, out = run_cli(capsys, "--config", "dlcImage=rayproject/ray:latest")
    assert code == 2
    assert "The program failed" in out and "dlcImage" in out and "pin a versioned tag" in out


@pytest.mark.parametrize(
    "argv,code,message",
    [
        (["--config", "gpuInstanceType"], 64, "expected KEY=VALUE"),
        (["--diff", "a.json", "b.json", "c.json"], 64, "--diff takes BASE_REF or OLD.json NEW.json"),
        (["--stack"], 64, "expected one argument"),
        (["--diff", "no-such-ref-for-the-plan-test"], 3, "--diff 'no-such-ref-for-the-plan-test': no such commit"),
        (["--stack", "prod"], 3, "stack 'prod' has no Pulumi.prod.yaml"),
    ],
)
def test_usage_errors_exit_64_unreadable_input_3(capsys, argv, code, message):
    if argv == ["--stack"]:
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == code
    else:
        assert main(argv) == code
    assert message in capsys.readouterr().err


def test_a_mistyped_stack_is_refused_not_planned_with_defaults(capsys):
    """`--stack prod` without Pulumi.prod.yaml used to plan the defaults and exit 0."""
    proc = subprocess.run(
        [sys.executable, "-m", "ray_efa_eks.tools.plan", "--stack", "prod", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 3 and proc.stdout == ""
    assert "stack 'prod' has no Pulumi.prod.yaml" in proc.stderr and "stacks here: dev" in proc.stderr
    assert "Traceback" not in proc.stderr
    code, out = run_cli(capsys, "--stack", "prod", "--defaults", "--check")  # on purpose: the defaults
    assert code == 0 and out.startswith("Layout rules: all")


def test_stack_config_reads_the_stack_file_and_shows_secrets(tmp_path):
    (tmp_path / "Pulumi.prod.yaml").write_text(
        "config:\n  aws:region: us-west-2\n  ray-efa-eks:gpuNodeCount: 4\n  ray-efa-eks:efa: true\n"
        "  ray-efa-eks:dlcImage: {secure: AAAA}\n  other:key: x\n"
    )
    config, region = stack_config(tmp_path, "prod")
    assert region == "us-west-2"
    # a secret cannot reach the program; every other key does, as under `pulumi up` (the program warns
    # about keys it never reads, such as other:key's namespace, instead of the plan dropping them in silence)
    assert config == {"ray-efa-eks:gpuNodeCount": "4", "ray-efa-eks:efa": "true", "other:key": "x"}
    sf = read_stack(tmp_path, "prod")
    assert sf.shown["ray-efa-eks:dlcImage"] == "[secret]" and sf.secrets == ["ray-efa-eks:dlcImage"]
    with pytest.raises(MissingStack, match="stacks here: prod"):
        stack_config(tmp_path, "missing")
    assert stack_config(tmp_path, "missing", defaults=True) == ({}, "us-east-1")


def test_secret_config_values_are_shown_as_secret_never_skipped(tmp_path, capsys):
    prog = tmp_path / "proj" / "__main__.py"
    prog.parent.mkdir()
    prog.write_text(f"import runpy\nrunpy.run_path({str(ROOT / '__main__.py')!r}, run_name='__main__')\n")
    (prog.parent / "Pulumi.prod.yaml").write_text(
        "config:\n  aws:region: us-east-1\n  ray-efa-eks:gpuNodeCount: 2\n"
        "  ray-efa-eks:clusterAdminArns:\n    secure: v1:AAAABBBBCCCC\n"
    )
    code, out = run_cli(capsys, "--program", str(prog), "--stack", "prod")
    assert code == 0
    line = next(ln for ln in out.splitlines() if "clusterAdminArns" in ln)
    assert line.startswith("  ray-efa-eks:clusterAdminArns: [secret]") and "not readable offline" in line
    assert "v1:AAAABBBBCCCC" not in out
    code, out = run_cli(capsys, "--program", str(prog), "--stack", "prod", "--json")
    assert json.loads(out)["config"]["ray-efa-eks:clusterAdminArns"] == "[secret]"
    saved = tmp_path / "before.json"
    saved.write_text(out)
    code, out = run_cli(
        capsys,
        "--program",
        str(prog),
        "--stack",
        "prod",
        "--diff",
        str(saved),
        "--config",
        "clusterAdminArns=arn:aws:iam::123456789012:role/admins",
    )
    assert "| config `ray-efa-eks:clusterAdminArns` | [secret] | arn:aws:iam::123456789012:role/admins |" in out


def _copy_project(dest: Path) -> None:
    for name in ("components", "training", "__main__.py", "Pulumi.yaml", "Pulumi.dev.yaml"):
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, dest / name)


def test_diff_against_a_git_ref_shows_what_a_pr_changed_and_which_rule_broke(tmp_path):
    """A PR that moves the dev stack to p5.48xlarge and puts the dashboard on a public load balancer."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _copy_project(repo)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-C", str(repo)]
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    stack_file = repo / "Pulumi.dev.yaml"
    stack_file.write_text(
        stack_file.read_text().replace("gpuInstanceType: g6.12xlarge", "gpuInstanceType: p5.48xlarge")
    )
    with (repo / "__main__.py").open("a") as f:
        f.write(PUBLIC_DASHBOARD)
    env = {**os.environ, "PYTHONPATH": str(repo)}
    proc = subprocess.run(
        [sys.executable, "-m", "ray_efa_eks.tools.plan", "--diff", "main"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 1, proc.stderr
    out = proc.stdout
    assert out.startswith("### Offline plan: `git main` → `working tree` (stack `dev`, us-east-1)")
    assert "| node group `gpu-mng` EFA interfaces/node | 1 | 32 |" in out
    assert "| estimated $/hour | 9.79 | 110.67 |" in out
    assert "+ kubernetes:core/v1:Service dashboard-lb" in out
    broken = [line for line in out.splitlines() if line.startswith("- ❌ ")]
    assert len(broken) == 1 and "[private-dashboard] kubernetes:core/v1:Service dashboard-lb:" in broken[0]
    assert broken[0].endswith("_(new)_") and "Fix: " in broken[0]


@pytest.mark.parametrize(
    "base_stack, says",
    [
        ("gpuInstanceType: nope.48xlarge", "**The before program failed:**"),  # the base program refuses its config
    ],
)
def test_diff_exits_2_when_the_base_program_failed(tmp_path, base_stack, says):
    """``ray-efa-eks diff main`` where main's program fails: a pull request's check must not pass on it."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _copy_project(repo)
    stack_file = repo / "Pulumi.dev.yaml"
    good = stack_file.read_text()
    stack_file.write_text(good.replace("gpuInstanceType: g6.12xlarge", base_stack))
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-C", str(repo)]
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "a broken base"], check=True)
    stack_file.write_text(good)
    exe = Path(sys.executable).with_name("ray-efa-eks")
    pythonpath = os.pathsep.join(p for p in (str(repo), os.environ.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [str(exe), "diff", "main"],
        cwd=repo,
        env={**os.environ, "PYTHONPATH": pythonpath},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert says in proc.stdout and "nope.48xlarge" in proc.stdout and "Traceback" not in proc.stderr
