"""Every option the stack renders into the gate's check reaches a decision: the check's own code
(``efacheck.efa_check.check``) runs with the argv the default and a p5 stack render, parsed by the check's own
parser, on a published EFA log (the g7e 2-node NCCL run), with only the Ray-side steps stood in for (the topology wait
and the collective sweep, which record what they were asked). Each rendered option, changed, changes the outcome:
the verdict, a figure, or what the check asks Ray for. A new option the stack renders fails
:func:`test_every_rendered_check_option_has_a_case` until it has one.

The CPU rehearsal (tests/rehearsal/) runs the same argv for real, but its check stops at ``no_cuda`` before the EFA
options decide anything; this is where they are seen to decide.
"""

from __future__ import annotations

import copy
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from ray_efa_eks.efacheck import efa_check
from tests.helpers.argv import set_flag
from tests.helpers.mockruns import shared_run

LOG = Path(__file__).resolve().parents[1] / "fixtures/nccl-logs/real_efa_g7e_slurm_nccl2292_ofi1180_2node.log"
OUTSIDE_CHECK = {
    "--json": "the output format, read by the gate's script (the rehearsal parses it)",
    "--address": "where the driver connects (the rehearsal's gate reaches its local head through it)",
}
"""Rendered options ``check`` does not read: each is live in the deploy-sequence rehearsal instead."""


def rendered(config: dict[str, str]) -> list[str]:
    """The check's argv as the gate Job's script submits it."""
    script = shared_run(config).one("kubernetes:batch/v1:Job")["spec"]["template"]["spec"]["containers"][0]["command"][
        2
    ]
    line = re.search(r"-- (python -m \S*efacheck\.efa_check [^\n]*)", script).group(1)
    return shlex.split(line)[3:]


def outcome(monkeypatch, argv: list[str], counters: bool = True) -> dict[str, Any]:
    """What the check decides for ``argv``, and what it asked of Ray."""
    asked: dict[str, Any] = {}

    def wait_topology(nodes, gpus, wait_s, backend, **kw):
        asked["topology"] = (nodes, gpus, wait_s)
        return "nccl", [{} for _ in range(nodes)]

    def run_check(backend, lo, hi, iters, **kw):
        asked["sweep"] = {k: v for k, v in kw.items() if k != "expect_stack"}
        asked["expect_stack"] = kw.get("expect_stack")
        res = [
            {
                "collective": "all_reduce",
                "bytes": 1 << 28,
                "dtype": "float32",
                "source": "pow2",
                "time_s": 0.1,
                "ok": True,
            }
        ]
        outs = [
            {
                "rank": r,
                "results": [{**x, "rank": r} for x in res],
                "logs": {"a": LOG.read_bytes()} if r == 0 else {},
                "probe": {},
            }
            for r in range(2)
        ]
        if counters:
            for o in outs:
                o["counters"] = {
                    "before": {"efa0": {"tx_bytes": 0, "rx_bytes": 0}},
                    "after": {"efa0": {"tx_bytes": 1 << 30, "rx_bytes": 1 << 30}},
                }
        return {"world": 2, "nodes": 2, "iters": 1, "outs": outs}

    monkeypatch.setattr(efa_check, "wait_topology", wait_topology)
    monkeypatch.setattr(efa_check, "run_check", run_check)
    monkeypatch.setattr(efa_check, "check_stale", lambda pods, expect: asked.setdefault("stale", expect))
    monkeypatch.setattr(efa_check, "pod_stack", lambda: {})
    monkeypatch.setattr(efa_check, "_probe", None)
    a = efa_check.CheckRequest.from_namespace(efa_check.parser().parse_args(argv))
    r = efa_check.check(a)
    return {
        "verdict": r["verdict"],
        "code": r["code"],
        "failure": r.get("failure"),
        "reasons": list(r["reasons"]),
        "line_rate": copy.deepcopy(r.get("line_rate")),
        "expected": r.get("expected"),
        "asked": asked,
    }


CASES = {
    "--expect-nodes": ("3", "asked"),
    "--wait-s": ("60", "asked"),
    "--timeout-s": ("60", "asked"),
    "--expect-gpus-per-node": ("2", "asked"),
    "--expect-nics": ("4", "verdict"),
    "--expect-gdrdma": (None, "reasons"),
    "--efa-gbps": ("400", "line_rate"),
    "--image": ("example.com/other:v1", "asked"),
    "--spec-hash": ("000000000000", "asked"),
    "--require-counters": (None, "verdict"),
    "--storage-proof": (None, "asked"),
}
"""Rendered option -> (the changed value, None to drop it; which part of the outcome must change)."""


def _flags(argv: list[str]) -> set[str]:
    return {a for a in argv if a.startswith("--")}


def test_every_rendered_check_option_has_a_case():
    rendered_flags = _flags(rendered({})) | _flags(rendered({"gpuInstanceType": "p5.48xlarge"}))
    assert rendered_flags - set(CASES) - set(OUTSIDE_CHECK) == set()


@pytest.mark.parametrize("flag", sorted(CASES))
def test_each_rendered_check_option_changes_the_outcome(monkeypatch, flag):
    config = {"gpuInstanceType": "p5.48xlarge"} if flag == "--expect-gdrdma" else {}
    argv = rendered(config)
    value, part = CASES[flag]
    counters = flag != "--require-counters"  # what the flag decides on: a run whose counters could not be read
    before, after = outcome(monkeypatch, argv, counters), outcome(monkeypatch, set_flag(argv, flag, value), counters)
    assert before[part] != after[part], (flag, before[part])
