"""Every exit status of every ``ray-efa-eks`` command, as data: what each code means, project-wide and per command.

This is the one source for both renderings. Each command's ``--help`` epilog is rendered from it
(:func:`epilog`, through ``ArgumentParser(exit_codes=...)`` in ``efacheck/cli.py``), and so is ``docs/cli.md``
(tools/dev/exit_status.py). They cannot drift apart. Every code is written here once (:class:`ExitStatus`, and the
``EXIT_*`` names every module imports). The table and the CLI kernel (efacheck/cli.py) live in ``efacheck``
because every package with a CLI can import it (training and tools may import efacheck, efacheck nothing outside
itself) and every pod payload carries it: the gate ships efacheck whole, the node agent and ``submit`` ship both
files (components/payload.py). No import outside the standard library.
"""

from __future__ import annotations

import textwrap
from enum import IntEnum


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
    DAMAGED = 65
    INTERNAL = 70
    STORAGE = 73
    IN_USE = 75
    INTERRUPTED = 130
    PIPE = 141
    TERMINATED = 143


EXIT_OK = ExitStatus.OK.value
EXIT_FAILED = ExitStatus.FAILED.value
EXIT_NO_ANSWER = ExitStatus.NO_ANSWER.value
EXIT_UNREADABLE = ExitStatus.UNREADABLE.value
EXIT_RAY_START = ExitStatus.RAY_START.value
EXIT_WRONG_FABRIC = ExitStatus.WRONG_FABRIC.value
EXIT_TOO_SMALL = ExitStatus.TOO_SMALL.value
EXIT_USAGE = ExitStatus.USAGE.value
EXIT_DAMAGED = ExitStatus.DAMAGED.value
EXIT_INTERNAL = ExitStatus.INTERNAL.value
EXIT_STORAGE = ExitStatus.STORAGE.value
EXIT_IN_USE = ExitStatus.IN_USE.value
EXIT_INTERRUPTED = ExitStatus.INTERRUPTED.value
EXIT_PIPE = ExitStatus.PIPE.value
EXIT_TERMINATED = ExitStatus.TERMINATED.value
"""The codes by name, for ``sys.exit`` and ``return``: every module imports these (from here or through
``efacheck/cli.py``) instead of writing a number; tests/test_architecture.py holds every other module to it."""

MEANING: dict[ExitStatus, str] = {
    ExitStatus.OK: "Success: the rules pass, the verdict is efa, the run finished.",
    ExitStatus.FAILED: "A definite negative answer: a broken rule, a failed check, a fallback verdict, a failed run.",
    ExitStatus.NO_ANSWER: "No answer could be given: the program failed, AWS or the cluster did not answer, the verdict is undetermined.",
    ExitStatus.UNREADABLE: "An input file or ref could not be read (missing, binary, malformed, over a size limit).",
    ExitStatus.RAY_START: "Ray could not start a local cluster.",
    ExitStatus.WRONG_FABRIC: "--require-efa: NCCL's fabric was not EFA; the run stopped before checkpointing.",
    ExitStatus.TOO_SMALL: "The Ray cluster has fewer CPUs/GPUs than --workers needs.",
    ExitStatus.USAGE: "Usage error: a bad option or value, refused before anything starts (sysexits EX_USAGE).",
    ExitStatus.DAMAGED: "A run's checkpoints exist and none verifies (a truncated, missing or changed file, a wrong rank count): "
    "nothing was started or overwritten (sysexits EX_DATAERR).",
    ExitStatus.INTERNAL: "An unexpected exception, i.e. a bug: one line on stderr naming the file with the full trace (EX_SOFTWARE).",
    ExitStatus.STORAGE: "The checkpoint storage cannot be written (no such bucket, access denied, a directory that cannot be "
    "created): asked of the storage before Ray starts (sysexits EX_CANTCREAT).",
    ExitStatus.IN_USE: "Another live run owns the run name (its owner record is fresh): retry when it ends (sysexits EX_TEMPFAIL).",
    ExitStatus.INTERRUPTED: "Ctrl-C (128 + SIGINT).",
    ExitStatus.PIPE: "The reader closed stdout (a pipe into head): 128 + SIGPIPE.",
    ExitStatus.TERMINATED: "SIGTERM (128 + SIGTERM): handled like Ctrl-C (same message, JSON line, resume hint and cleanup).",
}
"""What each code means in every command (docs/cli.md's first table)."""

