"""Which image digest every Ray pod really runs, and whether the fleet agrees.

A tag can move between two pulls: a node that joins later (a scale-up, a replaced node) may run another build of
``ray:train-ml-cuda-v1.1`` than the one the gate checked. The digest a container really runs is known only to the
kubelet, which reports it in the pod's ``status.containerStatuses[].imageID`` (Kubernetes API reference, Pod
v1 ``ContainerStatus.imageID``: "the image ID of the container's image ... may not match the image used in the
PodSpec, as it may have been resolved by the runtime"). Nothing inside the container can read it: the Downward API
exposes no container status, Ray's node labels carry no image, and the image cannot contain its own digest.

So the stack reads it where it lives, with the least privilege that can: the audit runs in the gate Job's pod
(components/addons/efa_check.py) as its own ServiceAccount, allowed only ``get``/``list`` of pods in the Ray namespace, as a
non-root user, and :func:`fleet` fails stage ``image-fleet`` when the pods do not all run one digest, naming the
pods and digests. The gate's own container still has no API token. When ``dlcImage`` is pinned by digest the
kubelet pulls exactly that digest and containerd verifies it, so the fleet cannot be mixed; the audit then confirms
what the reference already says.

Two modes. Once (``--expect-pods N``): wait up to ``--wait-s`` for N running Ray pods, print one JSON line, exit 0
(one digest), 1 (mixed fleet), 2 (undetermined: pods missing or unreadable). Watch (``--watch``, the gate pod's
native sidecar): with scale-from-zero no GPU worker pod exists until the gate's own check asks Ray for nodes, so the
audit cannot come first; it runs beside the check instead, lists the pods every ``--poll-s`` until it is stopped
(SIGTERM, when the gate's container has exited), and rewrites ``--out`` after each pass with the verdict over every
Ray pod it has seen running (``"at"``: when the pass listed them); the gate's script reads a pass taken after its
check ended. A bad option is a usage error (64), never read as a verdict (``image-fleet`` in
efacheck/exit_codes.py).
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import ssl
import sys
import time
import urllib.parse
import urllib.request
from typing import Any, Callable

from .cli import ArgumentParser, run_cli

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
API = "https://kubernetes.default.svc"
"""The API when the kubelet's service env is absent; with it, ``https://$KUBERNETES_SERVICE_HOST:$..._PORT``, as
client-go's in-cluster config (rest.InClusterConfig) builds it."""
RAY_CLUSTER_LABEL = "ray.io/cluster"
"""KubeRay's label on every pod of a RayCluster (ray-operator common/pod.go ``labelPod``)."""
RAY_CONTAINERS = ("ray-head", "ray-worker")
"""The Ray container of the head and worker pods (components/ray/raycluster.py)."""
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
            out.append(
                {
                    "pod": meta.get("name"),
                    "node": spec.get("nodeName"),
                    "phase": status.get("phase"),
                    "image": cs.get("image"),
                    "image_id": cs.get("imageID") or None,
                    "digest": digest_of(cs.get("imageID")),
                }
            )
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
        parts = "; ".join(
            f"{', '.join(pods)} run {d}" for d, pods in sorted(by_digest.items(), key=lambda kv: -len(kv[1]))
        )
        out.update(
            verdict="mixed",
            failure={
                "stage": "image-fleet",
                "reason": f"the Ray pods run {len(by_digest)} "
                f"different images: {parts}. Pin dlcImage by digest (repo@sha256:...) and let the nodes pull it",
            },
        )
    elif unknown or not records or (expect_pods is not None and len(records) < expect_pods):
        why = (
            f"no digest reported for {', '.join(unknown)}"
            if unknown
            else f"{len(records)} Ray pod(s) running, {expect_pods} expected"
        )
        out.update(verdict="undetermined", failure={"stage": "image-fleet", "reason": why})
    else:
        (digest,) = by_digest
        out.update(verdict="ok", digest=digest)
    return out


API_TIMEOUT_S = 30.0
"""One list of the pods may take at most this long (and never past ``--wait-s``): a socket timeout per connect,
send and receive."""


def in_cluster_api() -> str:
    """The API server's address as the kubelet tells every container (its service env), else :data:`API`."""
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    return f"https://{host}:{port}" if host else API


