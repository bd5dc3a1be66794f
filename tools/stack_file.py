"""The stack's ``Pulumi.<stack>.yaml`` and ``--config`` overrides: the config a plan runs the program with, every
key as shown (secrets as ``[secret]``: never decrypted offline)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .files import MAX_STACK_FILE, FileProblem, load_yaml
from .plan_model import MissingStack, PlanError, UsageError

PROJECT = "ray-efa-eks"
DEFAULT_REGION = "us-east-1"
STACK_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")
"""Pulumi stack names: letters, digits, '-', '_', '.', at most 100 characters (tokens.ValidateStackName)."""
SECRET = "[secret]"
"""How an encrypted config value is shown: never skipped, never decrypted."""


@dataclass
class StackFile:
    """What ``Pulumi.<stack>.yaml`` says: values the program gets, and every key as shown (secrets ``[secret]``)."""

    values: dict[str, Any]
    region: str
    shown: dict[str, Any]
    secrets: list[str]


def read_stack(root: Path, stack: str, *, defaults: bool = False) -> StackFile:
    """``Pulumi.<stack>.yaml`` in ``root``: :class:`MissingStack` when absent (unless ``defaults``).

    A secret (``secure:``) cannot be decrypted offline: it is shown as ``[secret]`` and left out of the
    program's config, so the program uses that key's default.
    """
    if not STACK_NAME.fullmatch(stack):
        raise UsageError(
            f"--stack {stack[:80]!r}{'...' if len(stack) > 80 else ''}: not a Pulumi stack name (1-100 "
            "letters, digits, '-', '_' or '.'; pulumi/sdk/go/common/tokens ValidateStackName)"
        )
    path = root / f"Pulumi.{stack}.yaml"
    if not path.exists():
        if defaults:
            return StackFile({}, DEFAULT_REGION, {}, [])
        have = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in root.glob("Pulumi.*.yaml"))
        raise MissingStack(
            f"stack {stack!r} has no {path.name} in {root} (stacks here: {', '.join(have) or 'none'}); "
            f"check --stack, or pass --defaults to plan a stack without config"
        )
    data = _load_stack_yaml(path)
    values, shown, secrets, region = {}, {}, [], DEFAULT_REGION
    for key, value in data.items():
        if isinstance(value, dict) and "secure" in value:
            shown[key] = SECRET
            secrets.append(key)
            continue
        if isinstance(value, dict) and "value" in value:
            value = value["value"]
        shown[key] = value
        if key == "aws:region":
            region = str(value)
        else:  # every key reaches the program, as under `pulumi up` (it warns about those it never reads)
            values[key] = value if isinstance(value, str) else json.dumps(value)
    return StackFile(values, region, shown, secrets)


def _load_stack_yaml(path: Path) -> dict[str, Any]:
    """The ``config:`` mapping of a stack file; :class:`PlanError` (exit 3) naming the file and the problem.

    Pulumi's own reader needs the same shape: a mapping whose ``config`` is a mapping of ``namespace:key`` to a
    value (pulumi/sdk/go/common/workspace/project.go, ``ProjectStack.Config``).
    """
    fix = "it should look like: config:\n  ray-efa-eks:gpuNodeCount: 2"
    if path.is_dir():
        raise PlanError(f"{path}: is a directory, not a stack file; {fix}")
    try:  # size, encoding, alias expansion, depth and repeated keys bounded as Pulumi's own reader does
        data = load_yaml(path, what="stack file", max_bytes=MAX_STACK_FILE)
    except FileProblem as e:
        raise PlanError(f"{e}; {fix}" if "binary" in str(e) else str(e)) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise PlanError(f"{path}: the top level is a {type(data).__name__}, not a mapping; {fix}")
    config = data.get("config")
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise PlanError(
            f"{path}: config is {config!r} (a {type(config).__name__}), not a mapping of keys to values; {fix}"
        )
    return config


def stack_config(root: Path, stack: str, *, defaults: bool = False) -> tuple[dict[str, Any], str]:
    """(config, region) for the program from ``Pulumi.<stack>.yaml`` in ``root`` (see :func:`read_stack`)."""
    sf = read_stack(root, stack, defaults=defaults)
    return sf.values, sf.region


def shown_config(sf: StackFile, overrides: dict[str, str] | None, region: str) -> dict[str, Any]:
    """Every key the stack file or --config sets (what a diff compares; :func:`effective_config` adds defaults)."""
    shown = {**sf.shown, **(overrides or {}), "aws:region": region}
    return dict(sorted(shown.items()))


def effective_config(
    sf: StackFile, overrides: dict[str, str] | None, region: str, stack: str = "<stack>"
) -> dict[str, list[Any]]:
    """key -> [value, source] for everything the plan runs with: ``Pulumi.<stack>.yaml``, ``--config`` or
    ``default``; keys the program never reads (:func:`~ray_efa_eks.components.config.unread_keys`) say so."""
    from ..components.config.config import KEYS, NAMESPACE, StackConfig, unread_keys

    overrides = overrides or {}
    defaults = StackConfig()
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    file = f"Pulumi.{stack}.yaml"
    for key in sorted(KEYS - {"region"}):
        values[f"{NAMESPACE}:{key}"] = getattr(defaults, key)
        sources[f"{NAMESPACE}:{key}"] = "default"
    for key, value in sf.shown.items():
        values[key] = value
        sources[key] = f"{file} (encrypted)" if value == SECRET else file
    for key, value in overrides.items():
        values[key], sources[key] = value, "--config"
    values["aws:region"] = region
    if "aws:region" not in sources:
        sources["aws:region"] = file if "aws:region" in sf.shown else "default"
    if region != sf.region and region != sf.shown.get("aws:region"):
        sources["aws:region"] = "--config"
    for key, _ in unread_keys(values):
        sources[key] += ", never read"
    return {k: [values[k], sources[k]] for k in sorted(values)}


def config_warnings(sf: StackFile, overrides: dict[str, str] | None) -> list[str]:
    """PULUMI_CONFIG in the environment, which the plan leaves out as `pulumi up` does (keys the program never reads
    are its own warnings: StackConfig.from_pulumi)."""
    import os

    out = []
    if os.environ.get("PULUMI_CONFIG"):
        out.append(
            "PULUMI_CONFIG is set in this environment: `pulumi up` replaces it with the stack's config, so the "
            "plan ignores it too; put the values in Pulumi.<stack>.yaml or pass --config"
        )
    return out


def parse_overrides(pairs: list[str]) -> tuple[dict[str, str], str | None]:
    """``KEY=VALUE`` pairs -> (config, region override); ``aws:region=...`` sets the region."""
    config, region = {}, None
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--config {pair!r}: expected KEY=VALUE, e.g. gpuInstanceType=p5.48xlarge")
        if key == "aws:region":
            region = value
        else:
            config[key if ":" in key else f"{PROJECT}:{key}"] = value
    return config, region
