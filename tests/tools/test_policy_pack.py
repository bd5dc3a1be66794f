"""The CrossGuard pack (policy/): same rules as the plan, fed real pulumi_policy objects, and served over gRPC."""

from __future__ import annotations

import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from google.protobuf import empty_pb2, struct_pb2
from pulumi.runtime.proto import analyzer_pb2, analyzer_pb2_grpc
from pulumi_policy import EnforcementLevel, StackValidationArgs, StackValidationPolicy

from ray_efa_eks.tools import rules
from ray_efa_eks.tools.layout import MNG, RAY_CLUSTER, from_policy, plain
from tests.helpers.preview_shapes import edit, policy_resources, preview_specs

ROOT = Path(__file__).resolve().parents[2]
PACK = ROOT / "policy"


@pytest.fixture(scope="module")
def pack() -> dict[str, Any]:
    return runpy.run_path(str(PACK / "__main__.py"), run_name="policy_pack")  # not __main__: no server


def run_pack(pack: dict[str, Any], resources: list) -> list[tuple[str, str, str | None]]:
    """(policy, message, urn) for every violation every policy reports, as the analyzer would collect them."""
    found: list[tuple[str, str, str | None]] = []
    for policy in pack["POLICIES"]:
        policy.validate(
            StackValidationArgs(resources), lambda msg, urn=None, p=policy.name: found.append((p, msg, urn))
        )
    return found


def mock_specs(run) -> list[dict[str, Any]]:
    # CrossGuard sees a custom resource's id among its outputs: the node groups find their launch template by it.
    return [
        {
            "type": r.type,
            "name": r.name,
            "urn": r.urn,
            "parent": r.parent,
            "props": {**plain(r.inputs), **({"id": run.ids[r.urn]} if r.custom and r.urn in run.ids else {})},
        }
        for r in run.resources
    ]


def test_pack_file_and_policies(pack):
    meta = yaml.safe_load((PACK / "PulumiPolicy.yaml").read_text())
    assert meta["runtime"]["name"] == "python"
    assert [p.name for p in pack["POLICIES"]] == list(rules.RULE_IDS)
    severity = {r.id: r.severity for r in rules.RULES}
    assert all(
        isinstance(p, StackValidationPolicy)
        and p.enforcement_level
        == (EnforcementLevel.ADVISORY if severity[p.name] == rules.WARNING else EnforcementLevel.MANDATORY)
        for p in pack["POLICIES"]
    )
    assert any(s == rules.WARNING for s in severity.values()), "a preference AWS accepts is advisory"
    reqs = (PACK / "requirements.txt").read_text()
    assert "pulumi-policy==" in reqs and "pulumi==" in reqs


def test_pack_passes_mock_records_and_preview_shapes(pack, default_run, p5_run):
    for specs in (
        mock_specs(default_run),
        mock_specs(p5_run),
        preview_specs(),
        preview_specs(instance_type="p5.48xlarge"),
        preview_specs(subnet_ids_known=False, sg_known=False),
    ):
        assert run_pack(pack, policy_resources(specs)) == []


@pytest.mark.parametrize(
    "specs,rule,resource_type",
    [
        (preview_specs(efa_count=0), "efa-interfaces", MNG),
        (preview_specs(self_rule=False), "efa-sg-self-rule", MNG),
        (preview_specs(subnet_azs=("us-east-1a", "us-east-1b")), "gpu-one-az", MNG),
        (preview_specs(pod_instance_type="p5.48xlarge"), "efa-interfaces", RAY_CLUSTER),
    ],
)
def test_pack_reports_broken_preview_layouts_on_the_offending_urn(pack, specs, rule, resource_type):
    resources = policy_resources(specs)
    found = run_pack(pack, resources)
    assert {p for p, _, _ in found} == {rule}
    urns = {r.urn: r for r in resources}
    assert all(urns[urn].resource_type == resource_type for _, _, urn in found)
    assert all("Fix: " in msg for _, msg, _ in found)
    # The pack and the plan are the same code: same rules, same resources.
    assert sorted((p, u) for p, _, u in found) == sorted((v.rule, v.urn) for v in rules.check(from_policy(resources)))


