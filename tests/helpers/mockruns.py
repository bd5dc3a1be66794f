"""One mock run of the whole stack per (config, region), shared by every test file that reads it.

A whole-stack ``run_program`` costs 1-3 s of CPU (the Pulumi SDK's registration path); the same configs (the
default, ``efa: false``, the rehearsal's before/after pairs) were run again in many files. Only plain runs are shared:
no ``record``, ``account``, ``previous``, ``program`` or ``offerings``, whose runs depend on more than the config.

A test must not change a shared run; each hit checks the run's fingerprint (its resources, outputs and invokes as
JSON) against the one taken when it was made, and fails naming the config if a test changed it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ray_efa_eks.tools.mockrun import MockRun, run_program

_RUNS: dict[str, tuple[MockRun, str]] = {}


def _key(config: dict[str, Any] | None, region: str) -> str:
    """The config as ``run_program`` passes it to the program (a non-string value JSON-encoded), so ``{"n": 3}`` and
    ``{"n": "3"}`` share a run, as they share the program's input."""
    norm = {
        (k if ":" in k else f"ray-efa-eks:{k}"): (v if isinstance(v, str) else json.dumps(v))
        for k, v in (config or {}).items()
    }
    return json.dumps([region, norm], sort_keys=True)


def _fingerprint(run: MockRun) -> str:
    data = [[(r.type, r.name, r.inputs, r.parent, r.options) for r in run.resources], run.outputs, run.calls]
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=repr).encode()).hexdigest()


def shared_run(config: dict[str, Any] | None = None, *, region: str = "us-east-1") -> MockRun:
    """``run_program(config, region=region)``, run once per session; a config the program refuses raises each time."""
    key = _key(config, region)
    if key in _RUNS:
        run, fp = _RUNS[key]
        assert _fingerprint(run) == fp, f"a test changed the shared mock run of {key} (copy it before changing it)"
        return run
    run = run_program(config, region=region)
    _RUNS[key] = (run, _fingerprint(run))
    return run
