"""A plan and how making one fails: the resource tree, settings and rule results of one stack, saved as
``--json`` and read back for ``--diff``."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any



EXIT_UNREADABLE = 3
"""An input the plan needs could not be read (stack file, git ref, saved plan)."""


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

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "stack": self.stack, "region": self.region, "error": self.error,
                "config": self.config, "resources": self.resources, "settings": self.settings,
                "rules": {"checked": self.checked, "violations": self.violations}}

    @classmethod
    def from_json(cls, d: dict[str, Any], source: str | None = None) -> "Plan":
        try:
            return cls(source or d["source"], d["stack"], d["region"], d["resources"], d["settings"],
                       d["rules"]["violations"], d["rules"]["checked"], d.get("error"), d.get("config", {}))
        except (KeyError, TypeError) as e:
            raise PlanError(f"not a plan made by `python -m ray_efa_eks.tools.plan --json` (missing {e})") from None

    @property
    def exit_code(self) -> int:
        return 2 if self.error else (1 if self.errors else 0)

    @property
    def errors(self) -> list[dict[str, Any]]:
        """The violations that fail the plan: a ``warning`` rule's (a preference AWS accepts) does not."""
        return [v for v in self.violations if v.get("severity", "error") != "warning"]


def load_plan(path: str) -> Plan:
    """A saved ``--json`` plan; :class:`PlanError` naming the file and the problem."""
    made_by = "save one with: ray-efa-eks plan --json > plan.json"
    try:
        data = json.loads(Path(path).read_bytes().decode("utf-8"))
    except UnicodeDecodeError as e:
        raise PlanError(f"{path}: not UTF-8 text (byte {e.start}), so not a saved plan; {made_by}") from None
    except OSError as e:
        raise PlanError(f"{path}: cannot read a plan ({e.strerror or e}); {made_by}") from None
    except json.JSONDecodeError as e:
        raise PlanError(f"{path}: not JSON ({e}), so not a saved plan; {made_by}") from None
    if not isinstance(data, dict):
        raise PlanError(f"{path}: holds a JSON {type(data).__name__}, not a plan object; {made_by}")
    try:
        return Plan.from_json(data, source=path)
    except PlanError as e:
        raise PlanError(f"{path}: {e}") from None


# -- settings ------------------------------------------------------------------------------------------------------
