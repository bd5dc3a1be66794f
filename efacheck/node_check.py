"""Per-node fabric proof: a GPU node proves its own EFA path before Ray may schedule on it.

A GPU node joins with the startup taint ``startup-taint.cluster-autoscaler.kubernetes.io/efa-unproven`` (NoSchedule),
so no Ray worker lands on it. This check runs as the ``fabric-proof`` container of the node agent's pod on that node
(the pod tolerates the taint) and decides, from what a pod *without* the EFA device may see:

- ``devices``: as many EFA devices under ``/sys/class/infiniband`` as the catalogue gives the instance type;
- ``counters``: every device's port counters readable (what the gate's and each run's witness read);
- ``module``: the efa kernel module loaded (``/sys/module/efa``, not namespaced);
- ``plugin``: the EFA device plugin advertising that many ``vpc.amazonaws.com/efa`` (the node's allocatable);
- ``provider``: the image's libfabric has the efa provider (``fi_info -l``).

Why not ``fi_info -p efa`` here: libibverbs keeps a device only if its ``/dev/infiniband/uverbsN`` exists
(rdma-core libibverbs/init.c ``try_access_device``, on both the netlink and the sysfs enumeration paths), the EFA
device plugin mounts that node only into containers that request ``vpc.amazonaws.com/efa``, and libfabric's efa
provider reports no device and so no fi_info entry when ``ibv_get_device_list`` finds none (prov/efa/src/
efa_device.c ``efa_device_list_initialize``: ``-FI_ENODEV``). Holding the device would take the node's only EFA
interface (g6.12xlarge has one) from the Ray worker for the agent pod's whole life. ``fi_info -l`` lists every
provider libfabric registered (src/fabric.c ``ofi_getprovinfo``), and the efa provider registers itself even
without a device (efa_prov.c returns ``&efa_prov`` when the device list fails), so it proves the library, not the
device. The device-level ``fi_info -p efa`` runs in each Ray worker pod's ``efa-provider-check`` init container,
which holds the worker's EFA device (components/ray/raycluster.py): a node whose provider fails never starts Ray.

All pass: it removes the startup taint from its own node only, with a JSON patch whose ``test`` operation makes the
API server refuse the removal unless that exact taint is still at that index (no other taint is ever touched, and
a concurrent change to the taint list fails the patch instead of removing the wrong entry). Anything fails: the
taint stays, the node gets the condition ``EfaFabricProven=False`` naming what failed, and an Event on the Node.

It runs as a loop (:func:`run_loop`), not once: EKS does not put a removed managed-node-group taint back ("If
taints that were created using a managed node group are removed manually from a node, then Amazon EKS doesn't add
the taints back", Node taints on managed node groups), but ``UpdateNodegroupConfig`` applies a changed taint list
"to the nodes in the node group after the update", so the taint can reappear on a running node; the loop proves
the node again and removes it again. A node whose proof starts failing after it was proven gets the condition and
an Event but is not tainted again on its sysfs checks (docs/gpus.md, "Per-node proof": NoSchedule moves no running
worker, and Ray places tasks inside the worker pod already there, so a taint would not stop the use that matters;
each run's ``--require-efa`` judges the fabric a job really used).

One failure does put the taint back: a Ray worker pod on this node whose ``efa-provider-check`` init container
(the device-level ``fi_info -p efa``, which the agent cannot run) terminated non-zero (efacheck/worker_pods.py
:func:`provider_failures`). Such a pod never started Ray, so no work is lost, and without the taint KubeRay's next
worker pod lands on the same node and fails the same way, for ever: with autoscaler v2 (the stack's,
components/ray/ray_autoscaler.py) KubeRay sets every worker's ``restartPolicy: Never`` (kuberay v1.7.0
ray-operator/controllers/ray/common/pod.go ``DefaultWorkerPodTemplate``), so the failed init container makes the
pod ``Failed``; ``reconcilePods`` deletes a ``Failed`` worker (raycluster_controller.go ``shouldDeletePod``: "a
terminal state. KubeRay will delete the Pod and create new Pods in the next reconciliation if necessary") and
the next reconcile creates its replacement, which the scheduler may put on the same node. The node then gets
``EfaFabricProven=False`` with reason :data:`PROVIDER_FAILED` (the record), an Event naming the pod, its exit code
and what fi_info said (the container's stderr, ``FallbackToLogsOnError``), and the startup taint added back by a
guarded JSON patch (:func:`add_startup_taint`); while that reason is on the node it never re-proves itself on sysfs
alone, so it does not flip back (the record goes with the Node object: a replaced node is a new Node). Between full
proofs the loop lists its node's Ray worker pods every :data:`POD_INTERVAL_S` seconds, because a ``Failed`` pod
lives only until KubeRay's next reconcile. What the Cluster Autoscaler then does with the node: docs/gpus.md,
"Per-node proof".
Stdlib only: shipped in the node agent's ConfigMap like the exporter, run by a small Python image. That image has no
libfabric, so the agent runs with ``--skip-provider``: the ``provider`` finding then names the check that covers it,
each Ray worker's ``efa-provider-check`` (the DLC's own libfabric, device-level), whose failure puts the taint back.
"""

