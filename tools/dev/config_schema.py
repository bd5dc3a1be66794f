"""One source of truth for the stack's settings: ``StackConfig`` -> Pulumi.yaml, EfaRayClusterArgs and docs/configuration.md.

``StackConfig`` (components/config/config.py) declares every key with its type, default and docstring. Two
copies must exist as text because their readers parse files, not Python objects: the ``config:``
block of ``Pulumi.yaml`` (``pulumi config`` shows its types, defaults and descriptions) and the
``EfaRayClusterArgs`` TypedDict in components/stack.py (the Pulumi SDK infers the multi-language
schema from its annotations and docstrings in the source); the table in docs/configuration.md is the third. This tool writes them from StackConfig
and checks that they are up to date (a test runs the check). It also renders docs/components-reference.md from the
components' ``*Args`` classes (tools/dev/components_reference.py), so one command keeps every generated reference current.

    python -m ray_efa_eks.tools.dev.config_schema --check   # exit 1 and the differences when out of date
    python -m ray_efa_eks.tools.dev.config_schema --write   # rewrite both copies
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
import typing
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

from . import components_reference
from ...efacheck.cli import ArgumentParser, run_cli
from ...components.config.config import NAMESPACE, StackConfig
from ...components.config.config_fields import EFFECTS, Live

ROOT = Path(__file__).resolve().parents[2]
BEGIN = "    # -- generated from StackConfig by `python -m ray_efa_eks.tools.dev.config_schema --write`; do not edit --"
END = "    # -- end of generated keys --"
DOCS_FILE = "docs/configuration.md"
"""The configuration reference page; its table is generated between the markers below."""
NOT_IN_PROJECT_CONFIG = ("region",)
"""Keys read from another namespace (``aws:region``), so not declared under ``ray-efa-eks:``."""
PULUMI_TYPES = {bool: "boolean", int: "integer", str: "string", float: "string", list: "array"}
"""Pulumi project config knows string, integer, boolean and array: a float is declared as a string."""


def docstrings() -> dict[str, str]:
    """Field docstrings of StackConfig, read from its source (the string right after each annotated field)."""
    tree = ast.parse(inspect.getsource(StackConfig))
    body = tree.body[0].body  # type: ignore[attr-defined]
    out: dict[str, str] = {}
    for node, nxt in zip(body, body[1:]):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            out[node.target.id] = " ".join(nxt.value.value.split())
    return out


def keys() -> list[dict[str, Any]]:
    """Each key: name, Python type (without None), default, description, allowed values, live-change note.

    A key of the project config declared without a live-change note is refused here, naming it, so the reference
    never shows a key whose effect on a deployed stack nobody wrote down.
    """
    hints = typing.get_type_hints(StackConfig)
    docs = docstrings()
    out = []
    for f in fields(StackConfig):
        typ = hints[f.name]
        args = [a for a in typing.get_args(typ) if a is not type(None)]
        if typing.get_origin(typ) in (typing.Union, getattr(__import__("types"), "UnionType")) and len(args) == 1:
            typ = args[0]
        default = f.default_factory() if f.default_factory is not MISSING else f.default
        if f.name not in docs:
            raise ValueError(
                f"StackConfig.{f.name} has no docstring; write one under the field (it becomes the "
                "description in Pulumi.yaml and in the package schema)"
            )
        live = f.metadata.get("live")
        if f.name not in NOT_IN_PROJECT_CONFIG and not isinstance(live, Live):
            raise ValueError(
                f"StackConfig.{f.name} has no live-change note: declare it with components/config/config_fields.py's "
                f"key(DEFAULT, live=live(EFFECT, ..., note=...)), EFFECT one of {', '.join(EFFECTS)} "
                "(what the next `pulumi up` does to a deployed stack when the key changes; it becomes "
                f"the last column of {DOCS_FILE})"
            )
        out.append(
            {
                "name": f.name,
                "type": typ,
                "default": default,
                "description": docs[f.name],
                "allowed": f.metadata.get("allowed"),
                "live": live,
            }
        )
    return out


def _base(typ: Any) -> type:
    return typing.get_origin(typ) or typ


def pulumi_yaml_config() -> dict[str, dict[str, Any]]:
    """The ``config:`` declarations for Pulumi.yaml (project namespace, so keys are written without it)."""
    out: dict[str, dict[str, Any]] = {}
    for k in keys():
        if k["name"] in NOT_IN_PROJECT_CONFIG:
            continue
        base = _base(k["type"])
        decl: dict[str, Any] = {"type": PULUMI_TYPES[base], "description": k["description"]}
        if base is list:
            decl["items"] = {"type": "string"}
        if k["default"] is not None:
            decl["default"] = str(k["default"]) if base is float else k["default"]
        out[k["name"]] = decl
    return out


def _yaml_scalar(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, list):
        return "[" + ", ".join(_yaml_scalar(x) for x in v) + "]"
    s = str(v)
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_pulumi_yaml_block() -> str:
    """The declarations as YAML lines under ``config:`` (two-space indent), stable and diff-friendly."""
    lines = []
    for name, d in pulumi_yaml_config().items():
        lines.append(f"  {name}:")
        lines.append(f"    type: {d['type']}")
        if "items" in d:
            lines.append("    items:")
            lines.append("      type: string")
        if "default" in d:
            lines.append(f"    default: {_yaml_scalar(d['default'])}")
        lines.append(f"    description: {_yaml_scalar(d['description'])}")
    return "\n".join(lines) + "\n"


def render_args_block() -> str:
    """The EfaRayClusterArgs body: one annotated key and its docstring per StackConfig field."""
    lines = [BEGIN]
    for k in keys():
        typ = k["type"]
        ann = "list[str]" if _base(typ) is list else _base(typ).__name__
        desc = k["description"].replace('"""', "'''")
        lines.append(f"    {k['name']}: {ann}")
        lines.append(f'    """{desc}"""')
    lines.append(END)
    return "\n".join(lines) + "\n"


