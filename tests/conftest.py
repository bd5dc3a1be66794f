"""Shared fixtures: the real __main__.py run under Pulumi mocks."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from components.mockrun import MockRun, run_program  # noqa: E402


@pytest.fixture(scope="session")
def default_run() -> MockRun:
    """The default stack (Pulumi.dev.yaml's values are the defaults)."""
    return run_program()


@pytest.fixture(scope="session")
def p5_run() -> MockRun:
    return run_program({"gpuInstanceType": "p5.48xlarge"})
