"""Rendered command lines, changed one option at a time (the liveness tests)."""

from __future__ import annotations


def flags(argv: list[str]) -> list[str]:
    """The ``--options`` of ``argv``."""
    return [a for a in argv if a.startswith("--")]


def set_flag(argv: list[str], flag: str, value: str | None) -> list[str]:
    """``flag``'s value replaced; None drops a bare flag."""
    out = list(argv)
    i = out.index(flag)
    if value is None:
        del out[i]
    else:
        out[i + 1] = value
    return out
