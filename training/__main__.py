"""CLI: ``python -m ray_efa_eks.training`` trains locally (or on --address); ``submit`` sends it to a RayCluster.

Examples:
    python -m ray_efa_eks.training --json                      # local 2-node CPU cluster, tiny model
    python -m ray_efa_eks.training --address auto --use-gpu --preset 1b   # one rank per GPU the cluster offers
    kubectl -n ray port-forward svc/ray-head-svc 8265:8265 &
    export RAY_AUTH_TOKEN=$(pulumi stack output rayAuthToken --show-secrets)   # the cluster's Ray token
    python -m ray_efa_eks.training submit --address http://127.0.0.1:8265 -- --use-gpu

``submit`` uploads the ``training`` package (found through the import system), plus the few ``efacheck``
modules its fabric verdict uses (:data:`EFACHECK_FILES`), as the job's working_dir (``ray_efa_eks/training``,
``ray_efa_eks/efacheck``: the layout they are installed in, so their imports read the same) and runs
``python -m ray_efa_eks.training --address auto <args after -->`` there, follows the job's log and exits with the job's own exit code. A cluster in Ray token mode needs ``RAY_AUTH_TOKEN`` (or
``RAY_AUTH_TOKEN_PATH``) in the environment; ``submit`` then sets ``RAY_AUTH_MODE=token`` itself, which
Ray's Jobs SDK needs before it sends the token.

Exit codes (never a traceback): the ``train`` and ``submit`` rows of the one exit-code table
(``efacheck/exit_codes.py``), printed at the end of ``--help`` and in docs/cli.md. The checkpoint storage is asked
before Ray starts (``training/storage_check.py``): 73 when it cannot be written, 2 when S3 does not answer in time.

Fabric: every run judges which network its collectives used with the EFA gate's own code (``training/fabric.py``
over ``efacheck.nccl_log``): a ``[fabric]`` line once NCCL has initialised, and ``fabric`` in the ``[summary]``
line and the ``--json`` object.

This module is the command line only: the options are parsed (``training/parser.py``) into a
:class:`~.request.TrainRequest`; the run is ``training/run.py`` (what it needs first: ``training/reach.py``) and
``submit`` is ``training/submit.py``. Their public names are importable from here too.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Optional, Sequence

from ..efacheck.cli import internal_error, interrupted_code, interruption, run_cli
from ..efacheck.exit_codes import EXIT_INTERNAL, EXIT_USAGE
from .errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_RAY_START,
    EXIT_TOO_SMALL,
    EXIT_UNREACHABLE,
    EXIT_WRONG_FABRIC,
    CliError,
)
from .parser import check_train_args, submit_parser, train_parser
from .reach import (
    PROBE_TIMEOUT_S,
    check_cluster_fits,
    check_storage_reachable,
    place_gpu_ranks,
    probe,
    probe_ray_address,
)
from .request import (
    MAX_BATCH_SIZE,
    MAX_STEPS,
    TrainRequest,
    address_problem,
    gpu_memory_problem,
    run_name_problem,
    storage_problem,
)
from .run import (
    CONNECT_TIMEOUT_S,
    CURRENT_RUN,
    fabric_words,
    main_train,
    publish_fabric,
    refusal_message,
    resume_hint,
    run_training,
    supervise_train,
)
from .submit import (
    EFACHECK_FILES,
    NAMESPACE,
    REQUEST_TIMEOUT_S,
    UPLOAD_TIMEOUT_S,
    SubmitRequest,
    set_token_mode,
    job_exit_code,
    main_submit,
    stage_package,
    submit_entrypoint,
)

__all__ = [
    "CONNECT_TIMEOUT_S",
    "EFACHECK_FILES",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_RAY_START",
    "EXIT_TOO_SMALL",
    "EXIT_UNREACHABLE",
    "EXIT_WRONG_FABRIC",
    "MAX_BATCH_SIZE",
    "MAX_STEPS",
    "NAMESPACE",
    "PROBE_TIMEOUT_S",
    "REQUEST_TIMEOUT_S",
    "UPLOAD_TIMEOUT_S",
    "CliError",
    "SubmitRequest",
    "TrainRequest",
    "address_problem",
    "check_cluster_fits",
    "check_storage_reachable",
    "check_train_args",
    "fabric_words",
    "gpu_memory_problem",
    "job_exit_code",
    "main",
    "main_submit",
    "main_train",
    "place_gpu_ranks",
    "probe",
    "probe_ray_address",
    "publish_fabric",
    "refusal_message",
    "resume_hint",
    "run_name_problem",
    "run_training",
    "stage_package",
    "storage_problem",
    "submit_entrypoint",
    "submit_parser",
    "supervise_train",
    "train_parser",
]
"""The command's public names, importable from here as before the run, submit and argument code moved out."""

