"""Shared fixtures: the real __main__.py run under Pulumi mocks."""

from __future__ import annotations

import pytest

from ray_efa_eks.tools.mockrun import MockRun
from tests.helpers.catalogue import catalogue_gpu_region
from tests.helpers.mockruns import shared_run


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
    from ray_efa_eks.components.instances import CATALOGUE

    out = {}
    for name in sorted(n for n, t in CATALOGUE.items() if t.gpus):
        region = catalogue_gpu_region(name)
        out[name] = (region, shared_run({"gpuInstanceType": name}, region=region))
    return out