from __future__ import annotations

import argparse
import math
import os
import ssl
import sys
import time
import urllib.error
from typing import Any, Callable

from .cli import ArgumentParser, run_cli

# Exit codes (efacheck/exit_codes.py ``node-check``, docs/cli.md): the node proved itself (taint removed); a check
# failed or a Ray worker's provider check failed (taint kept or put back, condition and Event written); the API server
# could not be reached or refused a call (nothing proven). Usage errors are 64 (efacheck/cli.py), not argparse's 2.
from .exit_codes import EXIT_FAILED as EXIT_UNPROVEN
from .exit_codes import EXIT_NO_ANSWER as EXIT_API
from .exit_codes import EXIT_OK as EXIT_PROVEN
from .node_api import (
    CONDITION,
    PROVIDER_FAILED,
    STARTUP_TAINT,
    TAINT_KEY,
    TOKEN_DIR,
    Api,
    write_condition,
    add_startup_taint,
    current_condition,
    on_record,
    remove_startup_taint,
    report,
)
from .node_findings import (
    EFA_RESOURCE,
    INSTANCE_TYPE_LABEL,
    PROVIDER_LEFT_TO_WORKERS,
    READ_BUDGET_S,
    Finding,
    decide,
    expected_for,
    libfabric_lists_efa,
    parse_expected,
)
from .worker_pods import list_workers, provider_failures

__all__ = [
    "CONDITION",
    "EFA_RESOURCE",
    "EXIT_API",
    "EXIT_PROVEN",
    "EXIT_UNPROVEN",
    "INSTANCE_TYPE_LABEL",
    "INTERVAL_S",
    "POD_INTERVAL_S",
    "PROVIDER_FAILED",
    "PROVIDER_LEFT_TO_WORKERS",
    "READ_BUDGET_S",
    "STARTUP_TAINT",
    "TAINT_KEY",
    "TOKEN_DIR",
    "Api",
    "Finding",
    "add_startup_taint",
    "current_condition",
    "decide",
    "expected_for",
    "fail_provider",
    "libfabric_lists_efa",
    "main",
    "on_record",
    "parse_expected",
    "remove_startup_taint",
    "report",
    "run_check",
    "run_loop",
    "watch_workers",
]
"""The public names, importable from here (the findings live in node_findings, the API calls in node_api)."""


def fail_provider(api: Api, node: dict[str, Any], failures: list[str], log: Callable[[str], None]) -> int:
    """Record a worker's provider failure (condition, Event) unless already recorded, then make sure the startup
    taint is on the node; EXIT_UNPROVEN, or EXIT_API when a call failed (the next round tries again)."""
    name = node["metadata"]["name"]
    previous = current_condition(node)
    try:
        if not on_record(previous):
            message = "; ".join(f"provider: {f}" for f in failures)
            message = (message + f"; node tainted with {TAINT_KEY} again until it is replaced")[:1024]
            for f in failures:
                log(f"[node-check] FAIL provider: {f}")
            # not on record: ``previous`` is never this failure, so the condition is always written
            write_condition(api, name, node["metadata"].get("uid"), "False", PROVIDER_FAILED, message, None)
        if add_startup_taint(api, node):
            log(
                f"[node-check] node {name}: a Ray worker's provider check failed; put back taint {TAINT_KEY} "
                f"(recorded as {CONDITION}=False reason {PROVIDER_FAILED}: it is not proven again while that is there)"
            )
    except (urllib.error.URLError, OSError, ValueError) as e:
        log(f"[node-check] the API server refused or failed a call for node {name}: {e}")
        return EXIT_API
    return EXIT_UNPROVEN


