"""Can this run write its checkpoints? Asked of the storage itself, before Ray starts.

The form of a storage path is checked with the other arguments (``storage_problem`` in ``training/request.py``).
That cannot see a bucket that does not exist, a role that may not write the prefix, or an S3 endpoint that does not
answer: Ray Train meets those at the first checkpoint, after the cluster started and the model trained for
``--checkpoint-every`` steps. :func:`check` meets them first, in bounded time.

S3 (``s3://bucket[/prefix]``): HeadBucket, then PutObject and DeleteObject of one empty object,
``<prefix>/.ray-efa-eks-write-check``. These are the only calls made, and the pods' role grants each of them
(components/cluster/pod_identity.py ``bucket_prefix_policy``): HeadBucket is authorized as ``s3:ListBucket`` without an
``s3:prefix`` key, which ``StringLikeIfExists`` admits, and the object is under ``<prefix>/*``
(https://docs.aws.amazon.com/AmazonS3/latest/API/API_HeadBucket.html, "Permissions"). The put also proves the
bucket's KMS key (SSE-KMS needs ``kms:GenerateDataKey``, which the role has through S3). The key is fixed, so
repeated checks leave at most one delete marker. On the versioned checkpoint bucket the empty, noncurrent
version expires with the bucket's lifecycle rule. The client is boto3 with the process's own credential chain,
region and ``AWS_ENDPOINT_URL_S3``: those are what pyarrow (Ray Train's S3 layer) uses in the same process.

A local directory is created (``mkdir -p``), and one file is written in it and removed. Ray Train creates the
directory at its first write anyway, so creating it sooner changes nothing a run would not. Only a real write
proves the directory is writable: ``os.access`` ignores ACLs, quotas, a full disk and root squashing on NFS.

Exit codes: :data:`EXIT_STORAGE` (73, sysexits EX_CANTCREAT) when the storage answered no (no such bucket, access
denied, a KMS refusal, no credentials, a directory that cannot be created or written), and
:data:`EXIT_NO_ANSWER` (2, train's "no answer") when S3 did not answer within :data:`TIMEOUT_S`. Retrying
the first will not help; retrying the second may.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Callable, Mapping, Optional
from urllib.parse import parse_qs

from ..efacheck.exit_codes import EXIT_NO_ANSWER, EXIT_STORAGE

PROBE_NAME = ".ray-efa-eks-write-check"
"""The object (or file) written and removed under the storage path."""
TIMEOUT_S = 20.0
"""Upper bound for the whole S3 check: credential lookup, HeadBucket, PutObject and DeleteObject."""
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 8.0
ATTEMPTS = 2
"""botocore ``total_max_attempts`` per call: one retry for a dropped connection, not botocore's default of 3-5."""