COMMON = {
    64: "usage error",
    70: "internal error (a bug; the trace file is named)",
    130: "interrupted (Ctrl-C)",
    141: "stdout closed by the reader",
    143: "terminated (SIGTERM), handled like Ctrl-C",
}
"""Codes every command has (a command's own row for the same code says more, and wins)."""

_PLAN = {
    0: "the layout rules pass (a warning rule does not fail)",
    1: "a layout rule is broken",
    2: "the stack program failed (a bad config value: the message names the key)",
    3: "unreadable input (no Pulumi.<stack>.yaml, a stack file that is "
    "malformed, too large or an alias bomb, a git ref or saved plan that cannot be read)",
}
_DIFF = {
    0: "the new side's rules pass and no GPU node would roll inside a reservation or Capacity Block",
    1: "a rule is broken on the new side, or the change rolls GPU nodes inside a reservation or Capacity Block",
    2: "a side's program failed (the base ref's too; a stack or program the change adds is not a failure), "
    "or EKS would refuse the change (a kubernetesVersion that skips a minor or goes down, as `pulumi up` "
    "refuses it)",
    3: "unreadable input (a git ref, a saved plan: missing, malformed, not a plan)",
}
_VERDICT = {
    0: "efa: NCCL carried the traffic over EFA",
    1: "fallback: NCCL used sockets (or the check failed)",
    2: "undetermined: the logs do not say",
    3: "the logs could not be read (missing, empty, binary, too large)",
}
COMMANDS: dict[str, dict[int, str]] = {
    "plan": _PLAN,
    "diff": _DIFF,
    "check-rules": _PLAN,
    "preflight": {
        0: "every check passed",
        1: "a check failed (quota, AZ, capacity)",
        2: "undetermined: AWS did not answer or a check could not be made",
    },
    "config-schema": {
        0: "the generated files are up to date (or were rewritten)",
        1: "a generated file is stale",
        2: "not a ray-efa-eks checkout (--root)",
    },
    "catalogue": {
        0: "the catalogue is up to date (or was rewritten)",
        1: "the catalogue is stale",
        2: "an instance type cannot be fully described from the EC2 data, or not a ray-efa-eks checkout (--root)",
    },
    "train": {
        0: "the run finished",
        1: "the run failed (--max-failures exhausted; resume with the same --name)",
        2: "no answer: --address unreachable, the auth token refused, or S3 did not answer the storage check in time",
        4: "Ray could not start",
        5: "--require-efa and the fabric was not efa",
        6: "the cluster is too small for --workers (still, after --wait-for-workers-s), or has no GPU node yet "
        "(--use-gpu without --workers)",
        64: "usage error (bad arguments, an unknown --preset, a --name that would leave --storage-path, "
        "--use-gpu without --address, more local --workers than this machine holds, a --preset/"
        "--batch-size/--workers that cannot fit the GPU's memory): refused before Ray starts",
        130: "interrupted (Ctrl-C) at any moment: the run is stopped and every process of it reaped inside "
        "a pod's default grace period; with --json the last stdout line says so, and the message says how to resume (the same "
        "--name and --storage-path)",
        141: "stdout closed by its reader (`| head -1`): the run is stopped early, like Ctrl-C",
        143: "terminated (SIGTERM) at any moment, handled like Ctrl-C",
        65: "the run's checkpoints exist and none verifies (the damaged file is named): nothing started "
        "or overwritten; move the damaged step_* directories aside, or use a new --name",
        73: "the checkpoint storage cannot be written (no such bucket, access denied, a directory that "
        "cannot be created or written): asked before Ray starts",
        75: "another live run owns this --name (its owner record names host and pid): wait for it, or pick "
        "another --name; a stale record is taken over, with a warning",
    },
    "submit": {
        0: "the job finished",
        1: "the job failed (submit returns the job's own code when it has one)",
        2: "no answer: the Jobs API unreachable, a request not answered by its deadline (docs/cli.md), it "
        "did not take the job, or it refused the auth token",
        5: "the job's own code: --require-efa and the fabric was not efa (any other code of `train` "
        "that the job exits with is passed on the same way)",
    },
    "rayjob": {
        0: "--dry-run printed the objects, or the RayJob's Ray job succeeded",
        1: "the RayJob failed without an exit code of its own (submission failed, activeDeadlineSeconds "
        "passed, stopped), or a RayJob of that --name exists",
        2: "no answer: the Kubernetes API did not answer in --request-timeout-s or refused a call, "
        "--timeout-s passed before the job ended (it keeps running), or the stack's config is refused",
        3: "the stack file could not be read (no Pulumi.<stack>.yaml without --defaults, malformed), or --token-file",
        5: "the job's own code: --require-efa and the fabric was not efa, nothing checkpointed (any other "
        "code of `train` the job exits with is passed on the same way)",
    },
    "efa-check": {
        **_VERDICT,
        1: "fallback, or a bandwidth floor or version check failed",
        2: "undetermined: the logs do not say, or the check could not be answered (topology, deadline)",
        3: "the NCCL logs could not be read (missing, empty, binary, too large)",
    },
    "nccl-verdict": {
        **_VERDICT,
        1: "fallback: NCCL used sockets, or the expected topology was not met (--expect-nodes)",
    },
    "image-fleet": {
        0: "one image: every Ray pod runs the same digest (one JSON line names it); --watch: stopped by "
        "SIGTERM (the verdict is in --out, rewritten after each pass)",
        1: "a mixed fleet: the Ray pods run more than one digest (the JSON line names pods and digests)",
        2: "undetermined: fewer Ray pods running than --expect-pods by --wait-s, a pod with no digest, "
        "or the pods could not be listed (no ServiceAccount token: not in the audit pod)",
    },
    "efa-exporter": {
        0: "stopped by SIGTERM (a server's normal end: the pod is deleted; not 143)",
        3: "cannot serve (--sysfs not a directory, the port in use)",
    },
    "node-check": {
        0: "--once: the node proved its EFA path and its startup taint is removed",
        1: "--once: a check failed, or a Ray worker's efa-provider-check failed on the node (recorded on "
        "it): the startup taint is kept or put back",
        2: "--once: the API server could not be reached or refused a call, or there is none to ask (not "
        "in a pod): nothing proven. Without --once it proves again every --interval until stopped "
        "(SIGTERM: 143)",
    },
    "mutate": {
        0: "every planted bug was killed",
        1: "a planted bug survived",
        2: "a mutation could not be judged "
        "(its old text not found, the mutations file malformed, a named test already failing)",
    },
}
"""Per subcommand: the codes it returns besides :data:`COMMON`, and what each means for it."""

