"""What really runs: the image and RayCluster spec hash each Ray pod was created with, against what the
gate Job was rendered for; a pod that differs ends the check (stage ``stale``) instead of being vouched for."""

from __future__ import annotations

import os

from .failures import CheckFailed

IMAGE_ENV = "RAY_EFA_EKS_IMAGE"
SPEC_HASH_ENV = "RAY_EFA_EKS_SPEC_HASH"
"""Set by the stack on every Ray container (components/ray/raycluster.py): its image and the RayCluster spec hash."""


def pod_stack(env: dict[str, str] | None = None) -> dict[str, str | None]:
    """The image and RayCluster spec hash this process's pod was created with (its env; None when unset)."""
    env = os.environ if env is None else env
    return {"image": env.get(IMAGE_ENV), "spec_hash": env.get(SPEC_HASH_ENV)}


def stale_pods(seen: list[dict], expect: dict[str, str | None]) -> list[str]:
    """One line per pod (``host``/``ip``/``role``) whose ``image``/``spec_hash`` differ from ``expect`` (None = not
    checked); a pod without the variables was created before the stack set them, so it is stale too."""
    out: list[str] = []
    for p in seen:
        diffs = [
            f"{key} {p.get(key) or '(unset)'} (expected {want})"
            for key, want in expect.items()
            if want is not None and p.get(key) != want
        ]
        line = f"{p.get('role', 'worker')} pod {p.get('host')} on node {p.get('ip')}: " + ", ".join(diffs)
        if diffs and line not in out:
            out.append(line)
    return out


def check_stale(seen: list[dict], expect: dict[str, str | None], backend: str | None = None) -> None:
    """Raise CheckFailed('stale') naming every pod that runs another image or spec than the gate was rendered for."""
    bad = stale_pods(seen, expect)
    if bad:
        raise CheckFailed(
            "stale", f"{len(bad)} Ray pod(s) run another spec than this gate checks: " + "; ".join(bad), backend=backend
        )
