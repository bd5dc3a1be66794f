"""Decide from NCCL_DEBUG=INFO output whether inter-node traffic really went over EFA.

NCCL silently falls back to TCP sockets when the aws-ofi-nccl plugin or the EFA
device is missing, so "training ran" proves nothing; only the log lines that
NCCL and aws-ofi-nccl print at init ("Using network ...", "Selected provider
is ...", "comm ... nNodes N", "Channel NN/M : a[x] -> b[y] via NET/<name>/<dev>")
do. The verdict is ``efa`` only with proof that traffic crossed nodes on the
OFI/Libfabric network with provider efa: NET connection lines over Libfabric,
NCCL's own node count > 1 with every communicator on Libfabric/efa, or two or
more distinct hosts each selecting Libfabric with provider efa, and nothing
contradicting. A Libfabric network without a ``Selected provider`` line is never
efa (the plugin, the early "AWS Libfabric" one too, also runs on tcp/sockets),
and an excerpt with no host name, node count or connection line is undetermined
whatever its line order. One host, P2P/SHM only, or no connection lines at all is
``undetermined`` (with that reason): a green gate on a run where nothing crossed
nodes is the silent failure this module exists to stop. Each verdict cites its
deciding line(s) as ``file:line: text`` (``Report.evidence``).

Formats read: NCCL 2.4 to 2.29 and aws-ofi-nccl up to 1.18 (``Ring NN :`` and
``Channel NN/M :`` lines, ``Initialized/Assigned NET plugin``, ``Bootstrap:
Using``), WARN lines in the ``file.cc:line`` and C++ signature forms with a
timestamp, and launcher prefixes (mpirun ``[1,0]<stdout>:``, srun ``0:``,
kubectl ``--prefix``, CloudWatch timestamps and ``|`` pipes, Ray worker
``(pid=..)`` prefixes and `` [repeated Nx across cluster]`` suffixes).

CLI: python -m ray_efa_eks.efacheck.nccl_log [--json] [--expect-nodes N] [--expect-nics K] [--expect-gdrdma]
FILE_OR_DIR...  (one file per rank, a directory of them (its *.md, *.json... skipped), one combined log, or - for
stdin; a pipe or device given by name is refused, not read forever)
exit 0 = efa, 1 = fallback / failed / expected topology not met, 2 = undetermined,
3 = unreadable input, 64 = usage error (bad arguments), 130 = interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Iterable

from .cli import ArgumentParser, run_cli
from .exit_codes import EXIT_INTERRUPTED
from .nccl_input import NOT_LOGS, UnreadableInput, check_text, iter_files, read_input
from .nccl_parse import Collector, Rank
from .nccl_report import EXIT, HINTS, Report, format_report, with_verdict
from .nccl_verdict import Expect, judge

__all__ = [
    "EXIT",
    "EXIT_INTERRUPTED",
    "HINTS",
    "NOT_LOGS",
    "Rank",
    "Report",
    "UnreadableInput",
    "analyze_bytes",
    "analyze_paths",
    "analyze_text",
    "format_report",
    "main",
    "with_verdict",
]
"""The verdict's public names, importable from here as the docs and the gate use them (the code lives in
nccl_input, nccl_parse, nccl_verdict and nccl_report)."""


def analyze_bytes(
    items: Iterable[tuple[str, bytes | None]],
    expect_nodes: int | None = None,
    expect_nics: int | None = None,
    expect_gdrdma: bool = False,
    _why_missing: dict[str, str] | None = None,
) -> Report:
    """Judge several (source, content) pairs as one job; content None = the rank's log is missing.

    expect_nodes: nodes that must take part (the stack's GPU node count).
    expect_nics: EFA interfaces each node must use (the catalogue's count for the instance type).
    expect_gdrdma: every NET connection must be /GDRDMA (the catalogue says GPUDirect RDMA).
    An input that gives no NCCL line is reported in ``Report.silent`` and makes an otherwise-EFA verdict
    undetermined; only when no input has an NCCL line is the whole set unreadable.
    """
    col = Collector()
    silent: list[str] = []
    for source, buf in items:
        why = (_why_missing or {}).get(source, f"{source}: missing") if buf is None else check_text(buf, source)
        if why:
            silent.append(why)
        else:
            col.feed(buf, source)
    if not col.bufs:
        raise UnreadableInput("; ".join(silent) or "no input")
    return judge(col, Expect(expect_nodes, expect_nics, expect_gdrdma), silent)


def analyze_text(text: str, source: str = "<text>", **expect) -> Report:
    """Judge one log given as text; ``expect`` as for :func:`analyze_bytes`."""
    return analyze_bytes([(source, text.encode())], **expect)


def analyze_paths(paths: Iterable[str], **expect) -> Report:
    """Judge files and directories of files (every file one rank's or one host's log) as one job."""
    files = iter_files(paths)
    if not files:
        raise UnreadableInput(
            f"no log files in {', '.join(paths)} (a directory's {', '.join(NOT_LOGS)} files are not logs)"
        )
    items: list[tuple[str, bytes | None]] = []
    errors: dict[str, str] = {}
    for f in files:
        try:
            items.append((f, read_input(f)))
        except OSError as e:
            errors[f] = f"{f}: {'no such file or directory' if isinstance(e, FileNotFoundError) else e.strerror}"
            items.append((f, None))
    if len(errors) == len(items):
        raise UnreadableInput("; ".join(errors.values()))
    return analyze_bytes(items, **expect, _why_missing=errors)


def _positive(s: str) -> int:
    n = int(s)
    if n < 1:
        raise ValueError(s)
    return n


_positive.__name__ = "positive integer"


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    ap = ArgumentParser(
        prog=prog or "python -m ray_efa_eks.efacheck.nccl_log",
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="A FILE of - reads stdin.",
        exit_codes="nccl-verdict",
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--expect-nodes", type=_positive, metavar="N", help="nodes that must take part (fewer: exit 1)")
    ap.add_argument(
        "--expect-nics",
        type=_positive,
        metavar="K",
        help="EFA interfaces each node must use, e.g. 32 on p5.48xlarge (fewer: exit 1)",
    )
    ap.add_argument(
        "--expect-gdrdma",
        action="store_true",
        help="every NET connection must be /GDRDMA (instance types with GPUDirect RDMA)",
    )
    ap.add_argument("paths", nargs="+", metavar="FILE_OR_DIR")
    a = ap.parse_args(argv)
    try:
        return _main(a)
    except KeyboardInterrupt:
        print("nccl_log: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _main(a: argparse.Namespace) -> int:
    try:
        rep = analyze_paths(
            a.paths, expect_nodes=a.expect_nodes, expect_nics=a.expect_nics, expect_gdrdma=a.expect_gdrdma
        )
    except UnreadableInput as e:
        print(f"nccl_log: unreadable input: {e}", file=sys.stderr)
        return EXIT["unreadable"]
    try:
        print(json.dumps(rep.to_dict(), indent=2) if a.json else format_report(rep))
    except BrokenPipeError:  # e.g. piped into head
        pass
    return rep.exit_code


if __name__ == "__main__":
    sys.exit(run_cli(main, None, "python -m ray_efa_eks.efacheck.nccl_log"))
