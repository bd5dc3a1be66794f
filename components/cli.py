"""Conventions every ``components`` CLI (plan, preflight) shares: usage errors have their own exit code, never a verdict's.

argparse exits 2 on a bad argument, which preflight uses for "could not be answered"; a typo must not read
as a result. ``training`` keeps its own copy (it is shipped alone as a Ray job's working_dir):
``training/cli.py``.
"""

from __future__ import annotations

import argparse
import sys

EXIT_USAGE = 64
"""Bad command-line arguments (sysexits' EX_USAGE); no verdict or check result uses it."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse that exits :data:`EXIT_USAGE` on a usage error."""

    def error(self, message: str):  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")
