"""docs/components-reference.md: every component's arguments, generated from the ``*Args`` classes, kept current
by ``ray-efa-eks config-schema`` (the command a user and CI run), and refused while a field has no docstring."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ray_efa_eks.tools.dev import components_reference, config_schema

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / components_reference.DOCS_FILE
EXE = Path(sys.executable).with_name("ray-efa-eks")


def copy_targets(to: Path) -> None:
    for rel in config_schema.TARGETS:
        (to / rel).parent.mkdir(parents=True, exist_ok=True)
        (to / rel).write_text((ROOT / rel).read_text())


def test_the_page_is_current_and_lists_every_component_argument():
    text = PAGE.read_text()
    assert components_reference.replace(text) == text, "run: ray-efa-eks config-schema --write"
    for component, args in {
        "NodeAgentArgs": ("instance_types", "proof_interval_s"),
        "EfaGpuNodeGroupArgs": ("availability_zone", "startup_taints"),
        "RayClusterArgs": ("worker_groups", "head_memory"),
        "ClusterArgs": ("vpc_id",),
    }.items():
        section = text.split(f"### `{component}`", 1)[1].split("### ", 1)[0]
        for arg in args:
            assert f"| `{arg}` |" in section, (component, arg)
    assert (
        "## nodes/" in text
        and "## addons/" in text
        and "EfaRayClusterArgs" not in text.split(components_reference.BEGIN)[1]
    )


@pytest.mark.parametrize(
    "edit, stale",
    [
        (lambda t: t, 0),
        (lambda t: t.replace("| `proof_interval_s` | `int` | `60` |", "| `proof_interval_s` | `int` | `30` |"), 1),
        (lambda t: t.replace(components_reference.END, ""), 2),
    ],
)
def test_config_schema_check_fails_on_a_stale_page(tmp_path, edit, stale):
    """The check CI runs: 0 when current, 1 naming the page when a row drifts, 2 when the markers are gone."""
    copy_targets(tmp_path)
    page = tmp_path / components_reference.DOCS_FILE
    page.write_text(edit(page.read_text()))
    out = subprocess.run(
        [str(EXE), "config-schema", "--check", "--root", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == stale, out.stdout + out.stderr
    if stale == 1:
        assert components_reference.DOCS_FILE in out.stdout + out.stderr
        assert config_schema.write(tmp_path) == [components_reference.DOCS_FILE]
        assert page.read_text() == PAGE.read_text()
    if stale == 2:
        assert "lacks the components reference markers" in out.stderr


def test_a_field_without_a_docstring_is_refused_by_name(tmp_path):
    components = tmp_path / "components"
    shutil.copytree(ROOT / "components", components, ignore=shutil.ignore_patterns("__pycache__"))
    path = components / "addons" / "node_agent.py"
    text = path.read_text()
    doc = '    """Seconds between two fabric proofs on a node'
    start = text.index(doc)
    path.write_text(text[:start] + text[text.index("\n", text.index('"""', start + len('    """'))) + 1 :])
    with pytest.raises(ValueError, match=r"NodeAgentArgs\.proof_interval_s \(components/addons/node_agent\.py:\d+\)"):
        components_reference.render(components)
