"""What every training command ends with: its exit codes, the error that carries one, and an error's text in one
line (``train`` and ``submit`` rows of the exit-code table, efacheck/exit_codes.py)."""

from __future__ import annotations

from typing import Optional

from ..efacheck.exit_codes import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_RAY_START,
    EXIT_TOO_SMALL,
    EXIT_WRONG_FABRIC,
)
from ..efacheck.exit_codes import EXIT_NO_ANSWER as EXIT_UNREACHABLE

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_RAY_START",
    "EXIT_TOO_SMALL",
    "EXIT_UNREACHABLE",
    "EXIT_WRONG_FABRIC",
    "CliError",
    "first_line",
    "last_line",
]
"""The codes training's commands end with, by the names its modules use (their meaning: the exit-code table)."""


class CliError(Exception):
    """A failure the CLI reports as one clear line and an exit code."""

    def __init__(self, code: int, message: str, extra: Optional[dict] = None):
        super().__init__(message)
        self.code = code
        self.extra = extra or {}


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return (text.splitlines() or [type(e).__name__])[0]


def last_line(e: BaseException, limit: int = 140) -> str:
    """The last line of an error's text: for a remote error (its traceback in the text), the error itself."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return (lines[-1] if lines else type(e).__name__)[:limit]
