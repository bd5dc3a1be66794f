"""Shared fixtures: the real __main__.py run under Pulumi mocks."""

from __future__ import annotations

import pytest

from ray_efa_eks.tools.mockrun import MockRun
from tests.helpers.catalogue import catalogue_gpu_region
from tests.helpers.mockruns import shared_run


REHEARSAL_FILES = frozenset(
    {
        "tests/training/test_training.py",
        "tests/training/test_token_auth.py",
        "tests/training/test_cli_interrupt.py",
        "tests/components/test_storage_access.py",
        "tests/components/test_autoscaling_rehearsal.py",
        "tests/components/test_metrics_scrape.py",
        "tests/efacheck/test_gate_rehearsal.py",
        "tests/efacheck/test_local_cluster_start.py",
        "tests/tools/test_rayjob_rehearsal.py",
        "tests/tools/test_rayjob_queue_rehearsal.py",
        "tests/training/test_lifecycle.py",
        "tests/training/test_checkpoints.py",
        "tests/training/test_worker_constraints.py",
        # sequences of stacks under mocks (deploy, change, upgrade), the docs' commands run as written, waits that run
        # to their deadlines, the mutation tool's own pytest runs, Kueue's admission over rendered stacks
        "tests/components/test_lifecycle_cluster.py",
        "tests/components/test_lifecycle_nodes.py",
        "tests/components/test_change_rehearsal.py",
        "tests/test_docs_commands.py",
        "tests/test_deadlines.py",
        "tests/tools/test_mutate.py",
        "tests/tools/test_queue_admission.py",
        # the library as others consume it: a wheel built and installed, the provider plugin over gRPC as the engine
        # runs it
        "tests/components/test_package.py",
        "tests/components/test_provider_grpc.py",
    }
)
"""Files whose tests start local Ray clusters or run whole rehearsals (most of the suite's time): marked
``rehearsal``, so ``pytest -m "not rehearsal"`` is the fast lane. A test elsewhere that starts Ray carries
``@pytest.mark.rehearsal`` itself."""

REHEARSAL_TESTS = (
    "tests/components/test_config_reference.py::test_declared_effects_are_what_the_rehearsal_shows",
    "tests/components/test_config_reference.py::test_the_rehearsal_can_tell_the_effects_apart",
    "tests/training/test_submit_deadline.py::test_submit_to_a_server_that_never_answers_exits_2_in_time",
    "tests/training/test_submit_deadline.py::test_train_address_that_never_answers_exits_2_in_time",
    "tests/components/test_pod_aws_env.py::test_without_it_pyarrow_probes_imds_and_guesses_the_region",
)
"""Tests (node id prefixes) of otherwise fast files that rehearse a stack change per key, or wait out a deadline
(a server that never answers, pyarrow's IMDS probe)."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.split("::", 1)[0] in REHEARSAL_FILES or item.nodeid.startswith(REHEARSAL_TESTS):
            item.add_marker(pytest.mark.rehearsal)


@pytest.fixture(scope="session")
def default_run() -> MockRun:
    """The default stack (Pulumi.dev.yaml's values are the defaults); the same run as ``shared_run()``."""
    return shared_run()


@pytest.fixture(scope="session")
def p5_run() -> MockRun:
    return shared_run({"gpuInstanceType": "p5.48xlarge"})


@pytest.fixture(scope="session")
def catalogue_runs() -> dict[str, tuple[str, MockRun]]:
    """Every catalogue GPU type's default stack under mocks, in a region that offers it: type -> (region, run).
    One run each (~0.5 s), shared by the catalogue and device plugin tests."""
    from ray_efa_eks.components.nodes.instances import CATALOGUE

    out = {}
    for name in sorted(n for n, t in CATALOGUE.items() if t.gpus):
        region = catalogue_gpu_region(name)
        out[name] = (region, shared_run({"gpuInstanceType": name}, region=region))
    return out
