"""Which image digest every Ray pod really runs, and whether the fleet agrees (issue 37).

A tag can move between two pulls: a node that joins later (a scale-up, a replaced node) may run another build of
``ray:train-ml-cuda-v1.1`` than the one the gate checked. The digest a container really runs is known only to the
kubelet, which reports it in the pod's ``status.containerStatuses[].imageID`` (Kubernetes API reference, Pod
v1 ``ContainerStatus.imageID``: "the image ID of the container's image ... may not match the image used in the
PodSpec, as it may have been resolved by the runtime"). Nothing inside the container can read it: the Downward API
exposes no container status, Ray's node labels carry no image, and the image cannot contain its own digest.

So the stack reads it where it lives, with the least privilege that can: the image audit Job
(components/efa_check.py ``ImageAudit``) runs as its own ServiceAccount, allowed only ``get``/``list`` of pods in
the Ray namespace, as a non-root user; it waits for every Ray pod to run, and :func:`fleet` fails stage
``image-fleet`` when they do not all run one digest, naming the pods and digests. The gate Job itself still has no
API token. When ``dlcImage`` is pinned by digest the kubelet pulls exactly that digest and containerd verifies it,
so the fleet cannot be mixed; the audit then confirms what the reference already says.

Run as ``python -m efacheck.image_fleet --namespace ray --cluster ray --expect-pods 3`` (the audit Job's command):
prints one JSON line and exits 0 (one digest), 1 (mixed fleet), 2 (undetermined: pods missing or unreadable); a bad
option is a usage error (64), never read as a verdict (``image-fleet`` in efacheck/exit_codes.py).
"""

from __future__ import annotations

import json
import math
import os
import re
import ssl
import sys
import time
import urllib.parse
import urllib.request
from typing import Any, Callable

from .cli import ArgumentParser, run_cli

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
API = "https://kubernetes.default.svc"
RAY_CLUSTER_LABEL = "ray.io/cluster"
"""KubeRay's label on every pod of a RayCluster (ray-operator common/pod.go ``labelPod``)."""
RAY_CONTAINERS = ("ray-head", "ray-worker")
"""The Ray container of the head and worker pods (components/raycluster.py)."""
_DIGEST = re.compile(r"(sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128})$")
EXIT = {"ok": 0, "mixed": 1, "undetermined": 2}


def digest_of(reference: str | None) -> str | None:
    """The ``sha256:<hex>`` an image reference or a reported imageID names, None when it names none.

    imageID shapes the runtimes report: containerd ``registry/repo@sha256:<hex>`` (the repo digest), docker
    ``docker-pullable://registry/repo@sha256:<hex>``, or a bare image id ``sha256:<hex>`` for an image with no repo
    digest (built locally); a reference ``repo:tag@sha256:<hex>`` pins by digest, ``repo:tag`` does not."""
    if not reference:
        return None
    m = _DIGEST.search(reference.rsplit("@", 1)[-1])
    return m.group(1) if m else None


def pod_records(pod_list: dict[str, Any]) -> list[dict[str, Any]]:
    """``[{pod, node, phase, image, image_id, digest}]`` of the Ray containers of a Kubernetes PodList; pods being
    deleted (``metadata.deletionTimestamp``: the old pods of a Recreate upgrade, still ``Running`` while they stop)
    are left out."""
    out = []
    for pod in pod_list.get("items") or []:
        meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        if meta.get("deletionTimestamp"):
            continue
        for cs in status.get("containerStatuses") or []:
            if cs.get("name") not in RAY_CONTAINERS:
                continue
            out.append({"pod": meta.get("name"), "node": spec.get("nodeName"), "phase": status.get("phase"),
                        "image": cs.get("image"), "image_id": cs.get("imageID") or None,
                        "digest": digest_of(cs.get("imageID"))})
    return sorted(out, key=lambda r: r["pod"] or "")


def fleet(records: list[dict[str, Any]], expect_pods: int | None = None) -> dict[str, Any]:
    """The verdict over ``records`` (:func:`pod_records`): one digest, a mixed fleet, or undetermined."""
    by_digest: dict[str, list[str]] = {}
    unknown = [r["pod"] for r in records if not r.get("digest")]
    for r in records:
        if r.get("digest"):
            by_digest.setdefault(r["digest"], []).append(r["pod"])
    out: dict[str, Any] = {"pods": records, "digests": by_digest}
    if len(by_digest) > 1:
        parts = "; ".join(f"{', '.join(pods)} run {d}" for d, pods in sorted(by_digest.items(), key=lambda kv: -len(kv[1])))
        out.update(verdict="mixed", failure={"stage": "image-fleet", "reason": f"the Ray pods run {len(by_digest)} "
                   f"different images: {parts}. Pin dlcImage by digest (repo@sha256:...) and let the nodes pull it"})
    elif unknown or not records or (expect_pods is not None and len(records) < expect_pods):
        why = (f"no digest reported for {', '.join(unknown)}" if unknown else
               f"{len(records)} Ray pod(s) running, {expect_pods} expected")
        out.update(verdict="undetermined", failure={"stage": "image-fleet", "reason": why})
    else:
        (digest,) = by_digest
        out.update(verdict="ok", digest=digest)
    return out


