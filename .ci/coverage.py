#!/usr/bin/env python3
"""Branch coverage of the modules that decide, by their own fast unit tests, held per module.

Runs FAST_TESTS once under coverage.py (branch), prints the report of the decision modules and exits 1 when a module
is below its floor in FLOORS. A floor below 100 is where the module stood when the gate was added: raise it as tests
land, never lower it. Exclusions in the code are ``# pragma: no cover`` with the reason beside them. Not the whole
suite (Ray rehearsals, Pulumi mock runs): CI time. Usage: .venv/bin/python .ci/coverage.py [--report-only]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FLOORS: dict[str, float] = {
    "efacheck/nccl_log.py": 100.0,
    "efacheck/nccl_input.py": 100.0,
    "efacheck/nccl_parse.py": 100.0,
    "efacheck/nccl_verdict.py": 100.0,
    "efacheck/nccl_report.py": 100.0,
    "efacheck/efa_counters.py": 100.0,
    "efacheck/verdict.py": 100.0,
    "efacheck/stack_probe.py": 100.0,
    "efacheck/sweep.py": 100.0,
    "efacheck/storage_proof.py": 100.0,
    "training/fabric.py": 100.0,
    "components/config/config.py": 100.0,
    "components/config/values.py": 100.0,
    "components/config/config_fields.py": 100.0,
    "tools/preflight.py": 100.0,
    "tools/preflight_aws.py": 100.0,
    "tools/preflight_checks.py": 100.0,
    "components/nodes/capacity.py": 100.0,
    "components/nodes/cost.py": 100.0,
    "tools/aws_rules.py": 100.0,
    "tools/security_rules.py": 100.0,
    "tools/layout.py": 100.0,
    "tools/layout_node_groups.py": 100.0,
    "tools/layout_pods.py": 100.0,
    "tools/layout_network.py": 100.0,
    "tools/plan_diff.py": 100.0,
    "tools/plan_run.py": 100.0,
    "efacheck/node_check.py": 100.0,
    "efacheck/node_api.py": 100.0,
    "efacheck/node_findings.py": 100.0,
    "efacheck/worker_pods.py": 100.0,
}
"""Module -> the least branch coverage (%) its tests must keep."""

FAST_TESTS = [
    "tests/efacheck/test_nccl_log.py",
    "tests/efacheck/test_nccl_log_cases.py",
    "tests/efacheck/test_verdict_properties.py",
    "tests/efacheck/test_verdict_cases.py",
    "tests/efacheck/test_efa_counters.py",
    "tests/efacheck/test_efa_counters_cases.py",
    "tests/efacheck/test_exporter_witness.py",
    "tests/efacheck/test_efa_exporter.py",
    "tests/efacheck/test_stack_probe.py",
    "tests/efacheck/test_stack_probe_cases.py",
    "tests/efacheck/test_sweep_cases.py",
    "tests/efacheck/test_storage_proof_cases.py",
    "tests/training/test_fabric.py",
    "tests/training/test_fabric_cases.py",
    "tests/components/test_config.py",
    "tests/components/test_config_rules.py",
    "tests/components/test_values.py",
    "tests/components/test_values_cases.py",
    "tests/components/test_config_fields.py",
    "tests/tools/test_preflight.py",
    "tests/tools/test_preflight_quota.py",
    "tests/tools/test_preflight_args.py",
    "tests/tools/test_preflight_cases.py",
    "tests/components/test_capacity_cases.py",
    "tests/components/test_cost_cases.py",
    "tests/tools/test_aws_rules_cases.py",
    "tests/tools/test_security_rules_cases.py",
    "tests/tools/test_rules_unknowns.py",
    "tests/tools/test_layout_cases.py",
    "tests/tools/test_plan_diff_cases.py",
    "tests/tools/test_plan_run_cases.py",
    "tests/efacheck/test_node_check.py",
    "tests/efacheck/test_worker_pods.py",
    "tests/efacheck/test_exporter_hostile.py",
    "tests/components/test_job_queues.py",
    "tests/components/test_image_cache.py",
    "tests/components/test_cold_start.py",
    "tests/components/test_cluster_hardening.py",
    "tests/components/test_observability.py",
]
"""The decision modules' own unit tests (seconds each; no Ray cluster)."""

RC = """[run]
branch = True
source = efacheck,training,components,tools
"""


def main(argv: list[str]) -> int:
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        rc, data = os.path.join(tmp, "coveragerc"), os.path.join(tmp, ".coverage")
        with open(rc, "w") as f:
            f.write(RC)
        t0 = time.monotonic()
        run = subprocess.run(
            [
                py,
                "-m",
                "coverage",
                "run",
                f"--rcfile={rc}",
                f"--data-file={data}",
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                *FAST_TESTS,
            ],
            cwd=ROOT,
        )
        took = time.monotonic() - t0
        subprocess.run(
            [
                py,
                "-m",
                "coverage",
                "report",
                f"--rcfile={rc}",
                f"--data-file={data}",
                "-m",
                f"--include={','.join(FLOORS)}",
            ],
            cwd=ROOT,
            check=True,
        )
        low = []
        for mod, floor in FLOORS.items():
            out = subprocess.run(
                [
                    py,
                    "-m",
                    "coverage",
                    "report",
                    f"--rcfile={rc}",
                    f"--data-file={data}",
                    f"--include={mod}",
                    "--format=total",
                    "--precision=1",
                ],
                cwd=ROOT,
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            if float(out) < floor:
                low.append(f"{mod}: {out}% < {floor}%")
    print(f".ci/coverage.py: {len(FAST_TESTS)} test files under coverage in {took:.0f} s")
    if run.returncode != 0:  # the report above is still printed: it says what the passing tests reached
        print(f".ci/coverage.py: the decision modules' tests failed (exit {run.returncode})", file=sys.stderr)
        return run.returncode
    if low and "--report-only" not in argv:
        print(
            "branch coverage below the floor (add the tests; see the Missing column above):\n  " + "\n  ".join(low),
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
