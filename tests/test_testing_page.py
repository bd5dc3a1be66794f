"""docs/testing.md holds how to test and the current figures, never a run log: the mutation scores and survivors are
generated from .ci/mutation_scores.json by .ci/mutation.py (a run records them; ``--check`` fails on a stale page or a
survivor without a reason), the branch-coverage table is .ci/coverage.py's FLOORS, and the docs' prose names no
issue numbers or run times (history belongs in git)."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs/testing.md"
SCORES = ROOT / ".ci/mutation_scores.json"


def mutation(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(root / ".ci/mutation.py"), *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """The script, its scores and the page, laid out as in the checkout."""
    for rel in (".ci/mutation.py", ".ci/mutation_scores.json", "docs/testing.md"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, tmp_path / rel)
    return tmp_path


def test_the_page_shows_the_recorded_scores():
    r = mutation(ROOT, "--check")
    assert r.returncode == 0, f"{r.stderr}\nrun: .venv/bin/python .ci/mutation.py --render"
    assert "up to date" in r.stdout


def _edit_page_figure(root: Path) -> None:
    page = root / "docs/testing.md"
    text = page.read_text()
    row = re.search(r"^\| efacheck/verdict\.py \| (\d+) \|", text, re.MULTILINE)
    page.write_text(text.replace(row.group(0), f"| efacheck/verdict.py | {int(row.group(1)) + 1} |"))


def _edit_recorded_figure(root: Path) -> None:
    scores = json.loads((root / ".ci/mutation_scores.json").read_text())
    scores["efacheck/verdict.py"]["killed"] -= 1
    (root / ".ci/mutation_scores.json").write_text(json.dumps(scores, ensure_ascii=False))


def _blank_a_reason(root: Path) -> None:
    scores = json.loads((root / ".ci/mutation_scores.json").read_text())
    scores["efacheck/verdict.py"]["survivors"][0]["reason"] = " "
    (root / ".ci/mutation_scores.json").write_text(json.dumps(scores, ensure_ascii=False))
    assert mutation(root, "--render").returncode == 0


def _drop_the_markers(root: Path) -> None:
    page = root / "docs/testing.md"
    page.write_text(re.sub(r"<!-- (BEGIN|END) mutation-scores[^>]*-->\n", "", page.read_text()))


@pytest.mark.parametrize(
    "edit,says",
    [
        (_edit_page_figure, "--render"),
        (_edit_recorded_figure, "docs/testing.md differs"),
        (_blank_a_reason, "survived with no reason"),
        (_drop_the_markers, "--render"),
    ],
    ids=[
        "a figure typed into the page",
        "a figure typed into the scores",
        "a survivor without a reason",
        "the markers removed",
    ],
)
def test_check_fails_on_a_stale_page(tree, edit, says):
    assert mutation(tree, "--check").returncode == 0
    edit(tree)
    r = mutation(tree, "--check")
    assert r.returncode == 1 and says in r.stderr, r.stdout + r.stderr


def test_a_run_records_its_figures_keeps_reasons_and_lists_new_survivors(tree):
    """What mutmut left in the module's cache (its .meta) becomes the module's entry and the page's row."""
    before = json.loads((tree / ".ci/mutation_scores.json").read_text())
    kept = before["efacheck/verdict.py"]["survivors"][0]
    prefix = "ray_efa_eks.efacheck.verdict."
    meta = tree / ".mutation/efacheck.verdict/mutants/src/ray_efa_eks/efacheck/verdict.py.meta"
    meta.parent.mkdir(parents=True)
    codes = {
        kept["mutants"][0]: 0,
        "x_judge__mutmut_1": 1,
        "x_judge__mutmut_2": 36,
        "x_judge__mutmut_3": 0,
        "x_judge__mutmut_4": None,
    }
    meta.write_text(json.dumps({"exit_code_by_key": {prefix + name: code for name, code in codes.items()}}))

    r = mutation(tree, "efacheck/verdict.py", "--report-only")
    assert r.returncode == 0 and "recorded" not in r.stdout, r.stdout + r.stderr
    assert json.loads((tree / ".ci/mutation_scores.json").read_text()) == before  # a report records nothing

    r = mutation(tree, "efacheck/verdict.py", "--report-only", "--record")
    assert r.returncode == 0 and "recorded" in r.stdout, r.stdout + r.stderr
    after = json.loads((tree / ".ci/mutation_scores.json").read_text())
    assert after["efacheck/verdict.py"] == {
        "mutants": 5,
        "killed": 1,
        "timeout": 1,
        "survived": 2,
        "score": 50.0,
        "survivors": [kept, {"mutants": ["x_judge__mutmut_3"], "reason": ""}],
    }
    assert {k: v for k, v in after.items() if k != "efacheck/verdict.py"} == {
        k: v for k, v in before.items() if k != "efacheck/verdict.py"
    }
    page = (tree / "docs/testing.md").read_text()
    assert "| efacheck/verdict.py | 5 | 1 | 1 | 2 | 50.0% |" in page
    assert "- `x_judge__mutmut_3`: (no reason yet)" in page

    r = mutation(tree, "--check")
    assert r.returncode == 1 and "x_judge__mutmut_3 survived with no reason" in r.stderr, r.stderr


def test_record_goes_with_report_only(tree):
    r = mutation(tree, "efacheck/verdict.py", "--record")
    assert r.returncode == 2 and "--report-only" in r.stderr


def test_the_coverage_table_is_the_floors():
    spec = importlib.util.spec_from_file_location("ci_coverage", ROOT / ".ci/coverage.py")
    coverage = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(coverage)
    table = PAGE.read_text().split("| module | floor |\n|---|---|\n", 1)[1].split("\n\n", 1)[0]
    rows = dict(re.findall(r"^\| (\S+) \| ([\d.]+)% \|$", table, re.MULTILINE))
    assert {m: float(f) for m, f in rows.items()} == coverage.FLOORS


DOC_PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
GENERATED = re.compile(r"<!-- (?:BEGIN |config table|generated).*?<!-- (?:END |end of)[^>]*-->", re.DOTALL)
"""Parts generated from code (checked where they are generated)."""
ISSUE = re.compile(r"(\S*)\s+issues? #?\d+\b|^issues? #?\d+\b", re.IGNORECASE | re.MULTILINE)
"""A project issue number; an upstream project's issue is named with the project ("KubeRay issue 4226")."""
RUN_TIME = re.compile(r"\b20\d\d-\d\d-\d\d \d\d:\d\d\b")
"""A run's date and time."""


@pytest.mark.parametrize("page", DOC_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_carry_no_history(page):
    text = GENERATED.sub("", page.read_text())
    issues = [m.group(0) for m in ISSUE.finditer(text) if not re.sub(r"^\W+", "", m.group(1) or "")[:1].isupper()]
    times = RUN_TIME.findall(text)
    assert not issues and not times, (
        f"{page.relative_to(ROOT)}: history in prose ({(issues + times)[:3]}): say the fact, leave the history to git"
    )
