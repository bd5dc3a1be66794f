"""Every command the README and docs/*.md show in a shell block is run here as written, or marked (docs/testing.md).

A shell block is a fenced block tagged ``bash``, ``sh``, ``shell`` or ``console``, or untagged. Its command lines
(a trailing ``\\`` joins the next line) run one after the other in bash from the repository root, with the
project's ``.venv/bin`` first on PATH and no AWS credentials, each exiting 0 unless its comment says ``exit N``.
Markers, in a line's ``#`` comment or on a comment-only line (which covers the command lines below it, up to the
next comment-only line that has markers):

- ``needs: WHAT`` (WHAT in :data:`NEEDS`): not run here; said in the block so the reader knows.
- ``slow: WHY``: runs here, but starts Ray or takes more than a few seconds: run only with ``RAY_EFA_EKS_DOCS_SLOW=1``
  (hold /work/ray.lock), so CI does not pay for it.
- ``server: WHAT``: starts a long-running process: started in the background, the block's next lines run against it,
  then it gets SIGTERM and must exit 0.
- ``run by: FILE``: FILE (e.g. .ci/run) runs exactly this line; checked here by reading FILE.

Output a page shows as a command's (a ``text`` block right after ``<!-- output of: COMMAND -->``) is checked against
what COMMAND prints now: every shown line, in order, a ``...`` line standing for lines left out.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_TAGS = ("", "bash", "sh", "shell", "console")
NEEDS = {
    "aws": "AWS credentials (pulumi commands: also the Pulumi CLI and the stack)",
    "pulumi": "the Pulumi CLI, without AWS (pulumi package add)",
    "cluster": "kubectl access to the deployed EKS cluster",
    "network": "downloads (pip, pulumi package add)",
    "input": "input the reader brings: saved plans, a clone with a remote",
    "efa": "a node with EFA devices",
}
"""The words ``needs:`` takes, and what each means (docs/testing.md lists the same)."""
MARKER = re.compile(
    r"\b(needs: (?P<needs>[a-z]+)|run by: (?P<run_by>[^\s,;()]+)|(?P<slow>slow):|(?P<server>server):"
    r"|exit (?P<exit>\d+))"
)
FENCE = re.compile(r"^(?P<fence>`{3,})(?P<tag>[\w-]*)\n(?P<body>.*?)^(?P=fence)\s*$", re.S | re.M)


@dataclass
class Command:
    page: str
    line: int
    text: str
    needs: str | None = None
    run_by: str | None = None
    slow: bool = False
    server: bool = False
    exit: int = 0

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.text}"


def _comment(line: str) -> str:
    """The ``# ...`` comment of a shell line (outside quotes), or ''."""
    try:
        lex = shlex.shlex(line, posix=True, punctuation_chars=True)
        lex.commenters = ""
        lex.whitespace_split = True
        words = list(lex)
    except ValueError:
        words = line.split()
    return (
        " ".join(words[words.index("#") :]) if "#" in words else (line.strip() if line.lstrip().startswith("#") else "")
    )


def _markers(comment: str) -> dict:
    out: dict = {}
    for m in MARKER.finditer(comment):
        for k, v in m.groupdict().items():
            if v is not None:
                out[k] = int(v) if k == "exit" else (True if k in ("slow", "server") else v)
    return out


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else str(page)


def commands(pages: list[Path] = PAGES) -> list[list[Command]]:
    """The shell blocks of ``pages``, each a list of its commands with their markers."""
    blocks = []
    for page in pages:
        text = page.read_text()
        for m in FENCE.finditer(text):
            if m.group("tag") not in SHELL_TAGS:
                continue
            first = text[: m.start("body")].count("\n") + 1
            cmds: list[Command] = []
            inherited: dict = {}
            lines = m.group("body").splitlines()
            i = 0
            while i < len(lines):
                start, line = i, lines[i]
                while line.rstrip().endswith("\\") and i + 1 < len(lines):
                    i += 1
                    line = line.rstrip()[:-1].rstrip() + " " + lines[i].strip()
                i += 1
                if not line.strip():
                    continue
                if line.lstrip().startswith("#"):
                    inherited = _markers(line) or inherited  # a comment without markers changes nothing
                    continue
                own = _markers(_comment(line))
                cmds.append(Command(_name(page), first + start, line.strip(), **{**inherited, **own}))
            blocks.append(cmds)
    return blocks


ALL = [c for b in commands() for c in b]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "PULUMI_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    return env


_RAN: dict[str, subprocess.CompletedProcess] = {}
"""Command text -> its result, so a command a page both runs and shows the output of runs once."""


