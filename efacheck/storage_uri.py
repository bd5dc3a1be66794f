"""The form of a checkpoint storage path, one grammar for every place one enters: ``train``/``submit``
``--storage-path`` and ``$RAY_EFA_EKS_STORAGE_PATH`` (training/request.py), and the gate's ``efa-check
--storage-path`` (efacheck/check_args.py).

Only ``s3://bucket[/prefix]`` (what the stack's pods reach through Pod Identity) or a path: another scheme
(``gs://``, ``hdfs://``) makes pyarrow, Ray Train's storage layer, wait for that cloud's credentials, a hang
instead of an error. Whether the storage takes a write is asked of the storage itself (training/storage_check.py,
and the gate's storage proof). Standard library only: the gate ships efacheck alone.
"""

from __future__ import annotations

import re

S3_BUCKET = re.compile(r"(?=.{3,63}$)[a-z0-9][a-z0-9.-]*[a-z0-9]")
"""S3 general purpose bucket names: 3-63 lowercase letters, digits, '.' and '-', alphanumeric at both ends
(docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html)."""
FIX = "name a directory (created if missing) or s3://bucket/prefix"


def uri_problem(value: str, option: str) -> str | None:
    """Why ``value`` cannot name checkpoint storage (None when its form can); a path's directory is not looked at."""
    if "\x00" in value:
        return f"{option} {value!r}: contains a NUL byte; {FIX}"
    if "://" not in value:
        return None
    scheme, _, rest = value.partition("://")
    if scheme != "s3":
        return (
            f"{option} {value!r}: {scheme}:// storage is not supported here (the stack's pods reach S3 only, "
            f"and pyarrow would wait for {scheme} credentials); {FIX}"
        )
    bucket, _, prefix = rest.partition("/")
    if not S3_BUCKET.fullmatch(bucket) or ".." in bucket:
        return (
            f"{option} {value!r}: {bucket!r} is not an S3 bucket name (3-63 lowercase letters, digits, '.' "
            "and '-'; bucketnamingrules.html); e.g. s3://my-bucket/ray-train"
        )
    if any(seg in (".", "..") for seg in prefix.partition("?")[0].split("/")):
        return f"{option} {value!r}: '.' and '..' are not S3 key segments; {FIX}"
    return None
