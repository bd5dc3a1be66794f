"""Shared fixtures: the real __main__.py run under Pulumi mocks."""

from __future__ import annotations

import pytest

from ray_efa_eks.tools.mockrun import MockRun, run_program


@pytest.fixture(scope="session")
def default_run() -> MockRun:
    """The default stack (Pulumi.dev.yaml's values are the defaults)."""
    return run_program()


@pytest.fixture(scope="session")
def p5_run() -> MockRun:
    return run_program({"gpuInstanceType": "p5.48xlarge"})
