"""Checkpoint storage settings that the stack config and the storage components both check, defined once.

``config.py`` validates them before anything is registered; ``CheckpointBucket`` and ``PodStorageAccess`` check
them again for callers that build their args directly. Neither side imports the other.
"""

from __future__ import annotations

import re

ENCRYPTIONS = ("kms", "s3")
"""Checkpoint bucket encryption: SSE-KMS with its own key, or SSE-S3."""

_PREFIX = re.compile(r"[A-Za-z0-9!_.*'()-]+(/[A-Za-z0-9!_.*'()-]+)*")


def check_prefix(prefix: str) -> str:
    """A key prefix without leading/trailing slashes (``ray-train``, ``team/a``)."""
    if not _PREFIX.fullmatch(prefix or ""):
        raise ValueError(f"prefix {prefix!r} must be non-empty S3-safe path segments without leading, trailing "
                         "or double slashes, e.g. 'ray-train'")
    return prefix
