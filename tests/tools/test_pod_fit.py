"""Pod placement through its front doors: ``ray-efa-eks plan`` (the pods-fit rule and the per-node-group figures)
and ``tools.layout_fit.fit`` on the default stack's resources, edited the way a user would."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Callable

import pytest

from ray_efa_eks.tools import layout_fit, rules
from ray_efa_eks.tools.layout import UNKNOWN, Resource, Stack, from_mockrun
from ray_efa_eks.tools.plan import main

ROOT = Path(__file__).resolve().parents[2]
RAY = "kubernetes:ray.io/v1:RayCluster"
JOB = "kubernetes:batch/v1:Job"
DS = "kubernetes:apps/v1:DaemonSet"
HELM = "kubernetes:helm.sh/v3:Release"


@pytest.fixture(autouse=True)
def in_project_root(monkeypatch):
    monkeypatch.chdir(ROOT)


@pytest.fixture(scope="module")
def default(default_run) -> list[Resource]:
    return from_mockrun(default_run)


def edited(resources: list[Resource], typ: str, name: str, fn: Callable[[dict[str, Any]], None]) -> Stack:
    out = []
    for r in resources:
        if r.type == typ and r.name == name:
            props = copy.deepcopy(r.props)
            fn(props)
            r = Resource(r.type, r.name, r.urn, r.parent, props, r.id, r.deps)
        out.append(r)
    return Stack(out)


# -- the plan CLI --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, code, fragments",
    [
        (
            [],
            0,
            [
                "pod fit (requests per node vs allocatable",
                "node group system-mng: 1 x m7i.2xlarge, allocatable 7910m CPU",
                "node group gpu-mng: 2 x g6.12xlarge, allocatable 47810m CPU",
                "efa-check-job",
                "ray-raycluster head",
                "autoscaler",
            ],
        ),
        (["--check"], 0, ["Layout rules: all"]),
        # the system node this stack had before: the gate Job is the pod that no longer fits
        (
            ["--config", "systemInstanceType=m7i.xlarge", "--check"],
            1,
            [
                "[pods-fit] eks:index:ManagedNodeGroup system-mng: pod efa-check-job (stack) does not fit on node group "
                "system-mng: it requests cpu 600m, the other pods there already request 3685m of 3920m allocatable (235m free)",
                "Fix: give the node group room",
            ],
        ),
    ],
)
def test_plan_shows_the_fit_and_refuses_what_does_not_fit(capsys, argv, code, fragments):
    assert main(argv) == code
    out = capsys.readouterr().out
    for f in fragments:
        assert f in out, f


# -- the model -----------------------------------------------------------------------------------------------------


def _head_cpu(cpu: str) -> Callable[[dict[str, Any]], None]:
    def fn(props: dict[str, Any]) -> None:
        res = props["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]
        res["requests"]["cpu"] = res["limits"]["cpu"] = cpu

    return fn


def _gate_init(cpu: str, sidecar: bool) -> Callable[[dict[str, Any]], None]:
    def fn(props: dict[str, Any]) -> None:
        init = props["spec"]["template"]["spec"]["initContainers"][0]
        init["resources"] = {"requests": {"cpu": cpu, "memory": "256Mi"}, "limits": {"cpu": cpu, "memory": "256Mi"}}
        if sidecar:
            init["restartPolicy"] = "Always"
        else:
            init.pop("restartPolicy", None)

    return fn


def _prometheus_cpu(props: dict[str, Any]) -> None:
    props["values"]["prometheus"]["prometheusSpec"]["resources"] = {
        "requests": {"cpu": "5", "memory": "2Gi"},
        "limits": {"cpu": "5", "memory": "2Gi"},
    }


def _autoscaler_cpu(props: dict[str, Any]) -> None:
    props["spec"]["autoscalerOptions"]["resources"] = {
        "requests": {"cpu": "5", "memory": "512Mi"},
        "limits": {"cpu": "5", "memory": "512Mi"},
    }


def _head_selector(props: dict[str, Any]) -> None:
    props["spec"]["headGroupSpec"]["template"]["spec"]["nodeSelector"] = {"ray-efa-eks/role": "nowhere"}


def _head_selector_unknown(props: dict[str, Any]) -> None:
    props["spec"]["headGroupSpec"]["template"]["spec"]["nodeSelector"] = {"ray-efa-eks/role": UNKNOWN}


def _head_on_gpu_nodes(props: dict[str, Any]) -> None:
    props["spec"]["headGroupSpec"]["template"]["spec"]["nodeSelector"] = {"ray-efa-eks/role": "gpu"}


@pytest.mark.parametrize(
    "typ, name, fn, problems",
    [
        # the head enlarged past what the system node has left (its 500m autoscaler sidecar counted) ...
        (
            RAY,
            "ray-raycluster",
            _head_cpu("7"),
            [
                "pod ray-raycluster head (stack) does not fit on node group system-mng: it requests cpu 7500m, the other pods "
                "there already request 1185m of 7910m allocatable (6725m free)"
            ],
        ),
        # ... or only past what the gate Job, created after the head, still needs
        (
            RAY,
            "ray-raycluster",
            _head_cpu("6"),
            [
                "pod efa-check-job (stack) does not fit on node group system-mng: it requests cpu 600m, the other pods there "
                "already request 7685m of 7910m allocatable (225m free)"
            ],
        ),
        (RAY, "ray-raycluster", _head_cpu("5"), []),
        # chart values the stack passes, and the sidecar's autoscalerOptions.resources, count the same way
        (
            HELM,
            "observability-kps",
            _prometheus_cpu,
            [
                "pod ray-raycluster head (stack) does not fit on node group system-mng: it requests cpu 2500m, the other pods "
                "there already request 5685m of 7910m allocatable (2225m free)"
            ],
        ),
        (
            RAY,
            "ray-raycluster",
            _autoscaler_cpu,
            ["pod ray-raycluster head (stack) does not fit on node group system-mng: it requests cpu 7000m"],
        ),
        # an init container larger than the containers counts on its own (max rule); as a native sidecar it adds up
        (JOB, "efa-check-job", _gate_init("4", sidecar=False), []),
        (
            JOB,
            "efa-check-job",
            _gate_init("4", sidecar=True),
            [
                "pod efa-check-job (stack) does not fit on node group system-mng: it requests cpu 4500m, the other pods there "
                "already request 3685m of 7910m allocatable (4225m free)"
            ],
        ),
        (
            JOB,
            "efa-check-job",
            _gate_init("4300m", sidecar=False),
            ["pod efa-check-job (stack) does not fit on node group system-mng: it requests cpu 4300m"],
        ),
        # no node group admits it: the selector, or the GPU taint it does not tolerate
        (
            RAY,
            "ray-raycluster",
            _head_selector,
            [
                "pod ray-raycluster head (stack) fits no node group: system-mng: its nodeSelector ray-efa-eks/role=nowhere "
                "does not match; gpu-mng: its nodeSelector ray-efa-eks/role=nowhere does not match"
            ],
        ),
        (RAY, "ray-raycluster", _head_selector_unknown, []),  # a value only `up` knows (a preview) is never refused
        (
            RAY,
            "ray-raycluster",
            _head_on_gpu_nodes,
            [
                "pod ray-raycluster head (stack) fits no node group: system-mng: its nodeSelector ray-efa-eks/role=gpu does "
                "not match; gpu-mng: it does not tolerate the taint nvidia.com/gpu=true:NoSchedule"
            ],
        ),
    ],
)
def test_fit_refuses_with_group_resource_and_figures(default, typ, name, fn, problems):
    f = layout_fit.fit(edited(default, typ, name, fn))
    lines = [layout_fit.problem_line(u) for u in f.unplaced]
    assert len(lines) == len(problems), lines
    for line, want in zip(lines, problems):
        assert line.startswith(want), line


def _no_gpu_toleration(props: dict[str, Any]) -> None:
    spec = props["spec"]["template"]["spec"]
    spec["tolerations"] = [t for t in spec["tolerations"] if t["key"] != "nvidia.com/gpu"]


@pytest.mark.parametrize("fn, on_gpu_nodes", [(lambda props: None, True), (_no_gpu_toleration, False)])
def test_a_daemonset_runs_only_where_it_tolerates_the_taints(default, fn, on_gpu_nodes):
    s = layout_fit.summary(layout_fit.fit(edited(default, DS, "node-agent-daemonset", fn)))
    assert all(("node-agent-daemonset" in n["pods"]) == on_gpu_nodes for n in s["gpu-mng"]["perNode"])
    assert "node-agent-daemonset" not in s["system-mng"]["perNode"][0]["pods"]  # its affinity wants GPU nodes


def test_default_stack_figures_per_node_group(default):
    """The figures docs/deploy.md shows."""
    s = layout_fit.summary(layout_fit.fit(Stack(default)))
    assert "(unplaced)" not in s
    assert s["system-mng"]["allocatablePerNode"] == {"cpu": "7910m", "memory": "29.11Gi", "pods": "58"}
    assert s["system-mng"]["perNode"][0]["cpu"] == "4285m"
    head_pods = s["system-mng"]["perNode"][0]["pods"]
    assert {
        "efa-check-job",
        "ray-raycluster head",
        "kuberay-operator",
        "cluster-autoscaler",
        "prometheus",
        "coredns",
        "kube-proxy",
        "aws-node",
    } <= set(head_pods)
    assert [n["cpu"] for n in s["gpu-mng"]["perNode"]] == ["44455m", "44455m"]
    broken = rules.check(Stack(default), only=["pods-fit"])
    assert broken == []
