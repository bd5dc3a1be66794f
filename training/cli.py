"""Conventions every ``training`` CLI shares: usage errors have their own exit code, never a verdict's.

argparse exits 2 on a bad argument, which the verdict CLIs use for "undetermined"; a typo must not read
as a verdict. ``training`` is shipped alone as a Ray job's working_dir, so it keeps its own copy of this
convention (``efacheck/cli.py`` is the other one; the tools import ``training/cli.py``).
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