def watch_workers(api: Api, node_name: str, namespace: str, log: Callable[[str], None] = print) -> int | None:
    """Between full proofs: list this node's Ray workers; on a provider failure, :func:`fail_provider` (None when
    there is none)."""
    try:
        failures = provider_failures(list_workers(api, node_name, namespace))
        if not failures:
            return None
        node = api.call("GET", f"/api/v1/nodes/{node_name}")
    except (urllib.error.URLError, OSError, ValueError) as e:
        log(f"[node-check] cannot read node {node_name} or its Ray workers: {e}")
        return EXIT_API
    return fail_provider(api, node, failures, log)


def run_check(
    api: Api,
    node_name: str,
    sysfs: str,
    expected_devices: int | dict[str, int],
    provider: Callable[[], tuple[bool, str]] = libfabric_lists_efa,
    log: Callable[[str], None] = print,
    module_root: str | None = None,
    workers_namespace: str | None = None,
) -> int:
    """Check this node once, then remove its startup taint or record why not; an exit code (module constants).

    With ``workers_namespace`` it first reads the node's Ray worker pods there: a failed provider check, or one on
    record, keeps (or puts back) the taint whatever the sysfs checks say."""
    try:
        node = api.call("GET", f"/api/v1/nodes/{node_name}")
        failures = provider_failures(list_workers(api, node_name, workers_namespace)) if workers_namespace else []
    except (urllib.error.URLError, OSError, ValueError) as e:
        log(f"[node-check] cannot read node {node_name} or its Ray workers: {e}")
        return EXIT_API
    if failures or on_record(current_condition(node)):
        return fail_provider(api, node, failures, log)
    findings = decide(
        sysfs,
        expected_for(node, expected_devices),
        (node.get("status") or {}).get("allocatable") or {},
        provider(),
        module_root,
    )
    previous = current_condition(node)
    tainted = any(t.get("key") == TAINT_KEY for t in (node.get("spec") or {}).get("taints") or [])
    proven = all(f.ok for f in findings)
    if not (proven and not tainted and previous and previous.get("status") == "True"):
        for f in findings:  # quiet while a proven node stays proven
            log(f"[node-check] {'ok  ' if f.ok else 'FAIL'} {f.check}: {f.detail}")
    try:
        report(api, node_name, node["metadata"].get("uid"), findings, previous)
        if proven:
            if remove_startup_taint(api, node):
                log(f"[node-check] node {node_name} proven; removed taint {TAINT_KEY}")
            return EXIT_PROVEN
    except (urllib.error.URLError, OSError, ValueError) as e:
        log(f"[node-check] the API server refused or failed a call for node {node_name}: {e}")
        return EXIT_API
    if tainted:
        log(f"[node-check] node {node_name} NOT proven: it keeps {TAINT_KEY}; see its {CONDITION} condition")
    else:
        log(
            f"[node-check] node {node_name} was proven and now fails: {CONDITION}=False and an Event; not tainted "
            "again (a running Ray worker would not move; each run's --require-efa judges the fabric it used)"
        )
    return EXIT_UNPROVEN


INTERVAL_S = 60
"""Seconds between proofs: the taint goes within about a minute of the node agent starting (the first proof runs at
once), and a taint put back by a node group update goes within a minute of it."""
POD_INTERVAL_S = 5
"""Seconds between two lists of the node's Ray worker pods: a ``Failed`` worker pod lives only until KubeRay's next
reconcile (it deletes terminal pods at once), so a minute would miss most of them. One list by an indexed field
selector on one node's pods every 5 s is about what the node's kubelet itself asks of the API server."""


