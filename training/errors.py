"""What every training command ends with: its exit codes, the error that carries one, and an error's text in one
line (``train`` and ``submit`` rows of the exit-code table, efacheck/exit_codes.py)."""

from __future__ import annotations

from typing import Optional

EXIT_OK = 0
EXIT_FAILED = 1
"""The run failed (--max-failures exhausted) or the submitted job failed."""
EXIT_UNREACHABLE = 2
"""The cluster did not answer: --address unreachable, or the Ray auth token was refused (project-wide 'no answer')."""
EXIT_RAY_START = 4
"""Ray could not start the local cluster."""
EXIT_WRONG_FABRIC = 5
"""--require-efa and the fabric verdict after NCCL initialisation was not efa; nothing was checkpointed."""
EXIT_TOO_SMALL = 6
"""The cluster (--address) has fewer CPUs, or GPUs with --use-gpu, than --workers needs: nothing was started."""
EXIT_INTERRUPTED = 130
"""Ctrl-C (128 + SIGINT); with --json the last stdout line says so."""


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
