"""The storage proof: can a GPU worker pod write, list, read back and delete a checkpoint object?

Checkpoints depend on a chain nothing else in the gate exercises: the Pod Identity association and the role's trust
conditions, the role's and the bucket's policies, the bucket's KMS key, and the AWS SDK inside pyarrow (Ray Train's
S3 layer; apache/arrow#45603: the AWS SDK bundled with older pyarrow cannot use EKS Pod Identity credentials).
Without this proof they are first met by a training run, hours after ``pulumi up`` said everything was fine.

:func:`prove` runs in a GPU worker pod (an ``efa_check`` rank) and goes through the filesystem layer Ray Train uses:
``ray.train.v2._internal.execution.storage.get_fs_and_path`` where Ray is installed, which is
``pyarrow.fs.FileSystem.from_uri`` on the storage path (ray/train/v2/_internal/execution/storage.py). Steps:

1. ``credentials``: where the pod's AWS credentials come from. With EKS Pod Identity the webhook sets
   ``AWS_CONTAINER_CREDENTIALS_FULL_URI`` and ``AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE``
   (docs.aws.amazon.com/eks/latest/userguide/pod-id-how-it-works.html); the agent is asked once, as the SDK does
   (``Authorization: <token>``), and only its status is kept, never the credentials.
2. ``resolve``: the filesystem and path of ``$RAY_EFA_EKS_STORAGE_PATH`` (the checkpoint prefix).
3. ``write`` a small object under ``<prefix>/.efa-check/``, ``list`` that directory and find it, ``read`` it back
   byte for byte, ``delete`` it and see it gone.

The result is JSON-safe: ``ok``, ``storage_path``, ``object``, ``steps`` [{step, ok, ms}], and on failure ``step``,
``error`` (the AWS error as pyarrow raised it) and ``causes`` (likely causes, most likely first, each a key of
:data:`CAUSES`). No third-party import at module level: the gate ships this file alone with its siblings.
"""

from __future__ import annotations

import os
import socket
import time
import urllib.error
import urllib.request
import uuid
from typing import Any, Callable

STORAGE_PATH_ENV = "RAY_EFA_EKS_STORAGE_PATH"
"""Set on every Ray pod to the checkpoint prefix (components/ray/raycluster.py STORAGE_PATH_ENV)."""
PROOF_DIR = ".efa-check"
"""The proof's objects live here, under the checkpoint prefix the pods' role may use."""
PAYLOAD_BYTES = 4096

CAUSES: dict[str, str] = {
    "no_storage_path": (
        f"${STORAGE_PATH_ENV} is not set in the GPU worker pod: the stack sets it when checkpointBucket is true; "
        "pass --storage-path to training otherwise"
    ),
    "credential_chain": (
        "no usable AWS credentials in the pod: Pod Identity injects AWS_CONTAINER_CREDENTIALS_FULL_URI and "
        "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE only into pods of the associated service account (ray/ray-train) "
        "started after the association and the eks-pod-identity-agent add-on existed (restart the pods); and the AWS "
        "SDK inside pyarrow must support Pod Identity (apache/arrow#45603: older pyarrow cannot; see the probe's "
        "pyarrow row)"
    ),
    "trust_policy": (
        "the EKS Pod Identity agent refused credentials: the role's trust policy must allow pods.eks.amazonaws.com "
        "sts:AssumeRole and sts:TagSession, conditioned only on what Pod Identity sends, as the stack builds it: "
        "aws:SourceAccount of this account and the session tags aws:RequestTag/eks-cluster-arn, "
        "aws:RequestTag/kubernetes-namespace and aws:RequestTag/kubernetes-service-account of this cluster, "
        "namespace and service account (a required key the request lacks denies every AssumeRole); and the "
        "association must name this namespace, service account and role (aws eks list-pod-identity-associations)"
    ),
    "bucket_policy": (
        "S3 refused the request with valid credentials: the role's policy covers only s3://<bucket>/<prefix>/* (is "
        "the storage path under checkpointPrefix?), and the bucket policy denies requests without TLS or from other "
        "principals (aws s3api get-bucket-policy)"
    ),
    "kms": (
        "the bucket's KMS key refused: the role needs kms:GenerateDataKey and kms:Decrypt on the checkpoint key via "
        "S3 (kms:ViaService s3.<region>.amazonaws.com), and the key policy must not deny it"
    ),
    "no_bucket": "the bucket does not exist or is in another region: check checkpointStorageUri and AWS_REGION",
    "network": (
        "S3 could not be reached: check the S3 gateway endpoint / NAT route from the private subnets, DNS, and "
        "the AWS_ENDPOINT_URL_S3 / region the pod uses"
    ),
    "wrong_data": "the object read back differs from what was written: check the bucket's object lock / replication settings",
    "unknown": "see the AWS error: it names the refused operation",
}
"""Likely cause -> what to check; docs/efa-gate.md ("Storage proof") mirrors it."""


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 1)