def run_loop(
    api: Api,
    node_name: str,
    sysfs: str,
    expected_devices: int | dict[str, int],
    interval_s: float = INTERVAL_S,
    provider: Callable[[], tuple[bool, str]] = libfabric_lists_efa,
    log: Callable[[str], None] = print,
    module_root: str | None = None,
    sleep: Callable[[float], None] = time.sleep,
    rounds: int | None = None,
    workers_namespace: str | None = None,
    pod_interval_s: float = POD_INTERVAL_S,
) -> int:
    """:func:`run_check` every ``interval_s`` seconds, for ever (``rounds``: that many, for tests), and in between
    :func:`watch_workers` every ``pod_interval_s`` when ``workers_namespace`` is given; an API error is retried at
    the next round (the container never crash-loops on a passing API fault)."""
    code, n = EXIT_API, 0
    while rounds is None or n < rounds:
        if n:
            slept = 0.0
            while workers_namespace and slept + pod_interval_s < interval_s:
                sleep(pod_interval_s)
                slept += pod_interval_s
                watch_workers(api, node_name, workers_namespace, log)
            sleep(interval_s - slept)
        code = run_check(api, node_name, sysfs, expected_devices, provider, log, module_root, workers_namespace)
        n += 1
    return code


def _seconds(text: str) -> float:
    """A positive, finite number of seconds (``nan``, ``inf`` and 0 would make the loop spin or never run)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """The ``fabric-proof`` container's command; codes in efacheck/exit_codes.py (``node-check``)."""
    p = ArgumentParser(
        prog=prog,
        exit_codes="node-check",
        description="Prove this node's EFA path, then remove its startup taint; by default again "
        "every --interval seconds, until stopped (the node agent's fabric-proof container).",
    )
    p.add_argument("--node", default=os.environ.get("NODE_NAME"), help="this node's name (default $NODE_NAME)")
    p.add_argument("--sysfs", default="/sys", help="sysfs root holding class/infiniband (default /sys)")
    p.add_argument("--module-root", default=None, help="where the efa module's directory is (default <sysfs>/module)")
    p.add_argument(
        "--expect-devices",
        required=True,
        help="EFA devices the catalogue gives the type: COUNT, or TYPE=COUNT[,TYPE=COUNT...] read against "
        f"the node's {INSTANCE_TYPE_LABEL} label",
    )
    p.add_argument(
        "--interval", type=_seconds, default=INTERVAL_S, help=f"seconds between proofs (default {INTERVAL_S})"
    )
    p.add_argument(
        "--workers-namespace",
        default=None,
        help="namespace of the Ray worker pods to read: a failed efa-provider-check init container in one "
        "on this node puts the startup taint back (default: none, not read)",
    )
    p.add_argument(
        "--pod-interval",
        type=_seconds,
        default=POD_INTERVAL_S,
        help=f"seconds between two reads of this node's Ray worker pods between proofs (default {POD_INTERVAL_S})",
    )
    p.add_argument("--token-dir", default=None, help=f"where the projected token and ca.crt are (default {TOKEN_DIR})")
    p.add_argument(
        "--skip-provider",
        action="store_true",
        help="do not run fi_info -l (an image without libfabric): the Ray workers' efa-provider-check "
        "init containers check the DLC's provider instead",
    )
    p.add_argument("--once", action="store_true", help="prove once and stop, answering with the proof's status")
    a = p.parse_args(argv)
    if not a.node:
        p.error("--node or $NODE_NAME is required")
    try:
        expected: int | dict[str, int] = (
            int(a.expect_devices) if a.expect_devices.isdigit() else parse_expected(a.expect_devices)
        )
    except ValueError as e:
        p.error(str(e))
    try:
        api = Api.in_cluster(a.token_dir)
    except (KeyError, OSError, ssl.SSLError) as e:
        print(
            f"{p.prog}: error: no Kubernetes API to ask (run it in a pod with a service account token): "
            f"{'$' + str(e.args[0]) + ' is not set' if isinstance(e, KeyError) else e}",
            file=sys.stderr,
        )
        return EXIT_API
    provider = (lambda: PROVIDER_LEFT_TO_WORKERS) if a.skip_provider else libfabric_lists_efa
    if a.once:
        return run_check(
            api,
            a.node,
            a.sysfs,
            expected,
            provider=provider,
            module_root=a.module_root,
            workers_namespace=a.workers_namespace,
        )
    return run_loop(
        api,
        a.node,
        a.sysfs,
        expected,
        a.interval,
        provider=provider,
        module_root=a.module_root,
        log=lambda m: print(m, flush=True),
        workers_namespace=a.workers_namespace,
        pod_interval_s=a.pod_interval,
    )


if __name__ == "__main__":  # pragma: no cover - run as the shipped copy: tests/components/test_node_agent_access.py
    sys.exit(run_cli(main, None, "python -m ray_efa_eks.efacheck.node_check"))