API_TIMEOUT_S = 30.0
"""One list of the pods may take at most this long (and never past ``--wait-s``): a socket timeout per connect,
send and receive."""


def list_pods(namespace: str, cluster: str, sa_dir: str | None = None, api: str | None = None,
              opener: Callable[..., Any] | None = None, timeout_s: float = API_TIMEOUT_S) -> dict[str, Any]:
    """GET the RayCluster's pods with the pod's own ServiceAccount token (in-cluster config: :data:`SA_DIR`,
    :data:`API`)."""
    sa_dir, api = sa_dir or SA_DIR, api or API
    token = open(os.path.join(sa_dir, "token")).read().strip()
    selector = urllib.parse.quote(f"{RAY_CLUSTER_LABEL}={cluster}", safe="")
    req = urllib.request.Request(f"{api}/api/v1/namespaces/{namespace}/pods?labelSelector={selector}",
                                 headers={"Authorization": f"Bearer {token}", "Accept": "application/json"})
    ctx = ssl.create_default_context(cafile=os.path.join(sa_dir, "ca.crt"))
    with (opener or urllib.request.urlopen)(req, timeout=timeout_s, context=ctx) as resp:
        return json.loads(resp.read())


def usage_problem(args: Any) -> str | None:
    """The first value that cannot make an audit, as ``--flag VALUE: why``: a negative or nan wait would reach
    ``time.sleep`` (a ValueError) or a deadline that never passes."""
    if args.expect_pods < 1:
        return f"--expect-pods {args.expect_pods}: must be >= 1 (the head counts), e.g. 3"
    for flag, value in (("--wait-s", args.wait_s), ("--poll-s", args.poll_s)):
        if not (math.isfinite(value) and value >= 0):
            return f"{flag} {value}: must be a finite number of seconds >= 0, e.g. 10"
    return None


def _undetermined(reason: str) -> dict[str, Any]:
    """A verdict the pods could not give: why, under the stage the gate reports."""
    return {"verdict": "undetermined", "failure": {"stage": "image-fleet", "reason": reason}}


def main(argv: list[str] | None = None, prog: str | None = None,
         list_fn: Callable[[str, str], dict[str, Any]] | None = None,
         sleep: Callable[[float], None] = time.sleep) -> int:
    ap = ArgumentParser(prog=prog or "python -m efacheck.image_fleet", description=__doc__.split("\n\n")[0],
                        exit_codes="image-fleet")
    ap.add_argument("--namespace", required=True, help="the RayCluster's namespace (the audit's Role is there)")
    ap.add_argument("--cluster", required=True, help="the RayCluster's name (its pods' ray.io/cluster label)")
    ap.add_argument("--expect-pods", type=int, required=True, help="head + workers the stack declares")
    ap.add_argument("--wait-s", type=float, default=1800, help="how long to wait for every Ray pod to run")
    ap.add_argument("--poll-s", type=float, default=10, help="seconds between two lists of the pods (default 10)")
    ap.add_argument("--out", help="also write the JSON line to this file (the gate's container reads the digest)")
    args = ap.parse_args(argv)
    problem = usage_problem(args)
    if problem:
        ap.error(problem)
    end = time.monotonic() + args.wait_s
    if list_fn is None:
        def list_fn(namespace: str, cluster: str) -> dict[str, Any]:
            return list_pods(namespace, cluster, timeout_s=max(1.0, min(API_TIMEOUT_S, end - time.monotonic())))
    while True:
        try:
            records = [r for r in pod_records(list_fn(args.namespace, args.cluster)) if r["phase"] == "Running"]
            result = fleet(records, args.expect_pods)
        except FileNotFoundError as e:  # no token or CA: not in the audit pod, and waiting cannot bring one
            result = _undetermined(f"not inside a pod with a ServiceAccount token: {e}")
            break
        except (OSError, ValueError) as e:  # API unreachable, refused (401/403), not JSON
            result = _undetermined(f"cannot list the Ray pods: {e}")
        if result["verdict"] != "undetermined" or time.monotonic() >= end:
            break
        sleep(args.poll_s)
    text = json.dumps({"image_fleet": result}, sort_keys=True)
    print(text, flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return EXIT[result["verdict"]]


if __name__ == "__main__":
    sys.exit(run_cli(main, None, "python -m efacheck.image_fleet"))
