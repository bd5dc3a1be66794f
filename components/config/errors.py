"""ArgError: what a component raises for an argument that cannot work, in the component's own words.

It names the component's own argument (``availability_zone``, ``reservation``...), so a program that builds the
component directly reads names it wrote. A fix that names other arguments is a function of a naming, so the same
problem reads in the caller's words: the umbrella (``stack.py``) renames the arguments to its stack keys
(``config.STACK_KEYS``) and raises ``ConfigError``; no component knows a stack key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Fix = str | Callable[[Callable[[str], str]], str]
"""The fix as text, or a function of ``name(arg)`` that writes it with the caller's names for other arguments."""


class ArgError(ValueError):
    """``arg`` = ``value`` cannot work: ``fix``; ``names`` maps argument names to the caller's (default: as is)."""

    def __init__(self, arg: str, value: Any, fix: Fix, names: Mapping[str, str] | None = None):
        self.arg, self.value, self._fix, self.names = arg, value, fix, dict(names or {})
        key = self.name(arg)
        super().__init__(f"{key} is not set: {self.fix}" if value is None else f"{key} = {value!r}: {self.fix}")

    def name(self, arg: str) -> str:
        """What the caller calls ``arg``."""
        return self.names.get(arg, arg)

    @property
    def fix(self) -> str:
        return self._fix(self.name) if callable(self._fix) else self._fix

    def renamed(self, names: Mapping[str, str]) -> ArgError:
        """The same problem in another caller's names (``names``: argument -> the caller's name for it)."""
        return ArgError(self.arg, self.value, self._fix, names)
