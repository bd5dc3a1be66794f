"""Mutation check: plant each bug listed in ``tools/dev/mutations.toml`` in a copy of the tree, one at a time, run only
the tests that bug names, and say whether they noticed (killed) or not (survived).

Each mutation is an exact text edit: ``old`` must occur exactly once in ``file`` and is replaced by ``new``. The
tree is copied first (the files git tracks or would track, with uncommitted edits; never ``.git``, ``.venv`` or
caches) and the working tree is never written. The copy is made importable as ``ray_efa_eks.*`` ahead of the
editable install (which points at the original tree) by a ``ray_efa_eks`` directory of symlinks on ``PYTHONPATH``,
and every run checks that ``ray_efa_eks.components`` really comes from the copy. Bytecode is never written in the
copy, so a same-size edit within the same second cannot run stale ``.pyc`` files.

First the named tests run once without any mutation: a test that already fails would "kill" every mutation, so it
is deselected from the mutation runs (and listed); a file that does not collect makes its mutations errors.
A mutation is *killed* when its tests fail (pytest exit 1, or 2: collection errors), *survived* when they pass,
an *error* when it cannot be judged: its ``old`` text is missing or not unique (the code moved: update the entry),
its file or tests are missing, pytest found no tests, or the run timed out. Adding a survivor to the list is how a
gap in the tests is recorded; writing the test that kills it closes it.

Slow (it runs real test files, local Ray clusters included): run it by hand, not in ``.ci/run``::

    ray-efa-eks mutate                    # every mutation in tools/dev/mutations.toml
    ray-efa-eks mutate --only gate-job-expect-gdrdma --only hardening-imds-hop-limit-default
    ray-efa-eks mutate --list             # names, files and tests, nothing run
    ray-efa-eks mutate --check            # every old text found exactly once, nothing run (fast)

Exit codes: 0 every mutation killed; 1 at least one survived; 2 at least one could not be judged (old text not
found, tests missing, timeout, the copy not importable); 64 usage error (bad option, unreadable mutation file).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ...efacheck.cli import EXIT_USAGE, ArgumentParser, run_cli
from ...efacheck.exit_codes import EXIT_FAILED as EXIT_SURVIVED, EXIT_NO_ANSWER as EXIT_ERROR
from ..files import FileProblem, confined, load_toml

ROOT = Path(__file__).resolve().parents[2]
MUTATIONS = ROOT / "tools" / "dev" / "mutations.toml"
PACKAGES = ("components", "efacheck", "training", "tools")
KILLED, SURVIVED, ERROR = "killed", "survived", "error"
IMPORT_MARKER = "ray_efa_eks.components from "


class MutationFileError(ValueError):
    """The mutation list cannot be read: names the file, the entry and the key."""


@dataclass(frozen=True)
class Mutation:
    """One planted bug: replace ``old`` (exactly once in ``file``) by ``new``, then run ``tests``."""

    name: str
    file: str
    """Path relative to the repository root."""
    old: str
    new: str
    tests: tuple[str, ...]
    """pytest arguments relative to the root: files or node ids (``tests/x.py::test_y``)."""
    why: str = ""
    """The bug in words: what would go wrong in a cluster if it shipped."""


@dataclass
class Outcome:
    mutation: Mutation
    status: str
    detail: str = ""
    seconds: float = 0.0
    output: str = field(default="", repr=False)


def load(path: Path = MUTATIONS) -> list[Mutation]:
    """The ``[[mutation]]`` entries of ``path``; :class:`MutationFileError` for a missing or mistyped key, a file
    outside the tree, a duplicate name or no entry at all (tools/files.py reads it with a size limit)."""
    try:
        data = load_toml(path, what="mutation list")
    except FileProblem as e:
        raise MutationFileError(f"{path}: cannot read the mutation list ({e})") from None
    entries = data.get("mutation", [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise MutationFileError(f"{path}: 'mutation' must be an array of tables ([[mutation]] entries)")
    if not entries:
        raise MutationFileError(f"{path}: no [[mutation]] entries; an empty list would prove nothing")
    out: list[Mutation] = []
    for i, entry in enumerate(entries, 1):
        where = f"{path}: mutation #{i} ({entry.get('name', 'no name')!s:.60})"
        for key in ("name", "file", "old", "new", "tests"):
            if key not in entry:
                raise MutationFileError(f"{where}: missing key {key!r}; each entry needs name, file, old, new, tests")
        for key in ("name", "file", "old", "new", "why"):
            if key in entry and not isinstance(entry[key], str):
                raise MutationFileError(f"{where}: {key} must be a string, not {type(entry[key]).__name__}")
        tests = entry["tests"]
        if not isinstance(tests, list) or not tests or not all(isinstance(t, str) and t for t in tests):
            raise MutationFileError(f"{where}: tests must be a non-empty list of test files or node ids")
        if entry["old"] == entry["new"]:
            raise MutationFileError(f"{where}: old and new are the same text; a mutation must change something")
        if not entry["old"]:
            raise MutationFileError(f"{where}: old is empty; name the exact text to replace")
        for rel in (entry["file"], *(t.split("::", 1)[0] for t in tests)):
            try:
                confined(ROOT, rel, what="file")
            except FileProblem as e:
                raise MutationFileError(f"{where}: {e}") from None
        out.append(
            Mutation(entry["name"], entry["file"], entry["old"], entry["new"], tuple(tests), entry.get("why", ""))
        )
    names = [m.name for m in out]
    dups = sorted({n for n in names if names.count(n) > 1})
    if dups:
        raise MutationFileError(f"{path}: duplicate mutation name(s) {', '.join(dups)}; names must be unique")
    return out


def problem(m: Mutation, root: Path) -> str | None:
    """Why ``m`` cannot be applied to the tree at ``root`` (None when it can)."""
    try:
        target = confined(root, m.file, what="file")  # never follows ../ or a symlink out of the tree
    except FileProblem as e:
        return str(e)
    if not target.is_file():
        return f"file {m.file} not found"
    count = target.read_text().count(m.old)
    if count == 0:
        return f"old text not found in {m.file} (the code moved? update the entry in tools/dev/mutations.toml)"
    if count > 1:
        return f"old text occurs {count} times in {m.file}; make it unique (add surrounding lines)"
    for t in m.tests:
        if not (root / t.split("::", 1)[0]).is_file():
            return f"test file {t.split('::', 1)[0]} not found"
    return None


def copy_tree(src: Path, dst: Path) -> None:
    """The files git tracks or would track under ``src`` (uncommitted edits included), copied to ``dst``, plus a
    ``ray_efa_eks`` directory of symlinks so ``ray_efa_eks.*`` imports the copy (as tools/plan.py does)."""
    listed = subprocess.run(
        ["git", "-C", str(src), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.split("\0")
    for rel in filter(None, listed):
        s = src / rel
        if not s.is_file():  # deleted in the working tree but still in the index
            continue
        d = dst / rel
        d.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(s, d)
    shim = dst / "ray_efa_eks"
    shim.mkdir(exist_ok=True)
    (shim / "__init__.py").write_text("")
    for pkg in PACKAGES:
        if (dst / pkg).is_dir():
            (shim / pkg).symlink_to(dst / pkg, target_is_directory=True)


def copy_env(copy: Path) -> dict[str, str]:
    """The environment pytest runs under in the copy: the copy first on PYTHONPATH, no bytecode written."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(copy), *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def imports_from(copy: Path, python: str = sys.executable) -> str:
    """Where ``ray_efa_eks.components`` is imported from under :func:`copy_env` (it must be inside the copy)."""
    r = subprocess.run(
        [python, "-c", "import ray_efa_eks.components as c; print(c.__file__)"],
        cwd=copy,
        env=copy_env(copy),
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = r.stdout.strip().splitlines() or r.stderr.strip().splitlines() or ["nothing printed"]
    return lines[-1]


def _pytest(args: list[str], copy: Path, timeout_s: float, python: str) -> tuple[int | None, str]:
    """pytest in ``copy``: (exit code or None after a timeout, output)."""
    # its own session: on a timeout the whole group goes (pytest and any Ray cluster a test started)
    proc = subprocess.Popen(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=copy,
        env=copy_env(copy),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return None, proc.communicate()[0]
    return proc.returncode, out


def failed_ids(out: str) -> list[str]:
    """Node ids (or files, for collection errors) of pytest's FAILED/ERROR summary lines."""
    ids = []
    for ln in out.splitlines():
        for kind in ("FAILED ", "ERROR "):
            if ln.startswith(kind):
                ids.append(ln[len(kind) :].split(" - ", 1)[0].strip())
    return ids


def baseline(mutations: list[Mutation], copy: Path, timeout_s: float, python: str = sys.executable) -> list[str]:
    """The named tests that already fail in the unmutated copy: they cannot tell a mutation apart, so every
    mutation run deselects them (and a file that does not even collect makes its mutations errors)."""
    files = {t for m in mutations for t in m.tests if "::" not in t}
    args = sorted(files | {t for m in mutations for t in m.tests if "::" in t and t.split("::", 1)[0] not in files})
    rc, out = _pytest(args, copy, timeout_s, python)
    if rc is None:
        raise TimeoutError(f"the unmutated tests ran past {timeout_s:g} s")
    return failed_ids(out) if rc != 0 else []


def run_one(
    m: Mutation, copy: Path, timeout_s: float, python: str = sys.executable, already_failing: list[str] = ()
) -> Outcome:
    """Apply ``m`` in ``copy``, run its tests there (less ``already_failing``), put the file back."""
    why = problem(m, copy)
    if why:
        return Outcome(m, ERROR, why)
    broken = [f for f in already_failing if "::" not in f and any(t.split("::", 1)[0] == f for t in m.tests)]
    if broken:
        return Outcome(m, ERROR, f"{broken[0]} fails to collect without the mutation; fix it first")
    target = confined(copy, m.file, what="file")  # problem() checked it; the write below stays in the copy
    original = target.read_text()
    target.write_text(original.replace(m.old, m.new, 1))
    start = time.monotonic()
    deselect = [a for f in already_failing if "::" in f for a in ("--deselect", f)]
    try:
        rc, out = _pytest(["-x", *deselect, *m.tests], copy, timeout_s, python)
    finally:
        target.write_text(original)
    secs = time.monotonic() - start
    if rc is None:
        return Outcome(m, ERROR, f"tests ran past {timeout_s:g} s", secs, out)
    last = (out.strip().splitlines() or [""])[-1]
    if rc == 0:
        return Outcome(m, SURVIVED, last, secs, out)
    if rc in (1, 2):
        failed = failed_ids(out)
        return Outcome(m, KILLED, f"by {failed[0]}" if failed else last, secs, out)
    return Outcome(m, ERROR, f"pytest exit {rc}: {last}", secs, out)


def score_line(outcomes: list[Outcome]) -> str:
    killed = sum(o.status == KILLED for o in outcomes)
    survived = sum(o.status == SURVIVED for o in outcomes)
    errors = sum(o.status == ERROR for o in outcomes)
    judged = killed + survived
    pct = f"{100 * killed / judged:.0f}%" if judged else "n/a"
    return f"mutation score: {killed}/{judged} killed ({pct}); {survived} survived, {errors} error(s)"


def exit_code(outcomes: list[Outcome]) -> int:
    if any(o.status == ERROR for o in outcomes):
        return EXIT_ERROR
    if any(o.status == SURVIVED for o in outcomes):
        return EXIT_SURVIVED
    return 0


def parser(prog: str | None = None) -> ArgumentParser:
    ap = ArgumentParser(
        prog=prog or "python -m ray_efa_eks.tools.dev.mutate",
        description="plant each listed bug in a copy of the tree and run the tests it names",
        exit_codes="mutate",
    )
    ap.add_argument("--file", default=str(MUTATIONS), help="the mutation list (default tools/dev/mutations.toml)")
    ap.add_argument("--root", default=str(ROOT), help="the tree to copy (default: this checkout)")
    ap.add_argument("--only", action="append", default=[], metavar="NAME", help="run only this mutation (repeatable)")
    ap.add_argument("--list", action="store_true", help="print the mutations, run nothing")
    ap.add_argument("--check", action="store_true", help="check every old text is found exactly once, run nothing")
    ap.add_argument("--timeout-s", type=float, default=900.0, help="per mutation (default 900)")
    ap.add_argument(
        "--no-baseline",
        dest="baseline",
        action="store_false",
        help="skip the unmutated run that finds tests failing already (they would 'kill' every mutation)",
    )
    ap.add_argument("--keep", action="store_true", help="keep the copy (its path is printed)")
    ap.add_argument("--verbose", "-v", action="store_true", help="print the test output of each survivor and error")
    return ap


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    a = parser(prog).parse_args(argv)
    root = Path(a.root).resolve()
    try:
        mutations = load(Path(a.file))
    except MutationFileError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    unknown = sorted(set(a.only) - {m.name for m in mutations})
    if unknown:
        print(f"error: --only {', '.join(unknown)}: no such mutation in {a.file}; see --list", file=sys.stderr)
        return EXIT_USAGE
    if a.only:
        mutations = [m for m in mutations if m.name in a.only]
    width = max((len(m.name) for m in mutations), default=0)
    if a.list:
        for m in mutations:
            print(f"{m.name:<{width}}  {m.file}  -> {' '.join(m.tests)}\n{'':<{width}}  {m.why}")
        return 0
    if a.check:
        bad = [(m, problem(m, root)) for m in mutations]
        for m, why in bad:
            print(f"{m.name:<{width}}  {'ok' if why is None else 'error: ' + why}")
        return EXIT_ERROR if any(why for _, why in bad) else 0
    tmp = Path(tempfile.mkdtemp(prefix="mutate-"))
    try:
        copy = tmp / "tree"
        copy_tree(root, copy)
        where = imports_from(copy)
        print(f"copy: {copy}\n{IMPORT_MARKER}{where}", flush=True)
        if not Path(where).resolve().is_relative_to(copy.resolve()):
            print(
                f"error: ray_efa_eks.components is imported from {where}, not from the copy {copy}; mutations "
                "would not be seen",
                file=sys.stderr,
            )
            return EXIT_ERROR
        already: list[str] = []
        if a.baseline:
            try:
                already = baseline(mutations, copy, a.timeout_s * 2)
            except TimeoutError as e:
                print(f"error: baseline: {e}", file=sys.stderr)
                return EXIT_ERROR
            print(
                f"baseline: {len(already)} named test(s) already fail without a mutation"
                + (f", deselected: {', '.join(already)}" if already else ""),
                flush=True,
            )
        outcomes = []
        for m in mutations:
            o = run_one(m, copy, a.timeout_s, already_failing=already)
            outcomes.append(o)
            print(f"{o.status.upper():<8}  {m.name:<{width}}  {o.seconds:5.0f} s  {o.detail}", flush=True)
            if a.verbose and o.status != KILLED and o.output:
                print("\n".join("    " + ln for ln in o.output.strip().splitlines()[-40:]), flush=True)
        print(score_line(outcomes))
        return exit_code(outcomes)
    finally:
        if a.keep:
            print(f"kept: {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(run_cli(main, None, "python -m ray_efa_eks.tools.dev.mutate"))
