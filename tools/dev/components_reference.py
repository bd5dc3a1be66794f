"""The components reference (docs/components-reference.md): every ``*Args`` class of the library, by layer folder,
with each argument's type, default and docstring, read from the source as declared.

``ray-efa-eks config-schema --write`` regenerates it with the other generated copies, and a test fails when it is
stale; a field without a docstring stops the generator (naming the class and field), so every input is documented
where it is declared."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS_FILE = "docs/components-reference.md"
BEGIN = "<!-- components reference: generated from the *Args classes by config-schema --write -->\n"
END = "<!-- end of components reference -->\n"
SKIPPED = {"EfaRayClusterArgs": "its arguments are the stack config keys: [Configuration reference](configuration.md)"}
"""``*Args`` classes documented elsewhere."""


@dataclass(frozen=True)
class Arg:
    name: str
    type: str
    default: str | None
    """The default as written (None: required)."""
    doc: str


@dataclass(frozen=True)
class ArgsClass:
    module: str
    """Dotted path under components/ (``nodes.node_groups``)."""
    name: str
    doc: str
    args: tuple[Arg, ...]


EMPTY = {"dict": "{}", "list": "[]"}


def _default(node: ast.expr | None, constants: dict[str, str]) -> str | None:
    """The default as written; a module constant by its value (``CHART_VERSION`` -> ``'9.59.0'``)."""
    if node is None:
        return None
    if isinstance(node, ast.Call) and ast.unparse(node.func) == "field":
        for kw in node.keywords:
            if kw.arg == "default_factory":
                f = kw.value
                if isinstance(f, ast.Lambda):
                    return _default(f.body, constants)
                return EMPTY.get(ast.unparse(f), f"{ast.unparse(f)}()")
            if kw.arg == "default":
                return _default(kw.value, constants)
        return None
    if isinstance(node, ast.Name) and node.id in constants:
        return constants[node.id]
    return ast.unparse(node)


def _constants(tree: ast.Module) -> dict[str, str]:
    """Module-level names bound to a literal."""
    out = {}
    for n in tree.body:
        if (
            isinstance(n, ast.Assign)
            and len(n.targets) == 1
            and isinstance(n.targets[0], ast.Name)
            and isinstance(n.value, ast.Constant)
        ):
            out[n.targets[0].id] = ast.unparse(n.value)
    return out


def args_classes(components: Path) -> list[ArgsClass]:
    """Every ``*Args`` class under ``components`` with its fields; ValueError names a field without a docstring."""
    out: list[ArgsClass] = []
    missing: list[str] = []
    for path in sorted(components.rglob("*.py")):
        module = ".".join(path.relative_to(components).with_suffix("").parts)
        tree = ast.parse(path.read_text())
        constants = _constants(tree)
        for node in tree.body:
            if not (isinstance(node, ast.ClassDef) and node.name.endswith("Args")) or node.name in SKIPPED:
                continue
            args = []
            for i, s in enumerate(node.body):
                if not (isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)):
                    continue
                nxt = node.body[i + 1] if i + 1 < len(node.body) else None
                doc = (
                    nxt.value.value
                    if (
                        isinstance(nxt, ast.Expr)
                        and isinstance(nxt.value, ast.Constant)
                        and isinstance(nxt.value.value, str)
                    )
                    else None
                )
                if doc is None:
                    missing.append(f"{node.name}.{s.target.id} (components/{path.relative_to(components)}:{s.lineno})")
                    continue
                args.append(Arg(s.target.id, ast.unparse(s.annotation), _default(s.value, constants), doc))
            out.append(ArgsClass(module, node.name, ast.get_docstring(node) or "", tuple(args)))
    if missing:
        raise ValueError(
            "every *Args field needs a docstring under it (the components reference is built from "
            f"them): {', '.join(missing)}"
        )
    return out


def _cell(text: str) -> str:
    """One table cell: one line, reST roles and literals as Markdown code, ``|`` escaped (GitHub's tables)."""
    text = re.sub(r":(?:class|func|data|meth|attr):`~?\.?([^`]+)`", r"`\1`", text)
    text = text.replace("``", "`")
    return re.sub(r"\s+", " ", text).strip().replace("|", "\\|")


def render(components: Path) -> str:
    """The generated part of the page: one section per layer folder, one table per ``*Args`` class."""
    classes = args_classes(components)
    lines: list[str] = []
    folder = None
    for c in sorted(classes, key=lambda c: (c.module.count(".") == 0, c.module, c.name)):
        here = c.module.rpartition(".")[0] or "(top)"
        if here != folder:
            folder = here
            lines += [f"## {folder}/" if folder != "(top)" else "## components/", ""]
        lines += [
            f"### `{c.name}`",
            "",
            f"`ray_efa_eks.components.{c.module}`: {_cell(c.doc)}",
            "",
            "| argument | type | default | description |",
            "|---|---|---|---|",
        ]
        for a in c.args:
            default = "required" if a.default is None else f"`{_cell(a.default)}`"
            lines.append(f"| `{a.name}` | `{_cell(a.type)}` | {default} | {_cell(a.doc)} |")
        lines.append("")
    return "\n".join(lines)


def replace(text: str, components: Path = ROOT / "components") -> str:
    """``text`` (the page) with its generated part rendered from ``components`` now."""
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
    if not pattern.search(text):
        raise ValueError(f"{DOCS_FILE} lacks the components reference markers")
    return pattern.sub(lambda _: BEGIN + "\n" + render(components) + END, text, count=1)
