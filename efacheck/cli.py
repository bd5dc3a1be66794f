"""Conventions every ``efacheck`` CLI shares: usage errors have their own exit code, never a verdict's, and every
entry point runs through :func:`run_cli` (Ctrl-C 130, SIGTERM 143, an unexpected exception one line and a trace file).

argparse exits 2 on a bad argument, which the verdict CLIs use for "undetermined"; a typo must not read
as a verdict. ``efacheck`` is shipped alone as a Ray job's working_dir and imports nothing outside itself, so this
is the one copy: ``training/cli.py`` re-exports it for training and the tools.
"""

from __future__ import annotations

import argparse
import atexit
import logging
import os
import shutil
import signal
import sys
import threading
from typing import Any, Callable, Sequence

from . import exit_codes as _exit_codes
from .exit_codes import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_PIPE, EXIT_TERMINATED, EXIT_USAGE

__all__ = [
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_PIPE",
    "EXIT_TERMINATED",
    "EXIT_USAGE",
    "ArgumentParser",
    "internal_error",
    "interrupted_code",
    "interruption",
    "run_cli",
    "terminated",
    "write_trace",
]


class ArgumentParser(argparse.ArgumentParser):
    """argparse that exits :data:`EXIT_USAGE` on a usage error.

    ``exit_codes``: the command whose row of the exit-code table (``efacheck/exit_codes.py``) ends ``--help``, one
    code per line, after any ``epilog`` text; docs/cli.md is rendered from the same row, so the two cannot differ.
    """

    def __init__(self, *args: Any, exit_codes: str | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        if exit_codes is not None:
            _exit_codes.codes(exit_codes)  # a command the table lacks fails here, not at --help time
        self.exit_codes = exit_codes

    def format_help(self) -> str:
        text = super().format_help()
        if self.exit_codes is None:
            return text
        width = shutil.get_terminal_size().columns - 2  # what argparse's HelpFormatter wraps to
        return f"{text.rstrip()}\n\n{_exit_codes.epilog(self.exit_codes, width)}\n"

    def error(self, message: str):  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


# -- the entry point every CLI runs through ------------------------------------------------------------------------

_TERMINATED: list[int] = []


def terminated() -> bool:
    """True once SIGTERM reached this process (through :func:`run_cli`)."""
    return bool(_TERMINATED)


def interrupted_code() -> int:
    """The exit code of an interruption: 143 after SIGTERM, 130 after Ctrl-C."""
    return EXIT_TERMINATED if _TERMINATED else EXIT_INTERRUPTED


def interruption() -> str:
    """How the run was interrupted, for messages: ``SIGTERM`` or ``Ctrl-C``."""
    return "SIGTERM" if _TERMINATED else "Ctrl-C"


def _on_sigterm(signum: int, frame: Any) -> None:
    """SIGTERM takes Ctrl-C's path: whatever SIGINT handler is installed runs (Ray Train's abort, a CLI's own
    note), else KeyboardInterrupt unwinds the stack so ``finally`` blocks and temporary directories are cleaned."""
    _TERMINATED.append(signum)
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler) and handler is not signal.default_int_handler:
        handler(signal.SIGINT, frame)
        return
    raise KeyboardInterrupt


def write_trace(prog: str) -> str:
    """Write the current exception's full traceback to a new file in the temp directory; return its path."""
    import tempfile
    import traceback

    fd, path = tempfile.mkstemp(prefix=f"{prog.replace(' ', '-').replace('/', '-')[:40]}-trace-", suffix=".txt")
    with os.fdopen(fd, "w") as f:
        f.write(f"{prog} {' '.join(sys.argv[1:])}\n\n{traceback.format_exc()}")
    return path


def internal_error(prog: str, e: BaseException) -> str:
    """One line for an unexpected exception, naming the file that holds its trace."""
    first = (str(e).strip().splitlines() or [""])[0][:300]
    return (
        f"{prog}: internal error: {type(e).__name__}{': ' + first if first else ''} (a bug: the full trace is in "
        f"{write_trace(prog)}; please report it with that file)"
    )


def run_cli(main: Callable[..., Any], argv: Sequence[str] | None, prog: str) -> int:
    """Run ``main(argv, prog)`` as a command: its exit code, never a traceback.

    Usage errors are the parser's 64; a module's known failures return their documented codes; Ctrl-C exits 130 and
    SIGTERM 143 (both unwind the same way, so a CLI's interrupted message, JSON line and cleanup run for either);
    any other exception is one line naming the file with its trace (exit 70).
    """
    del _TERMINATED[:]
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        try:
            code = main(list(sys.argv[1:] if argv is None else argv), prog)
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
    except SystemExit as e:  # argparse (--help 0, usage 64) or a module's own sys.exit
        if e.code is None or isinstance(e.code, int):
            code = e.code or 0
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted ({interruption()})", file=sys.stderr)
        code = interrupted_code()
    except BrokenPipeError:
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
        except (OSError, ValueError):
            pass
        code = EXIT_PIPE
    except Exception as e:  # noqa: BLE001 - the one place an unexpected exception becomes an exit code
        print(internal_error(prog, e), file=sys.stderr)
        code = EXIT_INTERNAL
    code = int(code or 0)
    if _TERMINATED and code == EXIT_INTERRUPTED:
        code = EXIT_TERMINATED
    if code in (EXIT_INTERRUPTED, EXIT_TERMINATED):
        # asyncio tasks the interrupt cut off (the Pulumi mocks' RPCs) would print "Task exception was never
        # retrieved" with a traceback when the interpreter collects them, and an event loop whose self-pipe was
        # closed under it "Exception ignored in: BaseEventLoop.__del__" (ValueError: Invalid file descriptor: -1,
        # through sys.unraisablehook): the run is over and said so; nothing it left half-done is news
        logging.getLogger("asyncio").disabled = True
        atexit.register(setattr, sys, "unraisablehook", _after_interrupt)  # at exit: a caller's own hook stays
    return code


def _after_interrupt(unraisable: Any) -> None:
    """sys.unraisablehook once a run was interrupted: objects the interrupt cut off fail in their finalizers."""