PULUMI_YAML_MARK = (
    "  # Declared keys: generated from StackConfig (python -m ray_efa_eks.tools.dev.config_schema --write)\n"
)


def _replace_pulumi_yaml(text: str) -> str:
    """Swap the generated part of Pulumi.yaml's config block (everything after the marker line)."""
    head, sep, _ = text.partition(PULUMI_YAML_MARK)
    if not sep:
        raise ValueError(
            f"Pulumi.yaml lacks the marker line {PULUMI_YAML_MARK.strip()!r} at the end of its config block"
        )
    return head + PULUMI_YAML_MARK + render_pulumi_yaml_block()


def _replace_args(text: str) -> str:
    pattern = re.compile(re.escape(BEGIN) + r"\n.*?" + re.escape(END) + r"\n", re.S)
    if not pattern.search(text):
        raise ValueError("components/stack.py lacks the generated EfaRayClusterArgs block markers")
    return pattern.sub(lambda _: render_args_block(), text, count=1)


DOCS_BEGIN = "<!-- config table: generated from StackConfig by config_schema --write -->\n"
DOCS_END = "<!-- end of config table -->\n"


def _allowed(k: dict[str, Any]) -> str:
    allowed = k["allowed"]
    if allowed is None:
        return "true, false" if _base(k["type"]) is bool else ""
    return ", ".join(f"`{v}`" for v in allowed) if isinstance(allowed, tuple) else allowed


DISRUPTIVE = ("gpu-nodes", "system-node", "ray-pods", "network", "cluster")
"""Effects that stop or replace something running: shown in bold."""


def _live(live: Live) -> str:
    said = ", ".join(f"**{EFFECTS[e][0]}**" if e in DISRUPTIVE else EFFECTS[e][0] for e in live.effects)
    return f"{said}: {live.note}" if live.note else said


def render_effects_legend() -> str:
    """What each word of the last column means."""
    return (
        "\n".join(
            f"- **{label}**: {meaning}." if e in DISRUPTIVE else f"- {label}: {meaning}."
            for e, (label, meaning) in EFFECTS.items()
        )
        + "\n"
    )