def credential_source(
    env: dict[str, str], timeout_s: float = 5.0, fetch: Callable[[str, str, float], tuple[int, str]] | None = None
) -> dict[str, Any]:
    """Where the pod's AWS credentials come from, and for Pod Identity whether the agent hands them out.

    Returns ``source`` (pod_identity | web_identity | static | none), ``ok`` (None when not checked) and, for a
    refused fetch, ``status`` and ``error`` (the agent's message; never the credentials themselves).
    """
    uri = env.get("AWS_CONTAINER_CREDENTIALS_FULL_URI")
    if uri:
        token_file = env.get("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "")
        try:
            with open(token_file, encoding="utf-8") as f:
                token = f.read().strip()
        except OSError as e:
            return {
                "source": "pod_identity",
                "ok": False,
                "status": None,
                "error": f"token file {token_file!r}: {e.strerror or e}",
            }
        status, body = (fetch or _fetch)(uri, token, timeout_s)
        ok = status == 200 and '"AccessKeyId"' in body
        out: dict[str, Any] = {"source": "pod_identity", "ok": ok, "status": status}
        if not ok:
            out["error"] = body[:500]
        return out
    if env.get("AWS_WEB_IDENTITY_TOKEN_FILE") and env.get("AWS_ROLE_ARN"):
        return {"source": "web_identity", "ok": None}
    if env.get("AWS_ACCESS_KEY_ID"):
        return {"source": "static", "ok": None}
    return {"source": "none", "ok": None}


def _fetch(uri: str, token: str, timeout_s: float) -> tuple[int, str]:
    """GET the container-credentials endpoint as the AWS SDKs do: (HTTP status or 0, body or error text)."""
    try:
        req = urllib.request.Request(uri, headers={"Authorization": token})  # a malformed URI raises ValueError here
        with urllib.request.urlopen(req, timeout=timeout_s) as r:  # noqa: S310 - the pod's own agent
            return r.status, r.read(65536).decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read(4096).decode("utf-8", "replace") or str(e)
    except (OSError, ValueError) as e:
        return 0, f"{type(e).__name__}: {getattr(e, 'reason', None) or e}"


def likely_causes(error: str, creds: dict[str, Any] | None = None) -> list[str]:
    """Keys of :data:`CAUSES`, most likely first, from the AWS error text and the credential source."""
    low = error.lower()
    creds = creds or {}
    out: list[str] = []
    if creds.get("source") == "pod_identity" and creds.get("ok") is False:
        # the agent answered and refused: its trust policy; it was never asked (no token) or did not answer: the chain
        out.append("trust_policy" if creds.get("status") else "credential_chain")
    if "kms" in low:
        out.append("kms")
    if (
        "nosuchbucket" in low
        or "no_such_bucket" in low
        or "bucket does not exist" in low
        or "permanentredirect" in low
        or "http status 301" in low
    ):
        out.append("no_bucket")
    if any(
        s in low
        for s in (
            "curlcode",
            "couldn't resolve",
            "could not resolve",
            "connection refused",
            "timed out",
            "network_connection",
            "unable to connect",
            "connect timeout",
        )
    ):
        out.append("network")
    if (
        any(
            s in low
            for s in (
                "invalidaccesskeyid",
                "expiredtoken",
                "invalidtoken",
                "signaturedoesnotmatch",
                "credentials",
                "no response body",
                "invalid_access_key_id",
            )
        )
        or creds.get("source") == "none"
    ):
        out.append("credential_chain")
    if any(s in low for s in ("access_denied", "accessdenied", "access denied", "http status 403", "forbidden")):
        out += ["bucket_policy", "credential_chain"]
    if not out:
        out.append("unknown")
    return list(dict.fromkeys(out))


def _filesystem(storage_path: str):
    """(filesystem, path) as Ray Train resolves ``storage_path``."""
    try:
        from ray.train.v2._internal.execution.storage import get_fs_and_path
    except ImportError:  # Ray without Train v2: the same call underneath
        import pyarrow.fs

        return pyarrow.fs.FileSystem.from_uri(storage_path)
    return get_fs_and_path(storage_path)


def prove(
    storage_path: str | None = None,
    env: dict[str, str] | None = None,
    fetch: Callable[[str, str, float], tuple[int, str]] | None = None,
) -> dict[str, Any]:
    """Write, list, read back and delete one small object under the checkpoint prefix (see the module docstring).

    storage_path: the checkpoint prefix (default ``$RAY_EFA_EKS_STORAGE_PATH``); env: the process environment
    (default ``os.environ``); fetch: the credential-endpoint GET (tests).
    """
    env = dict(os.environ if env is None else env)
    storage_path = storage_path or env.get(STORAGE_PATH_ENV)
    host = socket.gethostname()
    result: dict[str, Any] = {
        "ok": False,
        "host": host,
        "storage_path": storage_path,
        "object": None,
        "steps": [],
        "step": None,
        "error": None,
        "causes": [],
    }

    def fail(step: str, error: str, causes: list[str]) -> dict[str, Any]:
        result.update(step=step, error=error, causes=causes, hints=[CAUSES[c] for c in causes])
        result["steps"].append({"step": step, "ok": False})
        return result

    if not storage_path:
        return fail("resolve", f"${STORAGE_PATH_ENV} is not set", ["no_storage_path"])
    t0 = time.perf_counter()
    creds = credential_source(env, fetch=fetch)
    result["credentials"] = creds
    if creds.get("ok") is False:
        status = creds.get("status")
        said = (
            "EKS Pod Identity token file not readable"
            if status is None
            else "EKS Pod Identity agent unreachable"
            if status == 0
            else f"EKS Pod Identity agent: HTTP {status}"
        )
        return fail("credentials", f"{said}: {creds.get('error')}", likely_causes(str(creds.get("error")), creds))
    result["steps"].append({"step": "credentials", "ok": True, "ms": _ms(t0), "source": creds["source"]})
    step = "resolve"
    try:
        import pyarrow.fs

        t0 = time.perf_counter()
        fs, base = _filesystem(storage_path)
        result["filesystem"] = fs.type_name
        result["steps"].append({"step": step, "ok": True, "ms": _ms(t0)})
        folder = f"{base.rstrip('/')}/{PROOF_DIR}"
        obj = f"{folder}/{host}-{uuid.uuid4().hex[:12]}.bin"
        result["object"] = obj
        payload = f"ray-efa-eks storage proof from {host}\n".encode() + os.urandom(PAYLOAD_BYTES)

        step, t0 = "write", time.perf_counter()
        if fs.type_name == "local":  # a shared-filesystem path needs its folder (S3 keys don't), as Ray Train makes it
            fs.create_dir(folder, recursive=True)
        with fs.open_output_stream(obj) as f:
            f.write(payload)
        result["steps"].append({"step": step, "ok": True, "ms": _ms(t0), "bytes": len(payload)})

        step, t0 = "list", time.perf_counter()
        listed = [i.path for i in fs.get_file_info(pyarrow.fs.FileSelector(folder, allow_not_found=True))]
        if obj not in listed:
            return fail(step, f"{obj} is missing from the listing of {folder} ({len(listed)} entries)", ["unknown"])
        result["steps"].append({"step": step, "ok": True, "ms": _ms(t0)})

        step, t0 = "read", time.perf_counter()
        with fs.open_input_stream(obj) as f:
            back = f.read()
        if back != payload:
            return fail(
                step, f"read back {len(back)} bytes that differ from the {len(payload)} written", ["wrong_data"]
            )
        result["steps"].append({"step": step, "ok": True, "ms": _ms(t0)})

        step, t0 = "delete", time.perf_counter()
        fs.delete_file(obj)
        if fs.get_file_info(obj).type != pyarrow.fs.FileType.NotFound:
            return fail(step, f"{obj} still exists after delete_file", ["unknown"])
        result["steps"].append({"step": step, "ok": True, "ms": _ms(t0)})
    except ImportError as e:
        return fail(
            step, f"ImportError: {e} (pyarrow is Ray Train's storage layer; the image must have it)", ["unknown"]
        )
    except Exception as e:  # noqa: BLE001 - pyarrow raises OSError with the AWS error; others are reported as-is
        msg = f"{type(e).__name__}: {e}".strip()[:2000]
        return fail(step, msg, likely_causes(msg, creds))
    result["ok"] = True
    return result


def summary(r: dict[str, Any]) -> str:
    """One line for a reason: what worked, or which step failed with the AWS error and the likely cause."""
    if r.get("ok"):
        return (
            f"storage proof: wrote, listed, read back and deleted {r['object']} on {r.get('filesystem')} from "
            f"{r.get('host')} (credentials: {(r.get('credentials') or {}).get('source')})"
        )
    causes = r.get("causes") or ["unknown"]
    return (
        f"storage proof failed at {r.get('step')} from {r.get('host')} under {r.get('storage_path')}: "
        f"{r.get('error')}; likely cause: {causes[0]} ({CAUSES[causes[0]]})"
        + (f"; else: {', '.join(causes[1:])}" if len(causes) > 1 else "")
    )
