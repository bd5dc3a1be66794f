"""Conventions every tool CLI (plan, preflight, config-schema, the ``ray-efa-eks`` command) shares: usage errors exit
64, never a verdict's code.

argparse exits 2 on a bad argument, which preflight uses for "could not be answered"; a typo must not read as a
result. The tools run where the whole project is installed, so they reuse the training package's convention; the
two packages shipped alone as a Ray job's working_dir (``training``, ``efacheck``) each keep their own copy.
"""

from __future__ import annotations

import argparse

from ..training.cli import EXIT_USAGE, ArgumentParser, run_cli

__all__ = ["EXIT_USAGE", "ArgumentParser", "positive_int", "run_cli"]


def positive_int(text: str) -> int:
    """argparse type: a whole number >= 1 (a count of runs, repeats, steps); the message names the bad value."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number, e.g. 3") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n}: must be >= 1, e.g. 3")
    return n