MODULE_COMMANDS = {
    f"ray_efa_eks.{module}": command
    for module, command in {
        "tools.plan": "plan",
        "tools.preflight": "preflight",
        "tools.dev.config_schema": "config-schema",
        "tools.dev.gen_catalogue": "catalogue",
        "training": "train",
        "training.__main__": "train",
        "efacheck.efa_check": "efa-check",
        "efacheck.image_fleet": "image-fleet",
        "efacheck.efa_exporter": "efa-exporter",
        "efacheck.nccl_log": "nccl-verdict",
        "efacheck.node_check": "node-check",
        "tools.dev.mutate": "mutate",
        "tools.rayjob": "rayjob",
    }.items()
}
"""``python -m ray_efa_eks.<module>``: the subcommand whose codes it has (``ray-efa-eks NAME`` runs the same)."""


def codes(command: str) -> dict[int, str]:
    """Every code ``command`` can exit with and what it means there."""
    return dict(sorted({**COMMON, **COMMANDS[command]}.items()))


def command_for(prog: str) -> str:
    """The table's command for a parser's ``prog``: ``ray-efa-eks diff`` -> diff, ``python -m
    ray_efa_eks.tools.plan`` -> plan (a name the table lacks raises KeyError: every CLI has its row)."""
    last = prog.split()[-1]
    return last if last in COMMANDS else MODULE_COMMANDS[last]


def epilog(command: str, width: int = 100) -> str:
    """``--help``'s exit-code block for ``command``: one code per line, its meaning wrapped under it."""
    lines = ["exit codes:"]
    for code, text in codes(command).items():
        lines += textwrap.wrap(
            text,
            width=max(width, 40),
            initial_indent=f"  {code:<4} ",
            subsequent_indent=" " * 7,
            break_on_hyphens=False,
        ) or [f"  {code}"]
    return "\n".join(lines)
