"""Every exit status of every ``ray-efa-eks`` command, in one table: what each code means, project-wide and per command.

Each code has one project-wide meaning (:class:`ExitStatus`); a command lists the codes it uses and what each says
for it (:data:`COMMANDS`). ``docs/cli.md`` is generated from this table (``python -m ray_efa_eks.tools.exit_status
--write``; ``--check`` fails when the page is stale), and tests/tools/test_exit_status.py holds every command's
``--help`` and behaviour to it. The codes themselves are defined where the CLIs that ship alone can reach them
(``training/cli.py``, ``efacheck/cli.py``: 64, 70, 130, 141, 143) and checked equal here. Model: httpie's
``status.py`` (one ``ExitStatus`` enum) and its manual's "Scripting" table.
"""

from __future__ import annotations

import re
import sys
from enum import IntEnum
from pathlib import Path

from ..training import cli as training_cli
from .cli import ArgumentParser


class ExitStatus(IntEnum):
    """Project-wide meaning of each code; a command's own wording is in :data:`COMMANDS`."""

    OK = 0
    FAILED = 1
    NO_ANSWER = 2
    UNREADABLE = 3
    RAY_START = 4
    WRONG_FABRIC = 5
    TOO_SMALL = 6
    USAGE = 64
    INTERNAL = 70
    INTERRUPTED = 130
    PIPE = 141
    TERMINATED = 143


MEANING: dict[ExitStatus, str] = {
    ExitStatus.OK: "Success: the rules pass, the verdict is efa, the run finished.",
    ExitStatus.FAILED: "A definite negative answer: a broken rule, a failed check, a fallback verdict, a failed run.",
    ExitStatus.NO_ANSWER:
        "No answer could be given: the program failed, AWS or the cluster did not answer, the verdict is undetermined.",
    ExitStatus.UNREADABLE: "An input file or ref could not be read (missing, binary, malformed, over a size limit).",
    ExitStatus.RAY_START: "Ray could not start a local cluster.",
    ExitStatus.WRONG_FABRIC: "--require-efa: NCCL's fabric was not EFA; the run stopped before checkpointing.",
    ExitStatus.TOO_SMALL: "The Ray cluster has fewer CPUs/GPUs than --workers needs.",
    ExitStatus.USAGE: "Usage error: a bad option or value, refused before anything starts (sysexits EX_USAGE).",
    ExitStatus.INTERNAL:
        "An unexpected exception, i.e. a bug: one line on stderr naming the file with the full trace (EX_SOFTWARE).",
    ExitStatus.INTERRUPTED: "Ctrl-C (128 + SIGINT).",
    ExitStatus.PIPE: "The reader closed stdout (a pipe into head): 128 + SIGPIPE.",
    ExitStatus.TERMINATED:
        "SIGTERM (128 + SIGTERM): handled like Ctrl-C (same message, JSON line, resume hint and cleanup).",
}
"""What each code means in every command (docs/cli.md's first table)."""

COMMON = {64: "usage error", 70: "internal error (a bug; the trace file is named)", 130: "interrupted (Ctrl-C)",
          141: "stdout closed by the reader", 143: "terminated (SIGTERM), handled like Ctrl-C"}
"""Codes every command has."""

_PLAN = {0: "the layout rules pass (a warning rule does not fail)", 1: "a layout rule is broken",
         2: "the stack program failed (a bad config "
         "value: the message names the key)", 3: "unreadable input (no Pulumi.<stack>.yaml, a stack file that is "
         "malformed, too large or an alias bomb, a git ref or saved plan that cannot be read)"}
_DIFF = {0: "the new side's rules pass and no GPU node would roll inside a reservation or Capacity Block",
         1: "a rule is broken on the new side, or the change rolls GPU nodes inside a reservation or Capacity Block",
         2: "a side's program failed, or EKS would refuse the change (a kubernetesVersion that skips a minor or "
            "goes down, as `pulumi up` refuses it)",
         3: "unreadable input (a git ref, a saved plan: missing, malformed, not a plan)"}
_VERDICT = {0: "efa: NCCL carried the traffic over EFA", 1: "fallback: NCCL used sockets (or the check failed)",
            2: "undetermined: the logs do not say", 3: "the logs could not be read (missing, empty, binary, too large)"}
COMMANDS: dict[str, dict[int, str]] = {
    "plan": _PLAN,
    "diff": _DIFF,
    "check-rules": _PLAN,
    "preflight": {0: "every check passed", 1: "a check failed (quota, AZ, capacity)",
                  2: "undetermined: AWS did not answer or a check could not be made"},
    "config-schema": {0: "the generated files are up to date (or were rewritten)", 1: "a generated file is stale",
                      2: "not a ray-efa-eks checkout (--root)"},
    "catalogue": {0: "the catalogue is up to date (or was rewritten)", 1: "the catalogue is stale",
                  2: "an instance type cannot be fully described from the EC2 data, or not a ray-efa-eks checkout "
                     "(--root)"},
    "train": {0: "the run finished", 1: "the run failed (--max-failures exhausted; resume with the same --name)",
              2: "no answer from the cluster (--address unreachable, the auth token refused)",
              4: "Ray could not start", 5: "--require-efa and the fabric was not efa",
              6: "the cluster is too small for --workers, or has no GPU node yet (--use-gpu without --workers)"},
    "submit": {0: "the job finished", 1: "the job failed (submit returns the job's own code when it has one)",
               2: "no answer: the Jobs API unreachable or it did not take the job"},
    "efa-check": {**_VERDICT, 1: "fallback, or a bandwidth floor or version check failed"},
    "nccl-verdict": _VERDICT,
    "efa-exporter": {0: "stopped by SIGTERM (a server's normal end: the pod is deleted; not 143)",
                     3: "cannot serve (--sysfs not a directory, the port in use)"},
    "mutate": {0: "every planted bug was killed", 1: "a planted bug survived", 2: "a mutation could not be judged "
               "(its old text not found, the mutations file malformed, a named test already failing)"},
}
"""Per subcommand: the codes it returns besides :data:`COMMON`, and what each means for it."""

