"""What the node agent reads of its node's Ray worker pods: which init container statuses are a failed
provider check, and the one list it asks the API server for."""

from __future__ import annotations

import pytest

from ray_efa_eks.efacheck import worker_pods as wp


def _pod(*statuses, name="ray-gpu-worker-x1", node="gpu-a", ns="ray"):
    return {
        "metadata": {"name": name, "namespace": ns},
        "spec": {"nodeName": node},
        "status": {"initContainerStatuses": list(statuses)},
    }


def _check(**status):
    return {"name": wp.PROVIDER_CONTAINER, "ready": False, "restartCount": 0, **status}


def _terminated(code, message=None):
    return {
        "terminated": {
            "exitCode": code,
            "reason": "Error" if code else "Completed",
            **({"message": message} if message is not None else {}),
        }
    }


WAITING = {"waiting": {"reason": "PodInitializing"}}
CRASHLOOP = {"waiting": {"reason": "CrashLoopBackOff"}}
RUNNING = {"running": {"startedAt": "2026-12-05T03:00:00Z"}}
SAID = (
    "pod ray/ray-gpu-worker-x1: init container efa-provider-check exited {} (fi_info -p efa on the worker's own "
    "EFA device)"
)


@pytest.mark.parametrize(
    "status,failed",
    [
        (_check(state=_terminated(1)), 1),  # restartPolicy Never: the pod is Failed with it
        (_check(state=_terminated(61)), 61),
        (_check(state=_terminated(-1)), -1),
        (_check(state=CRASHLOOP, lastState=_terminated(61)), 61),  # another restart policy: restarting
        (_check(state=RUNNING, lastState=_terminated(2)), 2),  # its second run, the first failed
        (_check(state=_terminated(3), lastState=_terminated(4)), 3),  # now wins, one line per pod
        (_check(state=RUNNING), None),
        (_check(state=WAITING), None),
        (_check(state=_terminated(0)), None),
        (_check(state=RUNNING, lastState=_terminated(0)), None),
        (_check(state=_terminated(None)), None),  # no exit code yet is no failure
        (_check(state=_terminated("1")), None),  # nor one that is not a number
        (_check(), None),
        ({"name": "wait-gcs-ready", "state": _terminated(1)}, None),  # another init container is not this check
    ],
)
def test_which_statuses_are_a_failed_provider_check(status, failed):
    expected = [] if failed is None else [SAID.format(failed)]
    assert wp.provider_failures([_pod(status)]) == expected


def test_another_init_container_before_the_check_does_not_hide_it():
    other = {"name": "wait-gcs-ready", "state": _terminated(0)}
    assert wp.provider_failures([_pod(other, _check(state=_terminated(7)))]) == [SAID.format(7)]


def test_the_line_carries_the_checks_own_words_on_one_line_cut_at_200():
    said = "[efa-provider-check] FAIL on node gpu-a: fi_info -p efa -t FI_EP_RDM exited 61\n  fi_getinfo: -61 "
    (line,) = wp.provider_failures([_pod(_check(state=_terminated(1, said)))])
    assert (
        line == SAID.format(1) + ": [efa-provider-check] FAIL on node gpu-a: fi_info -p efa -t FI_EP_RDM exited "
        "61 fi_getinfo: -61"
    )
    (long,) = wp.provider_failures([_pod(_check(state=_terminated(1, "x" * 500)))])
    assert long == SAID.format(1) + ": " + "x" * 200
    (empty,) = wp.provider_failures([_pod(_check(state=_terminated(1, "  \n ")))])
    assert empty == SAID.format(1)


def test_every_failed_pod_has_its_line_and_a_pod_without_status_none():
    pods = [
        _pod(_check(state=_terminated(1)), name="a"),
        {"metadata": {"name": "new"}},
        {"metadata": {"name": "b", "namespace": "ray"}, "status": {"initContainerStatuses": None}},
        _pod(_check(state=_terminated(2)), name="c"),
        {},
    ]
    assert [line.split(":")[0] for line in wp.provider_failures(pods)] == ["pod ray/a", "pod ray/c"]
    assert wp.provider_failures([{"status": {"initContainerStatuses": [_check(state=_terminated(9))]}}]) == [
        "pod ?/?: init container efa-provider-check exited 9 (fi_info -p efa on the worker's own EFA device)"
    ]


class Recorder:
    def __init__(self, answer):
        self.answer, self.calls = answer, []

    def call(self, method, path, body=None, content_type="application/json"):
        self.calls.append((method, path, body))
        return self.answer


def test_the_list_is_one_get_by_node_and_kuberays_worker_label():
    api = Recorder(
        {
            "kind": "PodList",
            "items": [
                _pod(name="mine"),
                _pod(name="theirs", node="gpu-b"),
                {"metadata": {"name": "unscheduled"}, "spec": {}},
            ],
        }
    )
    assert [p["metadata"]["name"] for p in wp.list_workers(api, "gpu-a", "ray")] == ["mine"]
    assert api.calls == [
        (
            "GET",
            "/api/v1/namespaces/ray/pods?fieldSelector=spec.nodeName%3Dgpu-a&labelSelector=ray.io%2Fnode-type%3Dworker",
            None,
        )
    ]


@pytest.mark.parametrize("answer", [None, {}, {"items": None}, {"items": []}])
def test_an_empty_answer_is_no_pod(answer):
    assert wp.list_workers(Recorder(answer), "gpu-a", "ray") == []


def test_the_names_are_the_worker_pods_init_container_and_kuberays_worker_label():
    """The init container is the stack's own (components/ray/raycluster.py); the label is the one the stack's PodMonitor
    selects KubeRay's worker pods by (ray-operator v1.7.0 utils/constant.go ``RayNodeTypeLabelKey`` = ray.io/node-type,
    apis/ray/v1/raycluster_types.go ``WorkerNode`` = worker)."""
    from ray_efa_eks.components.observability import observability
    from ray_efa_eks.components.ray import raycluster

    assert wp.PROVIDER_CONTAINER == raycluster.PROVIDER_CHECK
    assert wp.WORKER_SELECTOR == f"{observability.RAY_NODE_TYPE}=worker"
    workers = observability.ray_pod_monitors("monitoring", "ray")[1]
    assert workers["spec"]["selector"]["matchLabels"] == dict([wp.WORKER_SELECTOR.split("=")])
    init = raycluster.provider_check_container("img", {}, [])
    assert init["name"] == wp.PROVIDER_CONTAINER
    assert init["terminationMessagePolicy"] == "FallbackToLogsOnError"  # its stderr is the status' message we quote
