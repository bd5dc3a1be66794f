"""What Kueue admits from the queues the stack renders, for the jobs ``ray-efa-eks rayjob --dry-run`` prints: a table
of teams and jobs in submission order, decided by the test double of Kueue v0.19.2's admission
(tests/helpers/kueue_admission.py; tests/tools/test_rayjob_queue_rehearsal.py runs the admitted jobs on Ray)."""

from __future__ import annotations

import functools
import io
import json
from contextlib import redirect_stdout
from dataclasses import dataclass

import pytest
import yaml

from ray_efa_eks.tools.command import main
from tests.helpers.crd import plain
from tests.helpers.kueue_admission import Kueue
from tests.helpers.mockruns import shared_run


def queue_objects(stack: dict) -> list[dict]:
    return [
        plain({k: r[k] for k in ("apiVersion", "kind", "metadata", "spec")})
        for r in shared_run(stack).resources
        if r.type.startswith("kubernetes:kueue.x-k8s.io/")
    ]


@functools.lru_cache(maxsize=None)
def _printed(stack: tuple, team: str, nodes: int) -> str:
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert (
            main(
                [
                    "rayjob",
                    "--defaults",
                    *[x for k, v in stack for x in ("--config", f"{k}={v}")],
                    "--queue",
                    team,
                    "--bucket",
                    "b",
                    "--name",
                    "job",
                    "--nodes",
                    str(nodes),
                    "--dry-run",
                    "--",
                    "--use-gpu",
                ]
            )
            == 0
        )
    return buf.getvalue()


def rendered(stack: dict, team: str, name: str, nodes: int) -> dict:
    """The RayJob ``rayjob --dry-run`` prints (one rendering per team and size; the name is the object's only)."""
    job = list(yaml.safe_load_all(_printed(tuple(sorted(stack.items())), team, nodes)))[1]
    job["metadata"]["name"] = name
    return job


@dataclass
class Case:
    id: str
    teams: list[str]
    jobs: list[tuple[str, str, int]]
    """(team, job name, nodes), submitted in this order."""
    admitted: set[str]
    then_finish: str | None = None
    """A job that ends after the first pass; a second pass follows."""
    admitted_after: set[str] = frozenset()
    gpu_type: str = "g6.8xlarge"
    gpu_nodes: int = 2


CASES = [
    Case(
        "over-quota-waits-while-the-other-team-runs",
        ["vision:1nodes:borrow", "nlp:1nodes"],
        [("nlp", "small", 1), ("vision", "big", 2)],
        {"small"},
        "small",
        {"big"},
    ),
    Case(
        "own-quota-full-no-cohort",
        ["vision:1nodes", "nlp:1nodes"],
        [("vision", "a", 1), ("vision", "b", 1), ("nlp", "c", 1)],
        {"a", "c"},
        "a",
        {"b"},
    ),
    Case(
        "a-lender-never-borrows",
        ["vision:1nodes:borrow", "nlp:1nodes"],
        [("nlp", "first", 1), ("nlp", "second", 1)],
        {"first"},
        "first",
        {"second"},
    ),
    Case(
        "four-gpu-nodes-quota-in-gpus",
        ["vision:8gpus", "nlp:4gpus"],
        [("vision", "two", 2), ("vision", "one", 1), ("nlp", "n", 1)],
        {"two", "n"},
        "two",
        {"one"},
        gpu_type="g6.12xlarge",
        gpu_nodes=3,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_queued_jobs_are_admitted_whole_within_quota(case):
    stack = {"gpuInstanceType": case.gpu_type, "gpuNodeCount": case.gpu_nodes, "jobQueues": json.dumps(case.teams)}
    kueue = Kueue(queue_objects(stack))
    jobs = {name: kueue.submit(rendered(stack, team, name, nodes)) for team, name, nodes in case.jobs}
    first = kueue.schedule()
    assert {n for n, d in first.items() if d.admitted} == case.admitted, first
    for name, job in jobs.items():
        assert job["spec"]["suspend"] is (name not in case.admitted)
        if name not in case.admitted:
            assert "insufficient unused quota for nvidia.com/gpu" in first[name].message
    if case.then_finish:
        kueue.finish(jobs[case.then_finish])
        second = kueue.schedule()
        assert {n for n, d in second.items() if d.admitted} == set(case.admitted_after), second


def test_only_gpus_count_so_the_cpu_head_and_submitter_need_no_quota():
    """The Kueue configuration's ``quotaCheckStrategy: IgnoreUndeclared`` is what lets a job in: its head and
    submitter ask for CPU and memory, which no ClusterQueue covers."""
    stack = {"gpuInstanceType": "g6.8xlarge", "jobQueues": json.dumps(["vision:1nodes", "nlp:1nodes"])}
    strict = Kueue(queue_objects(stack), ignore_undeclared=False)
    strict.submit(rendered(stack, "vision", "a", 1))
    decision = strict.schedule()["a"]
    assert not decision.admitted and "unavailable in ClusterQueue" in decision.message
