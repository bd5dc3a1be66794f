"""What the driver prints of the cluster's output: ``[train]`` lines plain when piped, Ray Train's monitor noise out.

Ray prints every worker and actor line on the driver as ``(ActorName pid=N, ip=X) line`` with ANSI colours
(ray/_private/worker.py ``print_worker_logs``, Ray 2.58). Piped into a file or ``grep``, a ``[train]`` progress line
should be that line: with stdout not a terminal, ``RAY_COLOR_PREFIX=0`` drops the colours (Ray's own switch) and the
actor prefix is left off ``[train]``/``[fabric]``/``[summary]`` lines. Ray Train's placement-group cleaner actor
logs "Failed to query Ray Train Controller actor state" each time the State API is slow to answer (10-12 times a
run on a loaded machine; placement_group_cleaner.py): it keeps monitoring, nothing is wrong, so those lines are
dropped. Everything else passes unchanged.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable

OWN_PREFIXES = ("[train]", "[fabric]", "[summary]")
"""Lines this package prints for the driver's reader."""
NOISE = ("Failed to query Ray Train Controller actor state",)
"""Ray Train monitor warnings that say nothing is wrong (it continues monitoring)."""


def filtered(print_worker_logs: Callable[..., Any], piped: bool) -> Callable[..., Any]:
    """Wrap Ray's ``print_worker_logs(data, print_file, ignore_prefix=False)`` as described above."""

    def wrapper(data: dict, print_file: Any, ignore_prefix: bool = False) -> None:
        lines = [ln for ln in data.get("lines", []) if not any(n in ln for n in NOISE)]
        if piped and not ignore_prefix:
            own = [ln for ln in lines if ln.lstrip().startswith(OWN_PREFIXES)]
            rest = [ln for ln in lines if not ln.lstrip().startswith(OWN_PREFIXES)]
            if own:
                print_worker_logs({**data, "lines": own}, print_file, True)
            lines = rest
        if lines:
            print_worker_logs({**data, "lines": lines}, print_file, ignore_prefix)

    wrapper.__wrapped__ = print_worker_logs  # type: ignore[attr-defined]
    return wrapper


def install(piped: bool | None = None) -> None:
    """Filter the driver's copy of the cluster's output (call before ``ray.init``); idempotent."""
    from ray._private import worker

    piped = not sys.stdout.isatty() if piped is None else piped
    if piped:
        os.environ.setdefault("RAY_COLOR_PREFIX", "0")
    if not hasattr(worker.print_worker_logs, "__wrapped__"):
        worker.print_worker_logs = filtered(worker.print_worker_logs, piped)