def _run(cmd: Command, timeout: int = 120) -> subprocess.CompletedProcess:
    key = cmd.text.split(" #")[0].strip()
    if key not in _RAN:
        _RAN[key] = subprocess.run(
            ["bash", "-c", cmd.text], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=timeout
        )
    return _RAN[key]


def _runnable(block: list[Command], slow: bool) -> bool:
    return any(c.needs is None and c.run_by is None and (slow or not c.slow) for c in block)


def _run_block(block: list[Command]) -> None:
    server = None
    try:
        for cmd in block:
            if cmd.needs or cmd.run_by or (cmd.slow and not os.environ.get("RAY_EFA_EKS_DOCS_SLOW")):
                continue
            if cmd.server:
                server = subprocess.Popen(
                    ["bash", "-c", f"exec {cmd.text}"],
                    cwd=ROOT,
                    env=_env(),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                time.sleep(3)
                assert server.poll() is None, f"{cmd} exited at once: {server.communicate()[1][-2000:]}"
                continue
            r = _run(cmd, timeout=900 if cmd.slow else 120)
            assert r.returncode == cmd.exit, (
                f"{cmd}\nexit {r.returncode} (want {cmd.exit})\n{r.stdout[-1500:]}\n{r.stderr[-3000:]}"
            )
        if server is not None:
            server.send_signal(signal.SIGTERM)
            out, err = server.communicate(timeout=30)
            assert server.returncode == 0, f"server exited {server.returncode} on SIGTERM: {err[-2000:]}"
    finally:
        if server is not None and server.poll() is None:
            server.kill()


BLOCKS = [b for b in commands() if b]


@pytest.mark.parametrize(
    "block", [b for b in BLOCKS if _runnable(b, slow=False)], ids=lambda b: f"{b[0].page}:{b[0].line}"
)
def test_docs_commands_run_as_written(block):
    _run_block(block)


@pytest.mark.skipif(not os.environ.get("RAY_EFA_EKS_DOCS_SLOW"), reason="slow docs commands: RAY_EFA_EKS_DOCS_SLOW=1")
@pytest.mark.parametrize("cmd", [c for c in ALL if c.slow and not c.needs], ids=str)
def test_slow_docs_commands_run_as_written(cmd):
    r = _run(cmd, timeout=900)
    assert r.returncode == cmd.exit, f"{cmd}\nexit {r.returncode} (want {cmd.exit})\n{r.stderr[-3000:]}"


def test_every_command_is_run_or_marked():
    """Nothing is skipped silently: each command runs here, or its marker is one the convention knows."""
    assert ALL, "no shell blocks found: the parser broke"
    for c in ALL:
        assert c.needs is None or c.needs in NEEDS, f"{c}: unknown 'needs: {c.needs}' (one of {', '.join(NEEDS)})"
        if c.text.split(" #")[0].rstrip().endswith("&") and not (c.needs or c.server):
            pytest.fail(
                f"{c}: runs in the background, where a failure goes unseen: mark it (needs: ... or server: ...)"
            )
        if c.run_by:
            runner = ROOT / c.run_by
            assert runner.is_file() and c.text.split(" #")[0].strip() in runner.read_text(), (
                f"{c}: {c.run_by} does not run this line as written"
            )
    counts = {
        "run": sum(not (c.needs or c.run_by or c.slow) for c in ALL),
        "slow": sum(c.slow for c in ALL),
        "run by": sum(bool(c.run_by) for c in ALL),
        "needs": sum(bool(c.needs) for c in ALL),
    }
    print(f"docs commands: {counts}")
    assert counts["run"] > 0


def test_testing_page_lists_the_markers():
    page = (ROOT / "docs/testing.md").read_text()
    for word, meaning in NEEDS.items():
        assert f"`needs: {word}`" in page, word
    for marker in ("`slow: WHY`", "`server: WHAT`", "`run by: FILE`", "`exit N`"):
        assert marker in page, marker


def test_the_parser_sees_markers_and_continuations(tmp_path):
    """The convention can fail: an unmarked AWS command would run (and fail), a marked one is left out."""
    page = tmp_path / "p.md"
    page.write_text(
        "```bash\n# needs: aws\npulumi up\n# still aws\nkubectl get pods\n# local; exit 1\nray-efa-eks plan \\\n    --json   # exit 1\n```\n"
        "```python\nprint(1)\n```\n```\nserve --port 1   # server: a test server\n```\n"
    )
    blocks = [[(c.text, c.needs, c.exit, c.server) for c in b] for b in commands([page]) if b]
    assert blocks == [
        [
            ("pulumi up", "aws", 0, False),
            ("kubectl get pods", "aws", 0, False),
            ("ray-efa-eks plan --json   # exit 1", None, 1, False),
        ],
        [("serve --port 1   # server: a test server", None, 0, True)],
    ]


OUTPUT = re.compile(
    r"^<!-- output of: (?P<cmd>.+?) -->\n(?P<fence>`{3,})text\n(?P<body>.*?)^(?P=fence)\s*$", re.S | re.M
)


def shown_outputs(pages: list[Path] = PAGES) -> list[tuple[str, str, list[str]]]:
    return [
        (_name(p), m.group("cmd"), m.group("body").splitlines()) for p in pages for m in OUTPUT.finditer(p.read_text())
    ]


VARIES = [(re.compile(r"priced on \d{4}-\d{2}-\d{2}"), "priced on <the day it runs>")]
"""What a command prints that depends on the day it runs (the plan prices the EKS version on today's date)."""


def _steady(line: str) -> str:
    for pattern, said in VARIES:
        line = pattern.sub(said, line)
    return line


def _follows(shown: list[str], real: list[str]) -> str | None:
    """The first shown line that is not in ``real`` in order (``...`` skips any lines), or None."""
    shown, real = [_steady(s) for s in shown], [_steady(r) for r in real]
    at, skip = 0, False
    for line in shown:
        if line.strip() == "...":
            skip = True
            continue
        if skip:
            while at < len(real) and real[at] != line:
                at += 1
        if at >= len(real) or real[at] != line:
            return line
        at, skip = at + 1, False
    return None if skip or at == len(real) else f"(the output goes on: {real[at]!r})"


@pytest.mark.parametrize("page,cmd,shown", shown_outputs(), ids=lambda v: v if isinstance(v, str) else "")
def test_shown_output_is_what_the_command_prints(page, cmd, shown):
    r = _run(Command(page, 0, cmd))
    bad = _follows(shown, r.stdout.splitlines())
    assert bad is None, (
        f"{page}: the output shown for `{cmd}` is stale at: {bad}; refresh it with "
        f"`.venv/bin/python tests/test_docs_commands.py --refresh`\n--- real output:\n{r.stdout[-4000:]}"
    )


def refreshed(shown: list[str], real: list[str]) -> list[str]:
    """``real`` shortened as ``shown`` is: its first lines as many as shown before a ``...``, then from the line that
    opens the part shown after it (one ``...`` at most)."""
    if "..." not in [s.strip() for s in shown]:
        return real
    cut = [s.strip() for s in shown].index("...")
    head, tail = shown[:cut], shown[cut + 1 :]
    if "..." in [s.strip() for s in tail] or not tail or tail[0] not in real:
        raise ValueError(f"cannot refresh a shown output shortened this way (tail {tail[:1]}); edit it by hand")
    return real[: len(head)] + ["..."] + real[real.index(tail[0]) :]


def refresh(pages: list[Path] = PAGES) -> list[str]:
    """Rewrite every shown output from what its command prints now; the pages changed."""
    changed = []
    for page in pages:
        text = page.read_text()

        def sub(m: re.Match) -> str:
            real = _run(Command(_name(page), 0, m.group("cmd"))).stdout.splitlines()
            body = "\n".join(refreshed(m.group("body").splitlines(), real)) + "\n"
            return m.group(0).replace(m.group("body"), body, 1)

        new = OUTPUT.sub(sub, text)
        if new != text:
            page.write_text(new)
            changed.append(_name(page))
    return changed


def test_output_check_can_fail():
    assert refreshed(["a", "x", "...", "d"], ["a", "b", "c", "d", "e"]) == ["a", "b", "...", "d", "e"]
    assert _follows(["a", "...", "d"], ["a", "b", "c", "d"]) is None
    assert _follows(["x priced on 2026-12-04"], ["x priced on 2027-01-01"]) is None
    assert _follows(["x until 2026-12-04"], ["x until 2027-01-01"]) is not None
    assert _follows(["a", "c"], ["a", "b", "c"]) == "c"
    assert _follows(["a", "...", "x"], ["a", "b"]) == "x"
    assert _follows(["a"], ["a", "b"]) is not None


if __name__ == "__main__":
    if sys.argv[1:] != ["--refresh"]:
        sys.exit("usage: tests/test_docs_commands.py --refresh   (rewrite the outputs the docs show)")
    print("refreshed: " + (", ".join(refresh()) or "nothing"))
