"""KubeRay's submitter step, as the rehearsals run it against a local Ray cluster: ``ray job submit --no-wait``."""

from __future__ import annotations

import json
import subprocess
import time
from typing import Sequence

AGENT_WAIT_S = 300.0
"""How long a head that just started may answer with no job agent yet."""


def submit(url: str, env: dict, runtime_env: dict, sid: str, entrypoint: Sequence[str]) -> None:
    """Submit ``entrypoint`` as job ``sid`` (retried while the head has no job agent); fails the test otherwise."""
    deadline = time.monotonic() + AGENT_WAIT_S
    while True:
        sub = subprocess.run(
            [
                "ray",
                "job",
                "submit",
                "--address",
                url,
                "--runtime-env-json",
                json.dumps(runtime_env),
                "--submission-id",
                sid,
                "--no-wait",
                "--",
                *entrypoint,
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        if sub.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(3)
    assert sub.returncode == 0, sub.stderr[-2000:]