DEBUG_ENV = "RAY_EFA_EKS_DEBUG"
"""Set to 1 to get the traceback of an unexpected error (the CLI prints one line otherwise)."""


def _split_submit(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    rest = list(argv)
    if "--" in rest:
        i = rest.index("--")
        return rest[:i], rest[i + 1 :]
    return rest, []


def _option(argv: list[str], flag: str) -> Optional[str]:
    """The last value given to ``flag`` (``--flag V`` or ``--flag=V``), read before the parser exists."""
    value = None
    for i, a in enumerate(argv):
        if a == "--":
            break
        if a == flag and i + 1 < len(argv):
            value = argv[i + 1]
        elif a.startswith(f"{flag}="):
            value = a.partition("=")[2]
    return value


def _main(argv: list[str], prog: str) -> int:
    if argv and argv[0] == "submit":
        set_token_mode()  # before anything imports ray: Ray reads RAY_AUTH_MODE once, when its config loads
        prog = prog if prog.endswith(" submit") else f"{prog} submit"  # `ray-efa-eks submit` names it already
        p = submit_parser(prog)
        own, train = _split_submit(argv[1:])
        args = p.parse_args(own)
        if any(not kv or "=" not in kv or kv.startswith("=") for kv in args.env):
            p.error(f"--env takes KEY=VALUE, got {[kv for kv in args.env if '=' not in kv or kv.startswith('=')]}")
        tp = train_parser(prog=f"{prog} ... --")
        job = check_train_args(tp, tp.parse_args(train), local=False)  # fails here, not minutes later in the job
        if job.address is not None:
            tp.error("--address after -- is set by submit (the job connects with --address auto)")
        return main_submit(
            SubmitRequest(address=args.address, pip=tuple(args.pip), env=tuple(args.env), no_wait=args.no_wait), train
        )
    name = _option(argv, "--name")
    if name and not run_name_problem(name):  # the parser and its checks import torch and Ray: seconds
        CURRENT_RUN[:] = [name, resume_hint(name, _option(argv, "--storage-path"))]
    p = train_parser(prog)
    req = check_train_args(p, p.parse_args(argv))
    from . import lifecycle

    return main_train(req) if lifecycle.is_run() else supervise_train(req, argv)


def main(argv: Optional[Sequence[str]] = None, prog: str = "python -m ray_efa_eks.training") -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in argv and not (argv and argv[0] == "submit")
    try:
        return _main(argv, prog)
    except SystemExit as e:  # argparse: --help (0) or a usage error (64), its message already on stderr
        code = e.code if isinstance(e.code, int) else EXIT_USAGE
        if as_json and code:
            what = "usage error (see stderr)" if code == EXIT_USAGE else f"exited with {code}"
            print(json.dumps({"error": what, "exit_code": code}), flush=True)
        return code
    except CliError as e:
        code, message, extra = e.code, str(e), e.extra
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM through run_cli, before or after the run itself
        code, message, extra = interrupted_code(), f"interrupted ({interruption()})", {}
        if CURRENT_RUN:
            message += f": training run {CURRENT_RUN[0]!r} was stopped before it started; {CURRENT_RUN[1]}"
    except Exception as e:  # a failure we did not anticipate: one line naming the trace file, not a traceback
        code, message, extra = EXIT_INTERNAL, internal_error(prog, e).split(": ", 1)[1], {}
        if os.environ.get(DEBUG_ENV):
            import traceback

            traceback.print_exc()
    from . import lifecycle

    if lifecycle.is_run():  # the supervisor prints it
        lifecycle.write_result(code, message, {"error": message, "exit_code": code, **extra} if as_json else None)
        return code
    print(f"error: {message}", file=sys.stderr, flush=True)
    if as_json:
        print(json.dumps({"error": message, "exit_code": code, **extra}), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(run_cli(main, None, "python -m ray_efa_eks.training"))
