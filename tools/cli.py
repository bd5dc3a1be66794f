"""Conventions every tool CLI (plan, preflight, config-schema, the ``ray-efa-eks`` command) shares: usage errors exit
64, never a verdict's code.

argparse exits 2 on a bad argument, which preflight uses for "could not be answered"; a typo must not read as a
result. The tools run where the whole project is installed, so they reuse the training package's convention; the
two packages shipped alone as a Ray job's working_dir (``training``, ``efacheck``) each keep their own copy.
"""

from __future__ import annotations

from ..training.cli import EXIT_USAGE, ArgumentParser

__all__ = ["EXIT_USAGE", "ArgumentParser"]