def render_docs_table() -> str:
    """The configuration table of docs/configuration.md: key, type, default, allowed values, description and what a
    change does to a deployed stack."""
    rows = [
        "| key | type | default | allowed values | description | on a live stack (next `pulumi up`) |",
        "|---|---|---|---|---|---|",
    ]
    for k in keys():
        if k["name"] in NOT_IN_PROJECT_CONFIG:
            continue
        d = pulumi_yaml_config()[k["name"]]
        default = (
            ""
            if k["default"] is None
            else (", ".join(k["default"]) if isinstance(k["default"], list) else _yaml_scalar(k["default"]).strip('"'))
        )
        typ = "number (string in Pulumi.yaml)" if _base(k["type"]) is float else d["type"]
        cells = [f"`{k['name']}`", typ, default, _allowed(k), k["description"], _live(k["live"])]
        rows.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(rows) + "\n"


def _replace_docs(text: str) -> str:
    pattern = re.compile(re.escape(DOCS_BEGIN) + r".*?" + re.escape(DOCS_END), re.S)
    if not pattern.search(text):
        raise ValueError(f"{DOCS_FILE} lacks the config table markers")
    block = (
        "What the last column's words mean (`pulumi up` after changing the key on a deployed stack):\n\n"
        + render_effects_legend()
        + "\n"
        + render_docs_table()
    )
    return pattern.sub(lambda _: DOCS_BEGIN + block + DOCS_END, text, count=1)


TARGETS = {
    "Pulumi.yaml": _replace_pulumi_yaml,
    "components/stack.py": _replace_args,
    DOCS_FILE: _replace_docs,
    components_reference.DOCS_FILE: components_reference.replace,
}
"""Each generated copy and how it is rendered (the components reference from the ``*Args`` classes)."""


def project_root(start: Path) -> Path | None:
    """The checkout ``start`` is in: the nearest directory (itself or above) with every file of :data:`TARGETS`.

    Never the installed package's parent: ``--write`` run from a project must rewrite that project's copies.
    """
    for d in (start, *start.parents):
        if all((d / rel).is_file() for rel in TARGETS):
            return d
    return None


def stale(root: Path = ROOT) -> list[str]:
    """Files whose generated part differs from what StackConfig says now."""
    return [rel for rel, fn in TARGETS.items() if fn((root / rel).read_text()) != (root / rel).read_text()]


def write(root: Path = ROOT) -> list[str]:
    changed = stale(root)
    for rel in changed:
        path = root / rel
        path.write_text(TARGETS[rel](path.read_text()))
    return changed


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    p = ArgumentParser(
        prog=prog or "python -m ray_efa_eks.tools.dev.config_schema",
        description="Keep Pulumi.yaml's config block, EfaRayClusterArgs and the configuration and "
        "components references equal to what the code declares.",
        exit_codes="config-schema",
    )
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--check", action="store_true", help="exit 1 when a copy is out of date")
    g.add_argument("--write", action="store_true", help="rewrite the copies")
    p.add_argument(
        "--root",
        type=Path,
        default=None,
        help="the project checkout (default: the directory above the current one holding Pulumi.yaml "
        "and components/stack.py)",
    )
    a = p.parse_args(argv)
    root = a.root or project_root(Path.cwd())
    if root is None or not all((root / rel).is_file() for rel in TARGETS):
        where = a.root or Path.cwd()
        print(
            f"error: {where} is not a ray-efa-eks checkout (no {', '.join(TARGETS)}); run from the project "
            "root or pass --root DIR (an installed package has no copies to check)",
            file=sys.stderr,
        )
        return 2
    try:
        if a.write:
            changed = write(root)
            print("rewrote: " + ", ".join(changed) if changed else "up to date")
            return 0
        bad = stale(root)
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if bad:
        print(
            f"out of date with the code (StackConfig, {NAMESPACE}:, and the *Args classes): {', '.join(bad)}; "
            "run python -m ray_efa_eks.tools.dev.config_schema --write",
            file=sys.stderr,
        )
        return 1
    print("up to date")
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main, None, "python -m ray_efa_eks.tools.dev.config_schema"))
