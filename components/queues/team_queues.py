"""Team job queues: the ``jobQueues`` grammar and the Kueue objects each team gets, as plain data.

A team is written ``NAME:QUOTA[:borrow]`` (``vision:2nodes``, ``nlp:16gpus:borrow``). The objects follow Kueue
v0.19.2 (API ``kueue.x-k8s.io/v1beta2``, the storage version of its CRDs; tests validate them against those CRDs):

* one ResourceFlavor per GPU node group, whose ``nodeLabels`` Kueue copies into the admitted pods' nodeSelector
  (site/content/en/docs/concepts/resource_flavor.md);
* one ClusterQueue per team, selecting only the team's namespace, with a ``nvidia.com/gpu`` nominal quota. Only
  GPUs are covered: the Kueue config sets ``resources.quotaCheckStrategy: IgnoreUndeclared``
  (apis/config/v1beta2/configuration_types.go, "only resources ... declared in the ClusterQueue's coveredResources
  are checked"), so the CPU-only head and submitter pods need no quota. With borrowing, every team is in one
  cohort: a team that borrows has no ``borrowingLimit``, the others ``borrowingLimit: 0`` (they lend, never
  borrow: cluster_queue.md, "BorrowingLimit"), and ``reclaimWithinCohort: Any`` lets a lender take its quota back
  by preempting the borrower, so a burst waits instead of starving the others
  (site/content/en/docs/concepts/preemption.md at v0.19.2);
* one LocalQueue in the team's namespace (the ``kueue.x-k8s.io/queue-name`` label of a RayJob names it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..config.values import Grammar, ValueProblem

KUEUE_API = "kueue.x-k8s.io/v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
"""The label by which Kueue manages a RayJob (site/content/en/docs/tasks/run/rayjobs.md, "Queue selection")."""
GPU_RESOURCE = "nvidia.com/gpu"
COHORT = "ray-efa-eks"
NAMESPACE_PREFIX = "team-"
TEAM_LABEL = "ray-efa-eks/team"
"""On each team namespace: the team's name (Kueue's managedJobsNamespaceSelector selects on its presence)."""
MAX_TEAM_NAME = 40
"""Team names are DNS labels short enough for ``team-NAME`` namespaces and the IAM role names built from them."""
_TEAM = re.compile(r"([a-z0-9]([-a-z0-9]*[a-z0-9])?):([1-9][0-9]{0,5})(nodes|gpus)(:borrow)?")
FORMAT = "NAME:QUOTA[:borrow], QUOTA a whole number of nodes or GPUs, e.g. vision:2nodes or nlp:16gpus:borrow"


@dataclass(frozen=True)
class TeamQueue:
    """One team: its name, its GPU quota in ``unit`` (nodes or gpus), whether it may borrow idle quota."""

    name: str
    quota: int
    unit: str
    borrow: bool = False

    @property
    def namespace(self) -> str:
        return f"{NAMESPACE_PREFIX}{self.name}"

    def gpus(self, gpus_per_node: int) -> int:
        """The quota in GPUs (Kueue counts ``nvidia.com/gpu``)."""
        return self.quota * gpus_per_node if self.unit == "nodes" else self.quota

    def __str__(self) -> str:
        return f"{self.name}:{self.quota}{self.unit}{':borrow' if self.borrow else ''}"


def parse_team(text: str) -> TeamQueue:
    """``vision:2nodes:borrow`` -> TeamQueue; ValueProblem naming the format otherwise."""
    m = _TEAM.fullmatch(str(text).strip())
    if not m:
        raise ValueProblem(f"each team is {FORMAT}; NAME a lowercase DNS label", text)
    if len(m[1]) > MAX_TEAM_NAME:
        raise ValueProblem(
            f"team name {m[1]!r} is longer than {MAX_TEAM_NAME} characters (its namespace is "
            f"{NAMESPACE_PREFIX}NAME and its IAM role is named after it); use a shorter name",
            text,
        )
    return TeamQueue(m[1], int(m[3]), m[4], bool(m[5]))


@dataclass(frozen=True)
class TeamQueueText(Grammar):
    """One ``jobQueues`` item (:data:`FORMAT`)."""

    def coerce(self, raw: Any) -> str:
        return str(raw).strip()

    def check(self, value: Any) -> None:
        parse_team(value)

    def boundary(self) -> list[Any]:
        return [
            "vision:2nodes",
            "nlp:16gpus:borrow",
            "a:1nodes",
            "Vision:2nodes",
            "vision:0nodes",
            "vision:2",
            "vision:2nodes:lend",
            f"{'a' * (MAX_TEAM_NAME + 1)}:1nodes",
        ]


def teams_problem(teams: list[TeamQueue], gpus_per_node: int) -> tuple[str, str] | None:
    """(bad value, fix) for a team list that cannot work as queues, or None."""
    seen: set[str] = set()
    for t in teams:
        if t.name in seen:
            return str(t), f"team {t.name!r} is listed twice; give each team one entry"
        seen.add(t.name)
        if t.unit == "gpus" and t.quota % gpus_per_node:
            return str(t), (
                f"{t.quota} GPUs is not a whole number of {gpus_per_node}-GPU nodes: a Ray worker takes a "
                f"whole node, so the rest could never be used; use a multiple of {gpus_per_node}, or "
                "a quota in nodes"
            )
    if len(teams) == 1 and teams[0].borrow:
        return str(teams[0]), "borrow needs another team to borrow from; remove :borrow or add a team"
    return None


def flavor_name(instance_type: str) -> str:
    """The ResourceFlavor of a GPU node group's instance type: ``g6.12xlarge`` -> ``gpu-g6-12xlarge``."""
    return "gpu-" + instance_type.replace(".", "-")


