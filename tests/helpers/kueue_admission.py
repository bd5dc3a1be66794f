"""A test double of Kueue v0.19.2's admission decision, for rehearsing team queues without an API server.

It reads the objects the stack renders (ResourceFlavor, ClusterQueue, LocalQueue) and the RayJobs ``ray-efa-eks
rayjob --dry-run`` prints, and decides admission as Kueue's code does at tag v0.19.2:

* a RayJob's Workload has one PodSet for the head (count 1), one per worker group (count ``replicas`` x
  ``numOfHosts``) and one for the submitter in K8sJobMode (count 1): pkg/controller/jobs/raycluster/common.go
  ``BuildPodSets``/``effectiveWorkerCount``, pkg/controller/jobs/rayjob/rayjob_controller.go ``addSubmitterPodSet``;
* a pod's request is Kubernetes' ``PodRequests`` (the containers' sum, or the largest init container if bigger),
  times the PodSet's count: pkg/workload/workload.go ``totalRequestsFromPodSets``;
* with ``quotaCheckStrategy: IgnoreUndeclared`` (beta, on by default in v0.19) a resource the ClusterQueue does not
  cover is skipped; otherwise a non-zero undeclared request never fits: flavorassigner.go;
* a request fits when usage plus request is at most what is available: the ClusterQueue's nominal quota less its
  usage, plus, in a cohort, what the cohort has left, capped by the queue's ``borrowingLimit`` (no lending limits):
  pkg/cache/scheduler/resource_node.go ``available``, flavorassigner.go ``fitsResourceQuota``;
* the whole Workload is admitted or none of it; admitted, ``spec.suspend`` becomes false
  (site/content/en/docs/tasks/run/rayjobs.md, "Suspend control"); a finished job frees its usage.

Not modelled (the page docs/team-jobs.md lists them too): preemption (``reclaimWithinCohort``), ``waitForPodsReady``
eviction and ``blockAdmission``, priorities and fair sharing, several flavors or resource groups per queue (the
stack renders one), lending limits, admission checks, topology-aware scheduling, pod overhead and sidecar init
containers (none is rendered: refused), the Workload object itself.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
_SUFFIX = {
    "m": Fraction(1, 1000),
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}


def quantity(value: Any) -> Fraction:
    """A Kubernetes quantity ('500m', '8Gi', 4) as an exact number."""
    text = str(value)
    for suffix in sorted(_SUFFIX, key=len, reverse=True):
        if text.endswith(suffix):
            return Fraction(text[: -len(suffix)]) * _SUFFIX[suffix]
    return Fraction(text)


def _requests(container: dict[str, Any]) -> dict[str, Fraction]:
    res = container.get("resources") or {}
    # the API server defaults a missing request to its limit (Kubernetes, "Resource Management for Pods")
    merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
    return {k: quantity(v) for k, v in merged.items()}


def pod_requests(spec: dict[str, Any]) -> dict[str, Fraction]:
    """k8s.io/component-helpers resource.PodRequests: the containers' sum, or an init container's request where it is
    larger (init containers run one at a time, before the others)."""
    assert not spec.get("overhead") and not any(
        c.get("restartPolicy") == "Always" for c in spec.get("initContainers") or []
    ), "pod overhead and sidecar init containers are not modelled (none is rendered)"
    total: dict[str, Fraction] = {}
    for c in spec.get("containers") or []:
        for k, v in _requests(c).items():
            total[k] = total.get(k, 0) + v
    for c in spec.get("initContainers") or []:
        for k, v in _requests(c).items():
            total[k] = max(total.get(k, 0), v)
    return total


def pod_sets(rayjob: dict[str, Any]) -> list[tuple[str, int, dict[str, Any]]]:
    """(name, count, pod spec) of a RayJob's Workload PodSets."""
    spec = rayjob["spec"]
    cluster = spec["rayClusterSpec"]
    out = [("head", 1, cluster["headGroupSpec"]["template"]["spec"])]
    for wg in cluster.get("workerGroupSpecs") or []:
        count = wg.get("replicas", 1) * max(1, wg.get("numOfHosts", 1))
        out.append((wg["groupName"], count, wg["template"]["spec"]))
    if spec.get("submissionMode") == "K8sJobMode":
        out.append(("submitter", 1, (spec.get("submitterPodTemplate") or {}).get("spec") or {}))
    return out


def workload_requests(rayjob: dict[str, Any]) -> dict[str, Fraction]:
    """The Workload's total requests: each PodSet's pod requests times its count."""
    total: dict[str, Fraction] = {}
    for _, count, spec in pod_sets(rayjob):
        for k, v in pod_requests(spec).items():
            total[k] = total.get(k, 0) + v * count
    return total


@dataclass
class _Queue:
    name: str
    cohort: str | None
    namespaces: set[str]
    flavor: str
    nominal: dict[str, Fraction]
    borrowing_limit: dict[str, Fraction | None]
    usage: dict[str, Fraction] = field(default_factory=dict)


