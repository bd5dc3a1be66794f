"""Offline plan: what the program declares, with no cloud credentials, no Pulumi CLI and no engine.

Runs the real ``__main__.py`` under the Pulumi SDK's mocks (``tools.mockrun``) with the
stack's ``Pulumi.<stack>.yaml`` plus ``--config`` overrides, then prints the resource tree
and the settings that decide whether multi-node EFA training works and what it costs, and
checks the layout rules (``tools.rules``)::

    python -m ray_efa_eks.tools.plan                                   # text plan of the dev stack
    python -m ray_efa_eks.tools.plan --config gpuInstanceType=p5.48xlarge --json
    python -m ray_efa_eks.tools.plan --check                            # only the rules, one line per break
    python -m ray_efa_eks.tools.plan --diff origin/main                 # this tree vs a git ref (markdown)
    python -m ray_efa_eks.tools.plan --diff old.json new.json           # two saved --json plans

Why offline: reviewers without AWS credentials, forks, and CI without a configured role
still see what a change declares, and a broken EFA layout fails here instead of after the
GPU nodes have been billed. What it cannot see: anything AWS decides (capacity, quotas,
real AZ offerings: ``tools.preflight`` checks those) and the children pulumi-eks
creates inside ``ManagedNodeGroup`` (the CrossGuard pack in ``policy/`` checks those during
a real preview).

The stack's ``Pulumi.<stack>.yaml`` must exist beside the program: a mistyped ``--stack`` is refused
(exit 3) instead of planning the defaults; ``--defaults`` plans a stack that has no file on purpose.
Every config key the plan used is printed (``Config``), secret values as ``[secret]``: they cannot be
decrypted offline, so the program runs with that key's default (``--config KEY=VALUE`` plans a value).

Exit codes: 0 every rule passes; 1 a layout rule is broken (with ``--diff``: or the change rolls a GPU node group
that runs in a reservation or Capacity Block, :func:`rollout_risks`); 2 the program itself failed
(e.g. a config error); 3 unreadable input (no ``Pulumi.<stack>.yaml``, bad YAML, a git ref that
cannot be archived, a saved plan that cannot be read); 64 usage error (a ``--diff`` ref that starts with ``-`` is one:
a ref is never read as an option); 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ..efacheck.exit_codes import command_for
from . import sdk_lazy

sdk_lazy.install()  # before the program first touches aws.ec2 & co.: their classes imported one by one, as used
from ..efacheck.cli import EXIT_INTERRUPTED, EXIT_USAGE, ArgumentParser, run_cli  # noqa: E402
from ..efacheck.exit_codes import EXIT_UNREADABLE  # noqa: E402
from .plan_diff import diff_plans, render_diff  # noqa: E402
from .plan_model import Plan, PlanError, UsageError, load_plan  # noqa: E402
from .plan_render import aws_rules_summary, render_text, rules_summary, violation_line  # noqa: E402
from .plan_run import plan_git_ref, plan_tree, resolve_ref  # noqa: E402
from .stack_file import StackFile, config_warnings, parse_overrides, read_stack  # noqa: E402


def _side(spec: str, args: argparse.Namespace, overrides: dict[str, str], region: str | None) -> Plan:
    """A ``--diff`` operand: a saved ``--json`` plan, or a git ref."""
    if spec.endswith(".json") or _is_file(spec):
        return load_plan(spec)
    program = os.path.relpath(Path(args.program_rel).resolve(), Path.cwd())  # the same file inside the ref's tree
    return plan_git_ref(
        spec, stack=args.stack, overrides=overrides, region=region, program=program, defaults=args.defaults
    )


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    p = ArgumentParser(
        prog=prog or "python -m ray_efa_eks.tools.plan",
        description=_description(prog),
        usage=_USAGE.get((prog or "").rpartition(" ")[2]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        exit_codes=command_for(prog or "plan"),
    )
    p.add_argument("--stack", default="dev", help="stack whose Pulumi.<stack>.yaml is read (default dev; must exist)")
    p.add_argument(
        "--defaults", action="store_true", help="plan a stack that has no Pulumi.<stack>.yaml: every key at its default"
    )
    p.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a ray-efa-eks: key (or aws:region); repeatable",
    )
    p.add_argument(
        "--program",
        default="__main__.py",
        dest="program_rel",
        help="program file (default ./__main__.py: run from the project root, like pulumi)",
    )
    p.add_argument("--json", action="store_true", help="print the plan (or the diff) as one JSON object")
    p.add_argument("--check", action="store_true", help="print only the rule results: one line per broken rule")
    p.add_argument(
        "--diff",
        nargs="+",
        metavar="REF_OR_JSON",
        help="BASE_REF (this tree vs a git ref) or OLD.json NEW.json (two saved --json plans)",
    )
    args = p.parse_args(argv)
    try:
        return _run(p, args)
    except KeyboardInterrupt:
        print("plan: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _config_warnings(args: argparse.Namespace, overrides: dict[str, str]) -> list[str]:
    """Config the program never reads (another namespace, a misspelt one) and PULUMI_CONFIG: warnings, as Pulumi
    accepts them; the stack file's own problems are read_stack's (exit 3)."""
    try:
        sf = read_stack(Path(args.program_rel).resolve().parent, args.stack, defaults=args.defaults)
    except PlanError:
        sf = None  # plan_tree reports it
    return config_warnings(sf or StackFile({}, "", {}, []), overrides)


def _is_file(path: str) -> bool:
    """Path.is_file without its OSError (a name too long for the filesystem) or ValueError (a NUL)."""
    try:
        return Path(path).is_file()
    except (OSError, ValueError):
        return False


_USAGE = {
    "diff": "%(prog)s [--stack S] [--config KEY=VALUE] [--program P] [--json] BASE_REF | OLD.json NEW.json",
    "check-rules": "%(prog)s [--stack S] [--config KEY=VALUE] [--program P] [--defaults]",
}
"""``ray-efa-eks diff`` and ``check-rules`` are this module with preset arguments: their own usage lines."""


def _description(prog: str | None) -> str:
    name = (prog or "").rpartition(" ")[2]
    if name == "diff":
        return (
            "Plan this tree against BASE_REF (a git ref: its own code and Pulumi.<stack>.yaml), or compare two "
            "saved `plan --json` files: changed settings, added/removed resources, new and fixed rule breaks. "
            "REF is any git ref (origin/main, a tag, a commit); it never starts with '-'."
        )
    if name == "check-rules":
        return (
            "Only the layout rules and the AWS API rules of the offline plan: one line per broken rule, exit 1 "
            "when one is broken (the same as `plan --check`)."
        )
    return __doc__.split("\n\n")[0]


def _check_program(path: str) -> None:
    try:
        Path(path).stat()
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as e:
        raise PlanError(f"--program {path[:80]!r}: cannot be read ({getattr(e, 'strerror', None) or e})") from None
    program = Path(path)
    if program.is_dir():
        raise PlanError(
            f"--program {path}: is a directory; name the program file, e.g. --program {program / '__main__.py'}"
        )
    if program.exists() and not program.is_file():
        raise PlanError(f"--program {path}: not a regular file; name the program file, e.g. --program __main__.py")
    if not program.is_file():
        raise PlanError(
            f"--program {path}: no such file; run from the project root (where __main__.py and "
            "Pulumi.<stack>.yaml are) or name the program with --program"
        )


def _run(p: ArgumentParser, args: argparse.Namespace) -> int:
    try:
        overrides, region = parse_overrides(args.config)
        if args.diff:
            if len(args.diff) > 2:
                raise UsageError("--diff takes BASE_REF or OLD.json NEW.json")
            for spec in args.diff:
                if spec.startswith("-"):
                    resolve_ref(spec)  # raises: an option-looking ref is a usage error
            _check_program(args.program_rel)
            before = _side(args.diff[0], args, overrides, region)
            if len(args.diff) == 2:
                after = _side(args.diff[1], args, overrides, region)
            else:
                after = plan_tree(
                    stack=args.stack,
                    overrides=overrides,
                    region=region,
                    program=Path(args.program_rel).resolve(),
                    defaults=args.defaults,
                )
            try:
                d = diff_plans(before, after)
            except (KeyError, TypeError, AttributeError, ValueError) as e:  # a saved plan's settings in a shape
                saved = [s for s in args.diff if s.endswith(".json") or _is_file(s)]  # no plan --json writes
                if not saved:
                    raise
                raise PlanError(
                    f"{' or '.join(saved)}: a saved plan whose settings are malformed "
                    f"({type(e).__name__}: {e}); save it again with: ray-efa-eks plan --json > "
                    "plan.json"
                ) from None
            if args.json:
                print(
                    json.dumps(
                        {
                            "before": before.to_json(),
                            "after": after.to_json(),
                            "changed": [{"setting": k, "before": a, "after": b} for k, a, b in d.changed],
                            "added": d.added,
                            "removed": d.removed,
                        },
                        indent=2,
                    )
                )
            else:
                print(render_diff(d), end="")
            return d.exit_code
        _check_program(args.program_rel)
        for warning in _config_warnings(args, overrides):
            print(f"plan: warning: {warning}", file=sys.stderr)
        plan = plan_tree(
            stack=args.stack,
            overrides=overrides,
            region=region,
            program=Path(args.program_rel).resolve(),
            defaults=args.defaults,
        )
    except UsageError as e:
        p.print_usage(sys.stderr)
        print(f"plan: {e}", file=sys.stderr)
        return EXIT_USAGE
    except PlanError as e:
        print(f"plan: {e}", file=sys.stderr)
        return EXIT_UNREADABLE
    if args.json:
        print(json.dumps(plan.to_json(), indent=2))
    elif args.check:
        if plan.error:
            print(f"program failed: {plan.error}")
        else:
            print(rules_summary(plan))
            for v in plan.violations:
                print(violation_line(v))
        print(aws_rules_summary(plan))
    else:
        print(render_text(plan))
    return plan.exit_code


if __name__ == "__main__":
    sys.exit(run_cli(main, None, "python -m ray_efa_eks.tools.plan"))