def resource_flavor(instance_type: str, node_labels: dict[str, str]) -> dict[str, Any]:
    """The ResourceFlavor of one GPU node group: Kueue adds ``node_labels`` to the nodeSelector of the pods it admits
    on it (site/content/en/docs/concepts/resource_flavor.md, ``spec.nodeLabels``)."""
    return {
        "apiVersion": KUEUE_API,
        "kind": "ResourceFlavor",
        "metadata": {"name": flavor_name(instance_type)},
        "spec": {"nodeLabels": dict(node_labels)},
    }


def cluster_queue(team: TeamQueue, instance_type: str, gpus_per_node: int, cohort: bool) -> dict[str, Any]:
    """The team's ClusterQueue: its quota of the node group's GPUs, its own namespace only."""
    quota: dict[str, Any] = {"name": GPU_RESOURCE, "nominalQuota": team.gpus(gpus_per_node)}
    if cohort and not team.borrow:
        quota["borrowingLimit"] = 0
    spec: dict[str, Any] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": team.namespace}},
        "queueingStrategy": "BestEffortFIFO",
        "resourceGroups": [
            {
                "coveredResources": [GPU_RESOURCE],
                "flavors": [{"name": flavor_name(instance_type), "resources": [quota]}],
            }
        ],
    }
    if cohort:
        spec["cohortName"] = COHORT
        spec["preemption"] = {"reclaimWithinCohort": "Any", "withinClusterQueue": "Never"}
    return {"apiVersion": KUEUE_API, "kind": "ClusterQueue", "metadata": {"name": team.namespace}, "spec": spec}


def local_queue(team: TeamQueue) -> dict[str, Any]:
    """The team's LocalQueue, named like its namespace, pointing at its ClusterQueue."""
    return {
        "apiVersion": KUEUE_API,
        "kind": "LocalQueue",
        "metadata": {"name": team.namespace, "namespace": team.namespace},
        "spec": {"clusterQueue": team.namespace},
    }


def team_objects(
    teams: list[TeamQueue], instance_type: str, gpus_per_node: int, node_labels: dict[str, str]
) -> list[dict[str, Any]]:
    """Every Kueue object of the queues: the flavor, then each team's ClusterQueue and LocalQueue."""
    cohort = any(t.borrow for t in teams)
    out = [resource_flavor(instance_type, node_labels)]
    for t in teams:
        out += [cluster_queue(t, instance_type, gpus_per_node, cohort), local_queue(t)]
    return out


def capacity_problem(teams: list[TeamQueue], gpus_per_node: int, max_nodes: int) -> str | None:
    """Why the quotas ask for more GPUs than the GPU node group can hold (``max_nodes`` x ``gpus_per_node``), or None.

    Kueue's quota is a promise, not a node: a quota above what the group can scale to admits a job whose workers then
    wait for nodes that can never come, holding the nodes they did get.
    """
    capacity = max_nodes * gpus_per_node
    for t in teams:
        if t.gpus(gpus_per_node) > capacity:
            return (
                f"team {t.name}'s quota ({t.gpus(gpus_per_node)} GPUs) exceeds the GPU node group "
                f"({max_nodes} nodes x {gpus_per_node} GPUs = {capacity}): lower it or raise gpuNodeCount"
            )
    total = sum(t.gpus(gpus_per_node) for t in teams)
    if total > capacity:
        return (
            f"the teams' quotas add up to {total} GPUs, more than the GPU node group holds ({max_nodes} nodes x "
            f"{gpus_per_node} GPUs = {capacity}): Kueue would admit jobs whose nodes cannot exist; lower the "
            "quotas (borrowing shares idle quota) or raise gpuNodeCount"
        )
    return None
