"""Reading and writing the tools' files with limits: one helper, so no input can exhaust memory or escape its place.

Every file a tool reads from a user (a stack file, a saved plan, a mutation list) goes through :func:`read_text`
and one of the loaders here: a size limit checked before reading, regular files only (a FIFO would block), UTF-8
with the offending byte's offset named, and for YAML the expansion of aliases and the nesting depth bounded (an
"alias bomb" is a few hundred bytes that expand to billions of nodes) and duplicate keys refused, as Pulumi itself
does (its stack files are read by gopkg.in/yaml.v3, which refuses a repeated mapping key and "excessive aliasing").
Every path a tool writes or edits under a root goes through :func:`confined` (resolved, then checked inside).
A problem is a :class:`FileProblem` whose message names the file; the CLIs answer it with their "unreadable" code.
"""

from __future__ import annotations

import json
import os
import stat
import tomllib
from pathlib import Path
from typing import Any

MAX_STACK_FILE = 1 << 20
"""A Pulumi.<stack>.yaml: 1 MiB (one holds a few dozen keys; Pulumi's own config is kilobytes)."""
MAX_PLAN_FILE = 64 << 20
"""A saved ``plan --json``: 64 MiB (a 450-node plan is a few MB)."""
MAX_YAML_NODES = 100_000
"""YAML nodes after alias expansion (yaml.v3 refuses a document whose aliases expand it past ~400000 decodes)."""
MAX_DEPTH = 100
"""Nesting depth of YAML and JSON (json's recursion limit is near 1000; no config nests more than a few levels)."""


class FileProblem(ValueError):
    """A file that cannot be read as what it should be; the message names the file and says what to do."""


def read_bytes(path: str | os.PathLike[str], *, what: str = "file", max_bytes: int) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``, read once; :class:`FileProblem` otherwise."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise FileProblem(f"{what} {p}: no such file") from None
    except OSError as e:
        raise FileProblem(f"{what} {p}: {e.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise FileProblem(f"{what} {p}: is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise FileProblem(f"{what} {p}: not a regular file (a pipe, socket or device)")
    if st.st_size > max_bytes:
        raise FileProblem(f"{what} {p}: {st.st_size} bytes, more than the {max_bytes} a {what} may have")
    try:
        with open(p, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as e:
        raise FileProblem(f"{what} {p}: {e.strerror}") from None
    if len(data) > max_bytes:  # grew while read
        raise FileProblem(f"{what} {p}: more than the {max_bytes} bytes a {what} may have")
    return data


def read_text(path: str | os.PathLike[str], *, what: str = "file", max_bytes: int) -> str:
    """:func:`read_bytes` decoded as UTF-8 (a NUL byte is binary, not text)."""
    data = read_bytes(path, what=what, max_bytes=max_bytes)
    if b"\x00" in data[:65536]:
        raise FileProblem(f"{what} {path}: binary data, not text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise FileProblem(
            f"{what} {path}: not UTF-8 text (byte {e.start}: {data[e.start : e.start + 1]!r}); save it as UTF-8"
        ) from None


def load_yaml(
    path: str | os.PathLike[str],
    *,
    what: str = "YAML file",
    max_bytes: int = MAX_STACK_FILE,
    max_nodes: int = MAX_YAML_NODES,
    max_depth: int = MAX_DEPTH,
) -> Any:
    """One YAML document, safely: bounded size, alias expansion and depth; duplicate keys refused."""
    return parse_yaml(read_text(path, what=what, max_bytes=max_bytes), f"{what} {path}", max_nodes, max_depth)


def parse_yaml(text: str, name: str, max_nodes: int = MAX_YAML_NODES, max_depth: int = MAX_DEPTH) -> Any:
    """Parse ``text`` (``name`` for messages) as :func:`load_yaml` does."""
    import yaml

    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_nodes(node, name, max_nodes, max_depth)
        return loader.construct_document(node)
    except yaml.YAMLError as e:
        raise FileProblem(
            f"{name}: not valid YAML ({str(e).splitlines()[0] if str(e) else type(e).__name__}{_where(e)})"
        ) from None
    finally:
        loader.dispose()


def _where(e: Exception) -> str:
    mark = getattr(e, "problem_mark", None)
    return f", line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""


def _check_nodes(root: Any, name: str, max_nodes: int, max_depth: int) -> None:
    """Walk the node graph as a reader would see it (aliases expanded): bounded count and depth, no repeated key."""
    import yaml

    count = 0
    stack = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > max_nodes:
            raise FileProblem(
                f"{name}: its aliases expand to more than {max_nodes} nodes (an alias bomb?); "
                "Pulumi refuses such a file too ('excessive aliasing'): write the values out"
            )
        if depth > max_depth:
            raise FileProblem(f"{name}: nested more than {max_depth} levels deep")
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for k, v in node.value:
                if isinstance(k, yaml.ScalarNode):
                    if k.value in seen:
                        raise FileProblem(
                            f"{name}: key {k.value!r} appears twice (lines {seen[k.value]} and "
                            f"{k.start_mark.line + 1}); Pulumi refuses a repeated key: keep one"
                        )
                    seen[k.value] = k.start_mark.line + 1
                stack += [(k, depth + 1), (v, depth + 1)]
        elif isinstance(node, yaml.SequenceNode):
            stack += [(c, depth + 1) for c in node.value]


def load_json(
    path: str | os.PathLike[str], *, what: str = "JSON file", max_bytes: int = MAX_PLAN_FILE, max_depth: int = MAX_DEPTH
) -> Any:
    """One JSON document: bounded size and depth (a deeply nested one would exhaust the parser's recursion)."""
    text = read_text(path, what=what, max_bytes=max_bytes)
    depth = deepest = 0
    in_str = esc = False
    for ch in text:  # a cheap pre-scan: json.loads recurses per level
        if in_str:
            esc, in_str = (False, True) if esc else (ch == "\\", ch != '"')
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if deepest > max_depth:
                raise FileProblem(f"{what} {path}: nested more than {max_depth} levels deep")
        elif ch in "]}":
            depth -= 1
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise FileProblem(f"{what} {path}: not JSON ({e.msg}, line {e.lineno} column {e.colno})") from None


def load_toml(path: str | os.PathLike[str], *, what: str = "TOML file", max_bytes: int = 4 << 20) -> dict[str, Any]:
    """One TOML document of bounded size."""
    text = read_text(path, what=what, max_bytes=max_bytes)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise FileProblem(f"{what} {path}: not TOML ({e})") from None


def confined(root: str | os.PathLike[str], relative: str, *, what: str = "path") -> Path:
    """``root / relative`` resolved (symlinks and ``..`` followed), refused unless it stays inside ``root``."""
    if not isinstance(relative, str) or not relative or "\x00" in relative:
        raise FileProblem(f"{what} {relative!r}: must be a relative path inside {root}")
    base = Path(root).resolve()
    if Path(relative).is_absolute():
        raise FileProblem(f"{what} {relative!r}: an absolute path; name a file relative to {base}")
    target = (base / relative).resolve()
    if not target.is_relative_to(base):
        raise FileProblem(f"{what} {relative!r}: resolves to {target}, outside {base}; name a file inside it")
    return target
