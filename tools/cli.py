"""The tools' own argparse types. The CLI kernel (``ArgumentParser``: usage errors exit 64, never a verdict's code;
``run_cli``) and the exit codes are efacheck/cli.py's and efacheck/exit_codes.py's: every package imports them from
there."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """argparse type: a whole number >= 1 (a count of runs, repeats, steps); the message names the bad value."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number, e.g. 3") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n}: must be >= 1, e.g. 3")
    return n
