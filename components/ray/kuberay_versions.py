"""Which KubeRay chart versions the stack can run, and where each version's CRDs are.

Read from the KubeRay repository (github.com/ray-project/kuberay), not assumed:

* ``spec.upgradeStrategy`` (the stack always sets it: Recreate) first appears in the RayCluster CRD of v1.6.0
  (helm-chart/kuberay-operator/crds/ray.io_rayclusters.yaml line 4555; v1.7.0 line 5316; absent in v1.5.2, whose CRD
  has ``authOptions`` at line 65). A CRD without the field prunes it (structural schemas drop unknown fields), so an
  older chart would run the cluster with no upgrade strategy: no pod is ever recreated and the gate fails ``stale``.
* The chart's ``crds/`` holds ray.io_rayclusters, ray.io_raycronjobs, ray.io_rayjobs and ray.io_rayservices from
  v1.6.0 to v1.7.0 (``git ls-tree`` of each tag); Helm v3 installs them once and never upgrades them ("Helm: Custom
  Resource Definitions": "There is no support at this time for upgrading or deleting CRDs using Helm"), so the stack
  applies them itself from the same tag (components/ray/kuberay.py).
* On an operator version change KubeRay v1.6.0 to v1.7.0 recreates nothing: ``shouldRecreatePodsForUpgrade``
  (ray-operator/controllers/ray/raycluster_controller.go, v1.7.0 lines 1482-1491) sees the head's
  ``ray.io/kuberay-version`` annotation differ from its own ``KUBERAY_VERSION``, rewrites that annotation and the
  ``ray.io/upgrade-strategy-recreate-hash`` to the hash of the *current* spec and returns false. A spec change applied
  with the chart bump is thereby recorded as already done, and the old pods stay (components/nodes/rollout_guards.py
  refuses that combination).
"""

from __future__ import annotations

import re

MIN_CHART = (1, 6, 0)
"""The first chart whose RayCluster CRD has ``spec.upgradeStrategy``."""
VERIFIED = ("1.6.0", "1.6.1", "1.6.2", "1.7.0")
"""Chart versions whose CRDs and controller were read for this module."""
CRD_FILES = ("ray.io_rayclusters.yaml", "ray.io_raycronjobs.yaml", "ray.io_rayjobs.yaml", "ray.io_rayservices.yaml")
CRD_URL = "https://raw.githubusercontent.com/ray-project/kuberay/v{version}/helm-chart/kuberay-operator/crds/{file}"
"""The chart's own ``crds/`` files at the tag the chart is built from (chart 1.7.0 = tag v1.7.0)."""
_SEMVER = re.compile(r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?")
"""An exact SemVer 2 version, pre-release allowed (KubeRay tags and publishes charts such as 1.4.0-rc.1, and the
CRDs are read from the tag of the same name); no range, no 'v' prefix, no build metadata."""


def chart_version(version: str) -> tuple[int, int, int] | None:
    """``1.7.0`` or ``1.8.0-rc.1`` -> (1, 7, 0) / (1, 8, 0); None for anything else (a range, a 'v' prefix)."""
    m = _SEMVER.fullmatch(str(version))
    return (int(m[1]), int(m[2]), int(m[3])) if m else None


def _is_prerelease(version: str) -> bool:
    m = _SEMVER.fullmatch(str(version))
    return bool(m and m[4])


def chart_version_problem(version: str) -> str | None:
    """Why ``kuberayChartVersion`` cannot run this stack, or None."""
    parsed = chart_version(version)
    if parsed is None:
        return (
            "must be an exact chart version MAJOR.MINOR.PATCH[-PRERELEASE] (e.g. 1.7.0): the CRDs are applied from the "
            "matching KubeRay tag, and a range or 'latest' would change them behind the stack's back"
        )
    if parsed < MIN_CHART or (parsed == MIN_CHART and _is_prerelease(version)):  # SemVer: 1.6.0-rc.1 < 1.6.0
        return (
            "is older than 1.6.0, whose RayCluster CRD is the first with spec.upgradeStrategy (the stack sets "
            "Recreate; an older CRD drops it and no pod would ever be recreated); use 1.6.0 or newer, e.g. 1.7.0"
        )
    return None


def unverified_note(version: str) -> str | None:
    """A warning for a chart version newer than those read here."""
    if version in VERIFIED or chart_version(version) is None:
        return None
    return (
        f"kuberayChartVersion {version} was not verified (verified: {', '.join(VERIFIED)}): its CRD files are "
        f"expected at {CRD_URL.format(version=version, file='<crd>')} and its controller is assumed to keep "
        "v1.7.0's upgrade behaviour; rehearse the bump on a test stack first"
    )


def crd_urls(version: str) -> list[str]:
    """The chart's CRD files for ``version``."""
    return [CRD_URL.format(version=version, file=f) for f in CRD_FILES]
