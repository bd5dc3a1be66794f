"""Server-side apply's field ownership, enough to say whether an apply conflicts (kubernetes.io "Server-Side Apply":
Conflicts, Merge strategy), read against a CRD's structural schema.

A list without ``x-kubernetes-list-type`` is ``atomic`` (the default): whoever last changed any part of it owns all
of it. Pulumi's apply is forced or not as pulumi-kubernetes decides (provider/pkg/await/await.go ``patchForce``): the
``pulumi.com/patchForce`` annotation or the provider's ``enablePatchForce``.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

PULUMI = "pulumi-kubernetes"


class Conflict(Exception):
    """The API server's 409: ``fields`` are owned by ``managers`` with other values."""

    def __init__(self, fields: list[str], managers: set[str]):
        super().__init__(f"Apply failed with conflicts: {', '.join(fields)} owned by {', '.join(sorted(managers))}")
        self.fields, self.managers = fields, managers


def _child(schema: dict[str, Any] | None, key: Any) -> dict[str, Any] | None:
    if not schema:
        return None
    if schema.get("type") == "array":
        return schema.get("items")
    return (schema.get("properties") or {}).get(key) or schema.get("additionalProperties") or None


def _paths(value: Any, schema: dict[str, Any] | None, prefix: tuple = ()) -> dict[tuple, Any]:
    """Leaf paths -> values, an atomic list (or a list of unknown type) being one leaf."""
    if isinstance(value, dict):
        out: dict[tuple, Any] = {}
        for k, v in value.items():
            out.update(_paths(v, _child(schema, k), prefix + (k,)))
        return out or {prefix: {}}
    if isinstance(value, list):
        kind = (schema or {}).get("x-kubernetes-list-type", "atomic")
        if kind == "atomic":
            return {prefix: value}
        out = {}
        for i, v in enumerate(value):  # map/set lists: elements own their fields (keyed by index here)
            out.update(_paths(v, _child(schema, i), prefix + (i,)))
        return out
    return {prefix: value}


def defaulted(value: Any, schema: dict[str, Any] | None) -> Any:
    """``value`` with the schema's ``default`` filled in where a field is missing, as the API server stores it."""
    if isinstance(value, dict):
        out = {k: defaulted(v, _child(schema, k)) for k, v in value.items()}
        for k, sub in ((schema or {}).get("properties") or {}).items():
            if k not in out and "default" in sub:
                out[k] = copy.deepcopy(sub["default"])
        return out
    if isinstance(value, list):
        return [defaulted(v, _child(schema, i)) for i, v in enumerate(value)]
    return value


class Server:
    """One object on an API server: its value and which manager owns each leaf path."""

    def __init__(self, schema: dict[str, Any]):
        self.schema = schema
        self.obj: dict[str, Any] = {}
        self.owners: dict[tuple, str] = {}

    def apply(self, obj: dict[str, Any], manager: str = PULUMI, force: bool = False) -> None:
        """A server-side apply of ``obj`` (metadata and spec)."""
        spec_schema = {"properties": {"spec": self.schema["properties"]["spec"]}}
        obj = {**obj, "spec": defaulted(obj.get("spec", {}), self.schema["properties"]["spec"])}
        mine = _paths({"spec": obj["spec"]}, spec_schema)
        live = _paths({"spec": self.obj.get("spec", {})}, spec_schema)
        clashing = [p for p, v in mine.items() if self.owners.get(p, manager) != manager and live.get(p) != v]
        if clashing and not force:
            raise Conflict([".".join(map(str, p)) for p in clashing], {self.owners[p] for p in clashing})
        for p in [p for p, m in self.owners.items() if m == manager and p not in mine]:
            del self.owners[p]  # a field dropped from the apply is released
        for p in mine:
            self.owners[p] = manager
        self.obj = copy.deepcopy(obj)

    def json_patch(self, ops: list[dict[str, Any]], manager: str) -> None:
        """An Update with a JSON patch (what Ray's KubeRay node provider sends): the changed leaves become its own."""
        schema = {"properties": {"spec": self.schema["properties"]["spec"]}}
        before = _paths({"spec": self.obj.get("spec", {})}, schema)
        self.obj = jsonpatch.apply_patch(self.obj, ops)
        after = _paths({"spec": self.obj.get("spec", {})}, schema)
        for p in set(before) | set(after):
            if before.get(p) != after.get(p):
                self.owners[p] = manager


def pulumi_forces(obj: dict[str, Any], provider_patch_force: bool = False) -> bool:
    """pulumi-kubernetes' ``patchForce`` for an update: the annotation, else the provider's setting."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get("pulumi.com/patchForce", "")).lower() == "true" or provider_patch_force
