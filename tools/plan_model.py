"""A plan and how making one fails: the resource tree, settings and rule results of one stack, saved as
``--json`` and read back for ``--diff``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class PlanError(Exception):
    """A plan could not be made for reasons outside the program (git, files): exit 3."""


class UsageError(PlanError):
    """Bad command-line arguments: exit 64."""


class MissingStack(PlanError):
    """No ``Pulumi.<stack>.yaml`` beside the program: a mistyped stack name must not plan the defaults."""


@dataclass
class Plan:
    """One offline plan: where it came from, the resource tree, the settings, the rule results."""

    source: str
    stack: str
    region: str
    resources: list[dict[str, Any]] = field(default_factory=list)
    """``{"type", "name", "parent"}`` with the parent as ``type name``."""
    settings: dict[str, Any] = field(default_factory=dict)
    violations: list[dict[str, Any]] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)
    error: str | None = None
    """The program's own error (a ConfigError...), when it failed."""
    config: dict[str, Any] = field(default_factory=dict)
    """Every config key the plan used (stack file, then --config), secret values as ``[secret]``."""
    effective: dict[str, Any] = field(default_factory=dict)
    """Every key the program runs with: key -> [value, source] (the stack file, --config or default)."""
    hooked: dict[str, Any] = field(default_factory=dict)
    """``type name`` -> inputs of each resource the program guards with a ``before_update`` hook (the launch
    templates, the RayCluster): the diff runs the same checks on them as ``pulumi up`` (plan_diff.hook_verdicts)."""
    absent: bool = False
    """The stack file or the program does not exist on this side (a stack or program the change adds): ``error``
    says which, and nothing failed, so a diff against it is not a failed base (not saved with ``--json``)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "stack": self.stack,
            "region": self.region,
            "error": self.error,
            "config": self.config,
            "effective": self.effective,
            "resources": self.resources,
            "settings": self.settings,
            "rules": {"checked": self.checked, "violations": self.violations},
            "hooked": self.hooked,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any], source: str | None = None) -> "Plan":
        problem = _shape_problem(d)
        if problem:
            raise PlanError(f"not a plan made by `python -m ray_efa_eks.tools.plan --json` ({problem})")
        try:
            hooked = d.get("hooked") if isinstance(d.get("hooked"), dict) else {}  # plans saved before it: none
            return cls(
                source or d["source"],
                d["stack"],
                d["region"],
                d["resources"],
                d["settings"],
                d["rules"]["violations"],
                d["rules"]["checked"],
                d.get("error"),
                d.get("config", {}),
                d.get("effective") if isinstance(d.get("effective"), dict) else {},
                hooked,
            )
        except (KeyError, TypeError) as e:
            raise PlanError(f"not a plan made by `python -m ray_efa_eks.tools.plan --json` (missing {e})") from None

    @property
    def exit_code(self) -> int:
        return 2 if self.error else (1 if self.errors else 0)

    @property
    def errors(self) -> list[dict[str, Any]]:
        """The violations that fail the plan: a ``warning`` rule's (a preference AWS accepts) does not."""
        return [v for v in self.violations if v.get("severity", "error") != "warning"]


_STR_OR_NONE = (str, type(None))
PLAN_SHAPE: dict[str, Any] = {
    "source": str,
    "stack": str,
    "region": str,
    "error": _STR_OR_NONE,
    "config": dict,
    "resources": list,
    "settings": dict,
    "rules": dict,
}
"""Each key of a saved plan and its JSON type (what :meth:`Plan.to_json` writes)."""
VIOLATION_KEYS = ("rule", "resource", "problem", "fix")


def _shape_problem(d: Any) -> str | None:
    """What makes ``d`` no saved plan (a missing key or a wrong type anywhere the diff reads), or None."""
    if not isinstance(d, dict):
        return f"a JSON {type(d).__name__}, not an object"
    for key, kind in PLAN_SHAPE.items():
        if key == "error" and key not in d:
            continue
        if key == "config" and key not in d:
            continue
        if key not in d:
            return f"missing {key!r}"
        if not isinstance(d[key], kind) or isinstance(d[key], bool):
            return f"{key!r} is a {type(d[key]).__name__}"
    for i, r in enumerate(d["resources"]):
        if not (
            isinstance(r, dict)
            and isinstance(r.get("type"), str)
            and isinstance(r.get("name"), str)
            and isinstance(r.get("parent"), _STR_OR_NONE)
        ):
            return f"resources[{i}] is not {{type, name, parent}} strings"
    rules_ = d["rules"]
    if not isinstance(rules_.get("checked"), list) or not all(isinstance(c, str) for c in rules_["checked"]):
        return "rules.checked is not a list of rule ids"
    if not isinstance(rules_.get("violations"), list):
        return "rules.violations is not a list"
    for i, v in enumerate(rules_["violations"]):
        if not (isinstance(v, dict) and all(isinstance(v.get(k), str) for k in VIOLATION_KEYS)):
            return f"rules.violations[{i}] is not {{{', '.join(VIOLATION_KEYS)}}} strings"
    for k, v in d["settings"].items():
        if isinstance(v, dict) and not all(
            isinstance(f, (dict, str, int, float, bool, list, type(None))) for f in v.values()
        ):
            return f"settings.{k} holds a value that is no JSON value"
    return None


def load_plan(path: str) -> Plan:
    """A saved ``--json`` plan; :class:`PlanError` naming the file and the problem."""
    from .files import FileProblem, load_json

    made_by = "save one with: ray-efa-eks plan --json > plan.json"
    try:
        data = load_json(path, what="saved plan")
    except FileProblem as e:
        raise PlanError(f"{e}; {made_by}") from None
    if not isinstance(data, dict):
        raise PlanError(f"{path}: holds a JSON {type(data).__name__}, not a plan object; {made_by}")
    try:
        return Plan.from_json(data, source=path)
    except PlanError as e:
        raise PlanError(f"{path}: {e}") from None


# -- settings ------------------------------------------------------------------------------------------------------