@dataclass
class Admission:
    """One decision: admitted or why not (Kueue's own words, as in a Workload's ``QuotaReserved`` condition)."""

    admitted: bool
    message: str


class Kueue:
    """The admission decisions of one Kueue over the rendered queue objects (module docstring)."""

    def __init__(self, objects: list[dict[str, Any]], ignore_undeclared: bool = True):
        self.ignore_undeclared = ignore_undeclared
        self.flavors = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ResourceFlavor"}
        self.local = {
            (o["metadata"]["namespace"], o["metadata"]["name"]): o["spec"]["clusterQueue"]
            for o in objects
            if o["kind"] == "LocalQueue"
        }
        self.queues: dict[str, _Queue] = {}
        for o in objects:
            if o["kind"] != "ClusterQueue":
                continue
            (group,) = o["spec"]["resourceGroups"]  # the stack renders one group with one flavor
            (flavor,) = group["flavors"]
            assert flavor["name"] in self.flavors, f"ClusterQueue {o['metadata']['name']}: no flavor {flavor['name']}"
            sel = o["spec"].get("namespaceSelector", {}).get("matchLabels", {})
            self.queues[o["metadata"]["name"]] = _Queue(
                name=o["metadata"]["name"],
                cohort=o["spec"].get("cohortName"),
                namespaces={sel["kubernetes.io/metadata.name"]} if "kubernetes.io/metadata.name" in sel else set(),
                flavor=flavor["name"],
                nominal={r["name"]: quantity(r["nominalQuota"]) for r in flavor["resources"]},
                borrowing_limit={
                    r["name"]: quantity(r["borrowingLimit"]) if "borrowingLimit" in r else None
                    for r in flavor["resources"]
                },
            )
        self.pending: list[dict[str, Any]] = []
        self.admitted: dict[tuple[str, str], tuple[str, dict[str, Fraction]]] = {}

    def _queue_of(self, job: dict[str, Any]) -> _Queue:
        ns, lq = job["metadata"]["namespace"], job["metadata"]["labels"][QUEUE_LABEL]
        cq = self.queues[self.local[(ns, lq)]]
        assert ns in cq.namespaces, f"ClusterQueue {cq.name} does not select namespace {ns}"
        return cq

    def available(self, cq: _Queue, resource: str) -> Fraction:
        """resource_node.go ``available`` for a ClusterQueue in a flat cohort with no lending limits."""
        own = cq.nominal[resource] - cq.usage.get(resource, 0)
        if cq.cohort is None:
            return own
        members = [q for q in self.queues.values() if q.cohort == cq.cohort]
        parent = sum(q.nominal.get(resource, 0) - q.usage.get(resource, 0) for q in members)
        limit = cq.borrowing_limit.get(resource)
        if limit is not None:
            parent = min(own + limit, parent)
        return parent

    def submit(self, job: dict[str, Any]) -> dict[str, Any]:
        """Queue a RayJob (a copy, returned: Kueue's view of the object, ``spec.suspend`` its to change)."""
        job = copy.deepcopy(job)
        assert job["spec"].get("suspend") is True, "a queued RayJob is created suspended"
        self._queue_of(job)
        self.pending.append(job)
        return job

    def decide(self, job: dict[str, Any]) -> Admission:
        cq = self._queue_of(job)
        need = workload_requests(job)
        for res, amount in need.items():
            if res not in cq.nominal:
                if amount == 0 or self.ignore_undeclared:
                    continue
                return Admission(False, f"resource {res} unavailable in ClusterQueue")
            have = self.available(cq, res)
            if amount > have:
                return Admission(
                    False,
                    f"couldn't assign flavors to pod set: insufficient unused quota for {res} "
                    f"in flavor {cq.flavor}, {amount - have} more needed",
                )
        return Admission(True, f"Quota reserved in ClusterQueue {cq.name}")

    def schedule(self) -> dict[str, Admission]:
        """One pass over the pending jobs in submission order (BestEffortFIFO: a job that does not fit does not
        block the next); each admitted job is unsuspended and its GPUs counted."""
        out = {}
        for job in list(self.pending):
            decision = self.decide(job)
            out[job["metadata"]["name"]] = decision
            if decision.admitted:
                cq = self._queue_of(job)
                need = {k: v for k, v in workload_requests(job).items() if k in cq.nominal}
                for k, v in need.items():
                    cq.usage[k] = cq.usage.get(k, 0) + v
                job["spec"]["suspend"] = False
                self.pending.remove(job)
                self.admitted[(job["metadata"]["namespace"], job["metadata"]["name"])] = (cq.name, need)
        return out

    def finish(self, job: dict[str, Any]) -> None:
        """The job ended and KubeRay deleted its cluster: its usage is freed."""
        name, need = self.admitted.pop((job["metadata"]["namespace"], job["metadata"]["name"]))
        cq = self.queues[name]
        for k, v in need.items():
            cq.usage[k] -= v
