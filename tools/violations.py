"""What a plan rule reports: :class:`Violation`, :class:`Rule` and their severities.

A leaf module: the rule modules (rules, security_rules, queue_rules) import it, and it imports none of them, so no
rule module needs a function-level import to reach the type another one defines.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

ERROR, WARNING = "error", "warning"


@dataclass(frozen=True)
class Violation:
    """One broken rule on one resource."""

    rule: str
    resource: str
    """``type name`` of the offending resource (``stack`` for a stack-wide problem)."""
    problem: str
    fix: str
    urn: str | None = None
    severity: str = ERROR
    """``error`` fails the plan and the policy pack; ``warning`` (a preference AWS does not enforce) is shown only."""

    def line(self) -> str:
        tag = f"{self.rule} (warning)" if self.severity == WARNING else self.rule
        return f"[{tag}] {self.resource}: {self.problem}. Fix: {self.fix}"

    def to_json(self) -> dict[str, str | None]:
        return {
            "rule": self.rule,
            "resource": self.resource,
            "problem": self.problem,
            "fix": self.fix,
            "severity": self.severity,
        }


@dataclass(frozen=True)
class Rule:
    """A named check over a whole stack."""

    id: str
    title: str
    """What the rule guarantees when it passes."""
    fix: str
    """The general fix (each violation also says its own)."""
    check: Callable[[Any], list[Violation]]
    """Takes a :class:`~.layout.Stack`."""
    severity: str = ERROR
    """``warning``: a style preference (AWS accepts the shape); the plan shows it and does not fail on it."""


def errors(violations: Iterable[Violation | dict]) -> list:
    """The violations that fail a plan (warnings left out); plain dicts (a plan's JSON) without severity count."""
    return [v for v in violations if (v.get("severity", ERROR) if isinstance(v, dict) else v.severity) != WARNING]


def violation(rule: str, r: Any, problem: str, fix: str, severity: str = ERROR) -> Violation:
    """A violation of ``rule`` on resource ``r`` (a :class:`~.layout.Resource`; None for the stack as a whole)."""
    return Violation(
        rule, r.label if r is not None else "stack", problem, fix, r.urn if r is not None else None, severity
    )
