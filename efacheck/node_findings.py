"""What a GPU node's own view proves about its EFA path (efacheck/node_check.py runs it): the five findings
(``devices``, ``counters``, ``module``, ``plugin``, ``provider``) from its sysfs, its allocatable resources and
``fi_info -l``, and the EFA device count the catalogue expects for the node's instance type."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from typing import Any, Callable

from .efa_counters import read_ports

EFA_RESOURCE = "vpc.amazonaws.com/efa"

READ_BUDGET_S = 30.0
"""How long one read of the node's sysfs may take (efa_counters.read_ports: bounded files, regular files only)."""


@dataclass(frozen=True)
class Finding:
    check: str
    ok: bool
    detail: str


def libfabric_lists_efa(run: Callable[..., Any] = subprocess.run) -> tuple[bool, str]:
    """(listed, what fi_info said): ``fi_info -l`` names ``efa:`` when the image's libfabric has the provider.

    Needs no device (module docstring): the provider registers without one, and ``-l`` asks for the registered
    providers only (``FI_PROV_ATTR_ONLY``)."""
    try:
        r = run(["fi_info", "-l"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"fi_info could not run: {e}"
    lines = [ln.strip() for ln in (r.stdout or "").splitlines()]
    if r.returncode == 0 and "efa:" in lines:
        after = lines[lines.index("efa:") + 1 : lines.index("efa:") + 2]
        version = after[0].removeprefix("version:").strip() if after and after[0].startswith("version:") else "?"
        return (
            True,
            f"the image's libfabric has the efa provider (version {version}); the device itself is "
            "checked by each Ray worker's efa-provider-check init container",
        )
    names = [ln[:-1] for ln in lines if ln.endswith(":")]
    said = f"providers {', '.join(names)}" if names else ((r.stderr or "").strip() or f"exit {r.returncode}")
    return False, f"fi_info -l does not list efa ({said})"


PROVIDER_LEFT_TO_WORKERS = (
    True,
    "not checked here (--skip-provider: the agent's image has no libfabric); each Ray "
    "worker's efa-provider-check init container runs fi_info -p efa from the DLC with the "
    "device, and its failure puts the startup taint back",
)
"""The ``provider`` finding with ``--skip-provider``."""


def decide(
    sysfs: str,
    expected_devices: int,
    allocatable: dict[str, str],
    provider: tuple[bool, str],
    module_root: str | None = None,
) -> list[Finding]:
    """The five checks (module docstring) on a sysfs root (``<root>/class/infiniband``) and ``module_root``
    (default ``<root>/module``; in the agent the container's own ``/sys/module``, which is not namespaced)."""
    problems: dict[str, str] = {}
    ports = read_ports(os.path.join(sysfs, "class", "infiniband"), time.monotonic() + READ_BUDGET_S, problems)
    found = len(ports)
    said = (
        f"the catalogue says {expected_devices}"
        if expected_devices >= 0
        else "the catalogue has no count for this node's instance type"
    )
    out = [
        Finding(
            "devices",
            found == expected_devices,
            f"{found} EFA device(s) ({', '.join(sorted(ports)) or 'none'}); {said}",
        )
    ]
    errors = [f"{dev}: {path}: {why}" for dev, e in ports.items() for path, why in e["errors"].items()]
    errors += [f"{path}: {why}" for path, why in problems.items()]
    unread = [
        dev for dev, e in ports.items() if not any({"tx_bytes", "rx_bytes"} <= set(v) for v in e["ports"].values())
    ]
    out.append(
        Finding(
            "counters",
            bool(ports) and not errors and not unread,
            "; ".join(errors + [f"{d}: no tx_bytes/rx_bytes" for d in unread])
            or ("no device to read" if not ports else "every port's hw_counters readable"),
        )
    )
    module = os.path.isdir(os.path.join(module_root or os.path.join(sysfs, "module"), "efa"))
    out.append(
        Finding(
            "module",
            module,
            "efa kernel module loaded" if module else "no /sys/module/efa: the efa kernel module is not loaded",
        )
    )
    advertised = allocatable.get(EFA_RESOURCE)
    out.append(
        Finding(
            "plugin",
            advertised == str(expected_devices),
            f"the node's allocatable {EFA_RESOURCE} is {advertised!r}; expected {expected_devices!r} "
            "(the EFA device plugin advertises one per device)",
        )
    )
    out.append(Finding("provider", provider[0], provider[1]))
    return out


INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"


def parse_expected(text: str) -> dict[str, int]:
    """``g6.12xlarge=1,p5.48xlarge=32`` -> {type: EFA devices} (the node agent passes the stack's types)."""
    out: dict[str, int] = {}
    for part in text.split(","):
        name, sep, count = part.strip().partition("=")
        if not sep or not name or not count.isdigit():
            raise ValueError(f"--expect-devices {text!r}: expected TYPE=COUNT[,TYPE=COUNT...], e.g. g6.12xlarge=1")
        out[name] = int(count)
    return out


def expected_for(node: dict[str, Any], expected: int | dict[str, int]) -> int:
    """The catalogue's EFA device count for this node's type; -1 (fails ``devices``) for a type it does not know."""
    if isinstance(expected, int):
        return expected
    itype = ((node.get("metadata") or {}).get("labels") or {}).get(INSTANCE_TYPE_LABEL)  # None: not in ``expected``
    return expected.get(itype, -1)