class StorageError(Exception):
    """The storage cannot take this run's checkpoints: ``code`` is the exit code, the text says why and what to do."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def check(
    value: str, option: str, environ: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None
) -> None:
    """Raise :class:`StorageError` unless this process can write under the storage path ``value``.

    ``option`` names where the value came from (``--storage-path`` or ``$RAY_EFA_EKS_STORAGE_PATH``), for the
    message. S3 paths are checked with boto3 in at most ``timeout`` seconds (default :data:`TIMEOUT_S`); anything
    else is a local directory. ``environ`` gives the region for the client and the messages; boto3 reads its
    credentials and endpoint from the process environment, as pyarrow does.
    """
    if value.startswith("s3://"):
        _check_s3(value, option, os.environ if environ is None else environ, TIMEOUT_S if timeout is None else timeout)
    else:
        _check_directory(value, option)


def _check_directory(value: str, option: str) -> None:
    path = Path(value).expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (OSError, ValueError) as e:  # ValueError: a name the filesystem encoding cannot hold
        raise StorageError(
            EXIT_STORAGE,
            f"{option} {value}: cannot create the directory: "
            f"{getattr(e, 'strerror', None) or e}; name a "
            "directory this user can create and write, or s3://bucket/prefix",
        ) from None
    probe = path / f"{PROBE_NAME}-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except (OSError, ValueError) as e:
        raise StorageError(
            EXIT_STORAGE,
            f"{option} {value}: this user cannot write there: "
            f"{getattr(e, 'strerror', None) or e}; name "
            "a directory this user can write, or s3://bucket/prefix",
        ) from None


def split_s3(value: str) -> tuple[str, str, dict[str, str]]:
    """``s3://bucket/prefix?opt=v`` -> (bucket, prefix without slashes at its ends, query options).

    The query is pyarrow's (``FileSystem.from_uri``: ``endpoint_override``, ``region``, ``scheme``), which Ray Train
    accepts in a storage path; the check honours the same three.
    """
    rest = value[len("s3://") :]
    rest, _, query = rest.partition("?")
    bucket, _, prefix = rest.partition("/")
    opts = {k: v[-1] for k, v in parse_qs(query).items()}
    return bucket, prefix.strip("/"), opts


def _check_s3(value: str, option: str, environ: Mapping[str, str], timeout: float) -> None:
    try:
        import boto3  # noqa: F401 - only to know whether the check can run
    except ImportError:  # an image without boto3: pyarrow still works; say what was not checked
        import sys

        print(
            f"[train] warning: boto3 is not installed: {option} {value} is not checked before Ray starts "
            "(the first checkpoint will tell)",
            file=sys.stderr,
            flush=True,
        )
        return
    outcome: list[BaseException | None] = []
    worker = threading.Thread(
        target=_run_into, args=(outcome, lambda: _s3_calls(value, environ)), name="storage-check", daemon=True
    )
    worker.start()
    worker.join(timeout)
    if not outcome:  # the thread is a daemon: it cannot keep the process alive after the exit below
        raise StorageError(
            EXIT_NO_ANSWER,
            f"{option} {value}: S3 did not answer within {timeout:g} s (endpoint "
            f"{_endpoint_words(value, environ)}); check the network route to S3 "
            "(VPC endpoint, NAT, proxy) and AWS_ENDPOINT_URL_S3, then retry",
        )
    err = outcome[0]
    if err is not None:
        raise StorageError(*explain_s3_error(err, value, option, environ)) from None


def _run_into(outcome: list, fn: Callable[[], None]) -> None:
    try:
        fn()
    except BaseException as e:  # noqa: BLE001 - handed to the caller's thread, which explains it
        outcome.append(e)
    else:
        outcome.append(None)


def s3_session_and_client(value: str, environ: Mapping[str, str]):
    import boto3
    from botocore.config import Config

    _, _, opts = split_s3(value)
    region = opts.get("region") or environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION") or None
    endpoint = opts.get("endpoint_override")
    if endpoint and "://" not in endpoint:
        endpoint = f"{opts.get('scheme', 'https')}://{endpoint}"
    session = boto3.session.Session(region_name=region)
    config = Config(
        connect_timeout=CONNECT_TIMEOUT_S,
        read_timeout=READ_TIMEOUT_S,
        retries={"total_max_attempts": ATTEMPTS, "mode": "standard"},
    )
    return session, session.client("s3", endpoint_url=endpoint or None, config=config)


def _s3_calls(value: str, environ: Mapping[str, str]) -> None:
    bucket, prefix, _ = split_s3(value)
    _, s3 = s3_session_and_client(value, environ)
    key = f"{prefix}/{PROBE_NAME}" if prefix else PROBE_NAME
    s3.head_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key=key, Body=b"")
    s3.delete_object(Bucket=bucket, Key=key)


def _endpoint_words(value: str, environ: Mapping[str, str]) -> str:
    _, _, opts = split_s3(value)
    return (
        opts.get("endpoint_override")
        or environ.get("AWS_ENDPOINT_URL_S3")
        or environ.get("AWS_ENDPOINT_URL")
        or "S3's regional endpoint"
    )


def explain_s3_error(err: BaseException, value: str, option: str, environ: Mapping[str, str]) -> tuple[int, str]:
    """(exit code, one line) for an error of the S3 calls."""
    from botocore import exceptions as bx

    bucket, prefix, _ = split_s3(value)
    where = f"{option} {value}"
    if isinstance(err, (bx.NoCredentialsError, bx.PartialCredentialsError, bx.CredentialRetrievalError)):
        return EXIT_STORAGE, (
            f"{where}: no usable AWS credentials ({err}); in a Ray pod they come from EKS Pod "
            "Identity (the ray-train service account), elsewhere from AWS_PROFILE or the "
            "environment"
        )
    if isinstance(
        err, (bx.ConnectTimeoutError, bx.ReadTimeoutError, bx.EndpointConnectionError, bx.ConnectionClosedError)
    ):
        return EXIT_NO_ANSWER, (
            f"{where}: S3 did not answer ({type(err).__name__}: {err}); check the network route "
            "to S3 (VPC endpoint, NAT, proxy) and AWS_ENDPOINT_URL_S3, then retry"
        )
    if isinstance(err, bx.ClientError):
        error = err.response.get("Error", {})
        code = str(error.get("Code", ""))
        status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        op = err.operation_name
        said = f"{op}: {code or status}{': ' + error['Message'] if error.get('Message') else ''}"
        if (status or 0) >= 500 or code in ("SlowDown", "ServiceUnavailable", "InternalError"):
            return EXIT_NO_ANSWER, f"{where}: S3 answered {said}; retry later"
        if code in ("NoSuchBucket", "404") or (op == "HeadBucket" and status == 404):
            return EXIT_STORAGE, (
                f"{where}: bucket {bucket!r} does not exist ({said}); the stack's bucket is "
                "`pulumi stack output checkpointStorageUri`"
            )
        if code.startswith("KMS") or "kms" in str(error.get("Message", "")).lower():
            return EXIT_STORAGE, (
                f"{where}: the bucket's KMS key refused ({said}); the role needs kms:GenerateDataKey "
                "and kms:Decrypt on it via S3"
            )
        if (
            code
            in (
                "AccessDenied",
                "403",
                "AllAccessDisabled",
                "InvalidAccessKeyId",
                "SignatureDoesNotMatch",
                "ExpiredToken",
            )
            or status == 403
        ):
            target = f"s3://{bucket}/{prefix + '/' if prefix else ''}*"
            creds = _credential_source(value, environ)
            return EXIT_STORAGE, (
                f"{where}: access denied ({said}; credentials: {creds}): they may not write "
                f"{target}; the pods' role may write only under checkpointPrefix "
                "(`pulumi stack output checkpointStorageUri`)"
            )
        if code in ("PermanentRedirect", "301", "AuthorizationHeaderMalformed") or status == 301:
            return EXIT_STORAGE, (
                f"{where}: bucket {bucket!r} is in another region than "
                f"{environ.get('AWS_REGION') or environ.get('AWS_DEFAULT_REGION') or 'the default'}"
                f" ({said}); set AWS_REGION to the bucket's region"
            )
        return EXIT_STORAGE, f"{where}: S3 refused {said} (credentials: {_credential_source(value, environ)})"
    if isinstance(err, bx.BotoCoreError):
        return EXIT_STORAGE, f"{where}: {type(err).__name__}: {err}"
    raise err  # a bug, not an answer from S3: run_cli reports it with its trace file


def _credential_source(value: str, environ: Mapping[str, str]) -> str:
    """Where the credentials came from, in botocore's words (env, container-role, iam-role, ...), for a message."""
    try:
        session, _ = s3_session_and_client(value, environ)
        found = session.get_credentials()
        return getattr(found, "method", None) or "none found"
    except Exception:  # noqa: BLE001 - only for the message
        return "unknown"