def list_pods(
    namespace: str,
    cluster: str,
    sa_dir: str | None = None,
    api: str | None = None,
    opener: Callable[..., Any] | None = None,
    timeout_s: float = API_TIMEOUT_S,
) -> dict[str, Any]:
    """GET the RayCluster's pods with the pod's own ServiceAccount token (in-cluster config: :data:`SA_DIR`,
    :func:`in_cluster_api`)."""
    sa_dir, api = sa_dir or SA_DIR, api or in_cluster_api()
    token = open(os.path.join(sa_dir, "token")).read().strip()
    selector = urllib.parse.quote(f"{RAY_CLUSTER_LABEL}={cluster}", safe="")
    req = urllib.request.Request(
        f"{api}/api/v1/namespaces/{namespace}/pods?labelSelector={selector}",
        headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
    )
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


def main(
    argv: list[str] | None = None,
    prog: str | None = None,
    list_fn: Callable[[str, str], dict[str, Any]] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    ap = ArgumentParser(
        prog=prog or "python -m ray_efa_eks.efacheck.image_fleet",
        description=__doc__.split("\n\n")[0],
        exit_codes="image-fleet",
    )
    ap.add_argument("--namespace", required=True, help="the RayCluster's namespace (the audit's Role is there)")
    ap.add_argument("--cluster", required=True, help="the RayCluster's name (its pods' ray.io/cluster label)")
    ap.add_argument("--expect-pods", type=int, required=True, help="head + workers the stack declares")
    ap.add_argument("--wait-s", type=float, default=1800, help="how long to wait for every Ray pod to run (once)")
    ap.add_argument(
        "--watch",
        action="store_true",
        help="keep auditing until stopped (SIGTERM), rewriting --out after each pass with the verdict "
        "over every Ray pod seen running (the gate pod's sidecar)",
    )
    ap.add_argument("--poll-s", type=float, default=10, help="seconds between two lists of the pods (default 10)")
    ap.add_argument("--out", help="also write the JSON line to this file (the gate's container reads the digest)")
    ap.add_argument("--token-dir", default=SA_DIR, help=f"where the projected token and ca.crt are (default {SA_DIR})")
    args = ap.parse_args(argv)
    problem = usage_problem(args)
    if problem:
        ap.error(problem)
    if args.watch:
        if not args.out:
            ap.error("--watch needs --out (where the gate's container reads the verdict)")
        return watch(args, list_fn or (lambda ns, cluster: list_pods(ns, cluster, sa_dir=args.token_dir)), sleep)
    end = time.monotonic() + args.wait_s
    if list_fn is None:

        def list_fn(namespace: str, cluster: str) -> dict[str, Any]:
            return list_pods(
                namespace,
                cluster,
                sa_dir=args.token_dir,
                timeout_s=max(1.0, min(API_TIMEOUT_S, end - time.monotonic())),
            )

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


def _write(path: str, text: str) -> None:
    """Replace ``path`` whole (a reader never sees half a verdict)."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text + "\n")
    os.replace(tmp, path)


class _Stopped(Exception):
    pass


def watch(
    args: Any, list_fn: Callable[[str, str], dict[str, Any]], sleep: Callable[[float], None], passes: int | None = None
) -> int:
    """The sidecar: every ``--poll-s`` list the Ray pods, remember every one seen running (a pod seen on two digests
    keeps both), and rewrite ``--out`` with :func:`fleet` over them; until SIGTERM (exit 0: a sidecar's exit is not
    the Job's verdict, the gate's script reads the file), or ``passes`` (tests)."""
    seen: dict[tuple[str, str | None], dict[str, Any]] = {}

    def stop(*_: Any) -> None:
        raise _Stopped()

    previous = signal.signal(signal.SIGTERM, stop)
    n = 0
    try:
        while passes is None or n < passes:
            at = time.time()
            try:
                for r in pod_records(list_fn(args.namespace, args.cluster)):
                    if r["phase"] == "Running":
                        seen[(r["pod"], r["digest"])] = r
                result = fleet(sorted(seen.values(), key=lambda r: r["pod"] or ""), args.expect_pods)
                if len(result["digests"]) == 1:  # the one digest seen so far (the check records it)
                    result["digest"] = next(iter(result["digests"]))
            except FileNotFoundError as e:
                result = _undetermined(f"not inside a pod with a ServiceAccount token: {e}")
            except (OSError, ValueError) as e:
                result = _undetermined(f"cannot list the Ray pods: {e}")
            n += 1
            text = json.dumps({"image_fleet": {**result, "at": at, "passes": n}}, sort_keys=True)
            _write(args.out, text)
            print(text, flush=True)
            sleep(args.poll_s)
    except _Stopped:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main, None, "python -m ray_efa_eks.efacheck.image_fleet"))
