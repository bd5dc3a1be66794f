"""The README is a landing page and docs/ one page per topic: every page linked, readable alone, links that resolve,
no paragraph said twice (a page links to the other instead)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
INDEX = ROOT / "docs/README.md"
TOPICS = sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "README.md")
PAGES = [README, INDEX, *TOPICS]
README_MAX_LINES = 300
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_readme_is_a_landing_page():
    lines = README.read_text().count("\n")
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines; move sections into docs/ (at most {README_MAX_LINES})"
    )


@pytest.mark.parametrize("index", [README, INDEX], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_topic_page_is_linked(index):
    text = index.read_text()
    base = index.parent
    linked = {(base / m).resolve() for m in LINK.findall(text) if not m.startswith(("http", "#"))}
    missing = [str(p.relative_to(ROOT)) for p in TOPICS if p.resolve() not in linked]
    assert not missing, f"{index.relative_to(ROOT)} does not link {missing}"


@pytest.mark.parametrize("page", TOPICS, ids=lambda p: p.name)
def test_each_page_reads_alone(page):
    """A title, then one line that says what the page covers."""
    lines = page.read_text().splitlines()
    assert (
        lines[0].startswith("# ")
        and not lines[1]
        and lines[2]
        and not lines[2].startswith(("#", "|", "```", "- ", "<"))
    ), f"{page.name}: start with '# Title', a blank line, then one sentence saying what the page covers"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    text = re.sub(r"^(`{3,}).*?^\1", "", page.read_text(), flags=re.S | re.M)  # links in code are not links
    for target in LINK.findall(text):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        assert dest.exists(), f"{page.relative_to(ROOT)}: link to {target} (no such file)"
        if anchor and dest.suffix == ".md":
            anchors = {_anchor(h) for h in re.findall(r"^#+ (.+)$", dest.read_text(), re.M)}
            assert anchor in anchors, f"{page.relative_to(ROOT)}: link to {target} (no such heading)"


def _paragraphs(page: Path) -> set[str]:
    text = re.sub(r"<!-- (generated|config table).*?<!-- end of[^>]*-->", "", page.read_text(), flags=re.S)
    text = re.sub(r"^(`{3,}).*?^\1", "", text, flags=re.S | re.M)
    return {" ".join(p.split()) for p in re.split(r"\n\s*\n", text) if len(" ".join(p.split())) >= 160}


def test_no_paragraph_is_said_twice():
    seen: dict[str, str] = {}
    for page in PAGES:
        for para in _paragraphs(page):
            assert para not in seen, (
                f"{page.relative_to(ROOT)} repeats a paragraph of {seen[para]}: link to it instead ({para[:100]}...)"
            )
            seen[para] = str(page.relative_to(ROOT))


def _readme_subcommand_rows() -> list[tuple[list[str], list[str]]]:
    """(subcommands, modules) of each row of the README's ``ray-efa-eks ...`` table."""
    text = README.read_text()
    table = text.split("| `ray-efa-eks ...` | module | what |", 1)[1].split("\n\n", 1)[0]
    rows = []
    for line in table.splitlines()[2:]:
        first, modules = line.split("|")[1:3]
        rows.append((re.findall(r"`([a-z][a-z-]*)(?: [A-Z]+)?`", first), re.findall(r"`([a-z_]+\.[a-z_.]+)`", modules)))
    return rows


def test_readme_lists_every_subcommand_and_its_module():
    """The README's command table against tools/command.py (before: efa-exporter and image-fleet were missing)."""
    from ray_efa_eks.tools.command import SUBCOMMANDS

    rows = _readme_subcommand_rows()
    listed = [name for names, _ in rows for name in names]
    assert sorted(listed) == sorted(SUBCOMMANDS), f"README lists {sorted(listed)}, the command {sorted(SUBCOMMANDS)}"
    for names, modules in rows:
        for name in names:
            module = SUBCOMMANDS[name].module
            assert module in modules, f"README: `{name}` runs {module}, not {modules}"