DOCS_BEGIN = "<!-- BEGIN exit-status (generated by python -m ray_efa_eks.tools.exit_status --write; do not edit) -->"
DOCS_END = "<!-- END exit-status -->"
ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "cli.md"
PAGE_INTRO = """# Commands and exit codes

`ray-efa-eks SUBCOMMAND [ARGS ...]` runs each tool; `ray-efa-eks SUBCOMMAND --help` lists its options.
`python -m ray_efa_eks.<package>.<module>` runs the same code under the same rules.

Every command runs through one entry point (`tools/command.py` and `run_cli` in `training/cli.py`):
a bad option or value exits 64 before anything starts, Ctrl-C exits 130, SIGTERM exits 143 the same way
(the same message, `--json` line, resume hint and cleanup), and an unexpected exception prints one line
naming the file that holds its full trace (exit 70): never a traceback on the terminal.

"""


def codes(command: str) -> dict[int, str]:
    """Every code ``command`` can exit with and what it means there."""
    return dict(sorted({**COMMANDS[command], **COMMON}.items()))


def render() -> str:
    """The generated part of docs/cli.md: the project-wide table, then one table per command."""
    lines = [DOCS_BEGIN, "", "## Exit codes", "", "| code | meaning everywhere |", "|---|---|"]
    lines += [f"| {s.value} | {MEANING[s]} |" for s in ExitStatus]
    for name in COMMANDS:
        lines += ["", f"### `ray-efa-eks {name}`", "", "| code | meaning |", "|---|---|"]
        lines += [f"| {code} | {text} |" for code, text in codes(name).items()]
    return "\n".join([*lines, "", DOCS_END]) + "\n"


def page_text(current: str | None) -> str:
    """docs/cli.md with the generated part replaced (or the whole page, when it does not exist yet)."""
    if current is None or DOCS_BEGIN not in current:
        return (current.rstrip() + "\n\n" if current else PAGE_INTRO) + render()
    head, rest = current.split(DOCS_BEGIN, 1)
    tail = rest.split(DOCS_END, 1)[1] if DOCS_END in rest else ""
    return head + render().rstrip("\n") + tail


def check_consistent() -> list[str]:
    """Problems between this table and the codes the CLIs define (each must be defined once, the same)."""
    from ..efacheck import cli as efacheck_cli

    problems = []
    for mod in (training_cli, efacheck_cli):
        for name, status in (("EXIT_USAGE", ExitStatus.USAGE), ("EXIT_INTERNAL", ExitStatus.INTERNAL),
                             ("EXIT_INTERRUPTED", ExitStatus.INTERRUPTED), ("EXIT_PIPE", ExitStatus.PIPE),
                             ("EXIT_TERMINATED", ExitStatus.TERMINATED)):
            if getattr(mod, name, None) != status:
                problems.append(f"{mod.__name__}.{name} = {getattr(mod, name, None)}, the table says {int(status)}")
    for name, table in COMMANDS.items():
        unknown = sorted(set(table) - set(ExitStatus))
        if unknown:
            problems.append(f"{name}: codes {unknown} are not in ExitStatus")
    return problems


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    p = ArgumentParser(prog=prog or "python -m ray_efa_eks.tools.exit_status",
                       description="check or rewrite docs/cli.md's exit-code tables from this module",
                       epilog="exit codes: 0 up to date (or rewritten), 1 stale, 64 usage error")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="exit 1 when docs/cli.md differs from the table")
    mode.add_argument("--write", action="store_true", help="rewrite docs/cli.md's generated part")
    args = p.parse_args(argv)
    current = PAGE.read_text(encoding="utf-8") if PAGE.is_file() else None
    wanted = page_text(current)
    if args.write:
        PAGE.parent.mkdir(exist_ok=True)
        PAGE.write_text(wanted, encoding="utf-8")
        print(f"wrote {PAGE}")
        return 0
    if current != wanted:
        print(f"{PAGE} is stale: run python -m ray_efa_eks.tools.exit_status --write", file=sys.stderr)
        return 1
    print(f"{PAGE}: up to date")
    return 0


def help_codes(help_text: str) -> set[int]:
    """The exit codes a ``--help`` text lists (its ``exit codes:`` epilog or its ``Exit codes`` block)."""
    m = re.search(r"exit codes?:?(.*)", help_text, re.S | re.I)
    return {int(c) for c in re.findall(r"(?<![\w.-])(\d{1,3})(?=\s+[^\d\s])", m.group(1))} if m else set()


if __name__ == "__main__":
    sys.exit(training_cli.run_cli(main, None, "python -m ray_efa_eks.tools.exit_status"))
