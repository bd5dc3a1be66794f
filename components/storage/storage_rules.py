"""Checkpoint storage settings that the stack config and the storage components both check, defined once.

``config.py`` validates them before anything is registered; ``CheckpointBucket`` and ``PodStorageAccess`` check
them again for callers that build their args directly. Neither side imports the other.
"""

from __future__ import annotations

from ..config.values import S3KeyPrefix, ValueProblem

ENCRYPTIONS = ("kms", "s3")
"""Checkpoint bucket encryption: SSE-KMS with its own key, or SSE-S3."""


def check_prefix(prefix: str) -> str:
    """A key prefix without leading/trailing slashes (``ray-train``, ``team/a``), by :class:`values.S3KeyPrefix`:
    no IAM wildcard (``*``, ``?``, ``${``) and no ``.``/``..`` segment, since it lands in the pods' IAM policy."""
    try:
        return S3KeyPrefix().parse(prefix)
    except ValueProblem as p:
        raise ValueError(f"prefix {prefix!r}: {p.fix}") from None