def test_pack_reports_a_public_dashboard(pack):
    specs = preview_specs()
    rc = next(s for s in specs if s["type"] == RAY_CLUSTER)
    spec = dict(
        rc["props"]["spec"], headGroupSpec=dict(rc["props"]["spec"]["headGroupSpec"], serviceType="LoadBalancer")
    )
    found = run_pack(pack, policy_resources(edit(specs, RAY_CLUSTER, "ray-raycluster", spec=spec)))
    assert [(p, urn.endswith("::ray-raycluster")) for p, _, urn in found] == [("private-dashboard", True)]


def _struct(props: dict[str, Any]) -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    s.update(props)
    return s


def test_pack_served_over_grpc_like_pulumi_runs_it():
    """Start policy/__main__.py as the CLI does, then call GetAnalyzerInfo and AnalyzeStack over gRPC."""
    proc = subprocess.Popen(
        [sys.executable, "-u", str(PACK / "__main__.py")],
        cwd=PACK,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        port = int(proc.stdout.readline().strip())
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = analyzer_pb2_grpc.AnalyzerStub(channel)
            info = stub.GetAnalyzerInfo(empty_pb2.Empty(), timeout=30)
            assert info.name == "ray-efa-eks-layout"
            assert sorted(p.name for p in info.policies) == sorted(rules.RULE_IDS)
            severity = {r.id: r.severity for r in rules.RULES}
            assert {p.name: p.enforcementLevel for p in info.policies} == {
                k: analyzer_pb2.ADVISORY if v == rules.WARNING else analyzer_pb2.MANDATORY for k, v in severity.items()
            }

            def request(specs: list[dict[str, Any]]) -> analyzer_pb2.AnalyzeStackRequest:
                return analyzer_pb2.AnalyzeStackRequest(
                    resources=[
                        analyzer_pb2.AnalyzerResource(
                            type=s["type"],
                            name=s["name"],
                            urn=s["urn"],
                            parent=s.get("parent") or "",
                            properties=_struct(s["props"]),
                            propertyDependencies={
                                k: analyzer_pb2.AnalyzerPropertyDependencies(urns=v)
                                for k, v in (s.get("deps") or {}).items()
                            },
                        )
                        for s in specs
                    ]
                )

            ok = stub.AnalyzeStack(request(preview_specs(subnet_ids_known=False, sg_known=False)), timeout=60)
            assert list(ok.diagnostics) == []  # unknowns: no violation and no "can't run during preview"
            bad = stub.AnalyzeStack(request(preview_specs(efa_count=0)), timeout=60)
            assert [(d.policyName, d.enforcementLevel, d.urn.endswith("::gpu-mng")) for d in bad.diagnostics] == [
                ("efa-interfaces", analyzer_pb2.MANDATORY, True)
            ]
            assert "Fix: give the GPU node group EFA interfaces" in bad.diagnostics[0].message
    finally:
        proc.kill()
        proc.wait(timeout=10)
        proc.stdout.close()
        proc.stderr.close()


def test_a_pack_venv_without_ray_efa_eks_says_how_to_install_it(tmp_path):
    """The pack imports ``ray_efa_eks.tools.rules`` by its one name: a venv with the pack's requirements but not the
    checkout (here: site-packages on the path without its .pth files, so no editable finder) gets one line naming
    the install command, no traceback and no stand-in package."""
    import site

    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(site.getsitepackages())}
    out = subprocess.run(
        [sys.executable, "-S", str(PACK / "__main__.py"), "--help"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert out.stderr.strip().splitlines()[-1].endswith("policy/venv/bin/pip install --no-deps -e .")
