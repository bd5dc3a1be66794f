"""``ray-efa-eks``: one command for every tool of the project, each subcommand the module it names.

Each subcommand hands its arguments to that module's ``main`` unchanged, so its options and exit codes are the
module's own (``python -m ray_efa_eks.<package>.<module>`` stays as an alias). ``ray-efa-eks SUBCOMMAND --help``
shows them; tools/dev/exit_status.py tables every code (docs/cli.md). Both run through ``run_cli``
(training/cli.py): 64 usage, Ctrl-C 130, SIGTERM 143, an unexpected exception one line and a trace file (70).
"""

from __future__ import annotations

import importlib
import sys
from typing import NamedTuple

from ..efacheck.cli import EXIT_USAGE, run_cli

ROOT = __package__.rpartition(".")[0] or "ray_efa_eks"


class Subcommand(NamedTuple):
    module: str
    """Module under the ``ray_efa_eks`` package whose ``main(argv, prog)`` runs it."""
    prefix: tuple[str, ...]
    """Arguments put in front of the user's (``submit`` is ``training submit``)."""
    summary: str
    positionals_after: str | None = None
    """The user's positional arguments go after this flag (``diff REF`` is ``plan ... --diff REF``)."""


SUBCOMMANDS: dict[str, Subcommand] = {
    "plan": Subcommand("tools.plan", (), "offline plan of a stack: resources, settings, layout rules, cost"),
    "diff": Subcommand(
        "tools.plan", (), "plan of this tree against a git ref, or two saved --json plans", positionals_after="--diff"
    ),
    "check-rules": Subcommand("tools.plan", ("--check",), "only the layout rules: one line per broken rule"),
    "preflight": Subcommand("tools.preflight", (), "read-only AWS checks before `pulumi up` (quota, AZ, capacity)"),
    "config-schema": Subcommand(
        "tools.dev.config_schema", (), "check or rewrite the references generated from the code"
    ),
    "catalogue": Subcommand(
        "tools.dev.gen_catalogue", (), "check or regenerate the instance catalogue from EC2's data"
    ),
    "train": Subcommand("training.__main__", (), "train the FSDP model (local Ray cluster, or --address)"),
    "submit": Subcommand("training.__main__", ("submit",), "submit the training job to a RayCluster's Jobs API"),
    "rayjob": Subcommand(
        "tools.rayjob", (), "a team's training run as a RayJob in its Kueue queue: print, apply, follow to its result"
    ),
    "efa-check": Subcommand("efacheck.efa_check", (), "the EFA proof: collective sweep + NCCL log verdict on Ray"),
    "image-fleet": Subcommand(
        "efacheck.image_fleet",
        (),
        "which image digest every Ray pod runs, and whether they agree (in a pod: the gate's image audit)",
    ),
    "efa-exporter": Subcommand(
        "efacheck.efa_exporter", (), "serve a sysfs tree's EFA port counters to Prometheus (the node agent)"
    ),
    "node-check": Subcommand(
        "efacheck.node_check", (), "prove a node's EFA path and remove its startup taint (the node agent)"
    ),
    "nccl-verdict": Subcommand("efacheck.nccl_log", (), "judge NCCL_DEBUG=INFO logs: efa, fallback or undetermined"),
    "mutate": Subcommand(
        "tools.dev.mutate", (), "plant each bug of tools/dev/mutations.toml in a copy; its tests must fail"
    ),
}
PROG = "ray-efa-eks"
_PLAN_VALUE_OPTIONS = ("--stack", "--config", "--program")
"""``plan`` options that take a value: their values are not the diff's positional arguments."""


def _positionals_last(args: list[str], flag: str) -> list[str]:
    """``[--stack prod] REF`` -> ``[--stack prod] --diff REF``: options keep their values, positionals follow flag."""
    options, positionals, i = [], [], 0
    while i < len(args):
        a = args[i]
        if a == "--":
            positionals += args[i + 1 :]
            break
        if a in _PLAN_VALUE_OPTIONS and i + 1 < len(args):
            options += args[i : i + 2]
            i += 2
            continue
        (options if a.startswith("-") else positionals).append(a)
        i += 1
    return [*options, flag, *positionals] if positionals else [*options, flag]


DEV_PREFIX = "tools.dev."
"""Modules under tools/dev/: the project's own developer tools, listed apart from the user's commands."""


def usage() -> str:
    width = max(map(len, SUBCOMMANDS))

    def rows(dev: bool) -> str:
        return "\n".join(
            f"  {name:<{width}}  {sub.summary}"
            for name, sub in SUBCOMMANDS.items()
            if sub.module.startswith(DEV_PREFIX) == dev
        )

    return (
        f"usage: {PROG} SUBCOMMAND [ARGS ...]\n\ncommands:\n{rows(False)}\n\n"
        f"developer tools (this repository's checks and generated references):\n{rows(True)}\n\n"
        f"`{PROG} SUBCOMMAND --help` lists a subcommand's options and exit codes; 64 is always a usage error.\n"
    )


def main(argv: list[str] | None = None) -> int:
    """``ray-efa-eks ARGS``: the subcommand's exit code (tools/dev/exit_status.py), never a traceback."""
    return run_cli(_dispatch, argv, PROG)


def _dispatch(argv: list[str], prog: str) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), end="", file=sys.stdout if argv else sys.stderr)
        return 0 if argv else EXIT_USAGE
    name, rest = argv[0], argv[1:]
    sub = SUBCOMMANDS.get(name)
    if sub is None:
        print(f"{PROG}: error: unknown subcommand {name!r}\n\n{usage()}", end="", file=sys.stderr)
        return EXIT_USAGE
    module = importlib.import_module(f"{ROOT}.{sub.module}")  # inside run_cli: a failing import is one line too
    args = _positionals_last(rest, sub.positionals_after) if sub.positionals_after else rest
    if sub.positionals_after:
        flag = args.index(sub.positionals_after)
        odd = [a for a in args[flag + 1 :] if a.startswith("-")]
        if odd:  # came after `--`: a ref is never an option (tools.plan.resolve_ref)
            print(
                f"{PROG} {name}: error: {odd[0]!r} is not a git ref or a saved plan (a ref never starts with "
                f"'-'); e.g. {PROG} {name} origin/main",
                file=sys.stderr,
            )
            return EXIT_USAGE
    prog = f"{PROG} {name}"
    return run_cli(lambda a, p: module.main(a, prog=p), [*sub.prefix, *args], prog)


if __name__ == "__main__":
    sys.exit(main())
