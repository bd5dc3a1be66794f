"""The multi-language examples' inputs and outputs, read from their sources (examples/yaml, examples/typescript)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "ray-efa-eks:index:EfaRayCluster"


def yaml_example() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "examples/yaml/Pulumi.yaml").read_text())


def yaml_example_inputs() -> dict[str, Any]:
    return next(r for r in yaml_example()["resources"].values() if r["type"] == TOKEN)["properties"]


def typescript_example_inputs() -> dict[str, Any]:
    """The object literal passed to ``new rayEfaEks.EfaRayCluster(...)`` in examples/typescript/index.ts."""
    text = (ROOT / "examples/typescript/index.ts").read_text()
    body = re.search(r"new rayEfaEks\.EfaRayCluster\(\"[^\"]+\", (\{.*?\n\})\);", text, re.S).group(1)
    body = re.sub(r"^(\s*)(\w+):", r'\1"\2":', body, flags=re.M)  # TS keys -> JSON keys
    return json.loads(re.sub(r",(\s*[}\]])", r"\1", body))  # no trailing commas


def typescript_example_outputs() -> list[str]:
    """The component outputs examples/typescript/index.ts exports (``stack.<name>``)."""
    text = (ROOT / "examples/typescript/index.ts").read_text()
    return re.findall(r"^export const \w+ = stack\.(\w+);", text, re.M)
