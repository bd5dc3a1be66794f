#!/usr/bin/env python3
"""Mutation testing of the modules that decide (issue 40) with mutmut 3.8.1, one module per run, outside .ci/run.

mutmut 3 mutates a copy of the source (``mutants/``) and selects the live mutant by the module name of each
function (``decorated_func.__module__``), which it derives from the file's path. The tests import the installed
names (``ray_efa_eks.efacheck.nccl_log``) and the editable install maps those to the checkout, so mutmut run in the
checkout would test the unmutated code and every mutant would "survive". This script therefore keeps, per module, a
work dir ``.mutation/<module>/`` (git-ignored) laid out as ``src/ray_efa_eks/<the checkout>`` (mutmut strips ``src.``:
the mutant names are the installed names; ``src/ray_efa_eks/__init__.py`` makes it a regular package, found on
sys.path before the editable finder), with the rest of the tree beside it (the tests read fixtures by path) and a
``[tool.mutmut]`` section naming the one file to mutate and its fast tests (MODULES). ``PYTHONPATH`` points at the
mutated copy too, so a test that runs ``python -m ray_efa_eks...`` in a subprocess tests the mutant as well.

The work dir and mutmut's cache (``mutants/``) are kept between runs: files are copied only when their content
changed, so mutmut regenerates only changed functions; surviving (and timed-out, no-test) mutants are reset before
each run so that tests added since are tried on them; killed ones keep their result. ``--fresh`` starts over.

Every surviving mutant runs every test that covers it, and the Hypothesis properties dominate that: mutmut's runs
set ``RAY_EFA_EKS_PROPERTY_EXAMPLES`` (default 25; ``.ci/run`` keeps the tests' 150) unless it is set already.

Usage (one module per run, under the team's lock; never more than 2 mutmut children):
    flock /work/mutation.lock nice -n 19 .venv/bin/python .ci/mutation.py efacheck/nccl_log.py --survivors /tmp/s.diff
    .venv/bin/python .ci/mutation.py --list                      # the MODULES table
    .venv/bin/python .ci/mutation.py efacheck/nccl_log.py --report-only   # the last run's figures, no run
    ... --tests "tests/efacheck/test_new.py"    # try another test set (its own cache) before adding it to MODULES
    ... --only 'ray_efa_eks.efacheck.verdict.x_judge*'   # rerun one function's mutants after adding a test
Prints per module: mutants, killed, survived, timeout, no tests, other, score = (killed + timeout) / decided, where
decided is every mutant except those not run; writes every survivor's diff (mutmut's) to --survivors.
Needs mutmut (pinned in requirements-mutation.txt; .ci/run does not install it):
    .venv/bin/pip install -r requirements-mutation.txt
Exit 0 when every named module ran (whatever its score), 2 on a usage error, 1 when mutmut failed.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / ".mutation"
MAX_CHILDREN = 2

MODULES: dict[str, list[str]] = {
    # module (path in the checkout) -> pytest arguments that select its fast tests (no Ray cluster); each engineer
    # adds the rows of the modules they own
    "efacheck/nccl_log.py": [
        "tests/efacheck/test_nccl_log.py", "tests/efacheck/test_nccl_log_branches.py",
        "tests/efacheck/test_verdict_properties.py",
    ],
    "efacheck/verdict.py": [
        "tests/efacheck/test_verdict_branches.py", "tests/efacheck/test_efa_check.py",
        "tests/efacheck/test_exporter_witness.py",
        "--deselect", "tests/efacheck/test_efa_check.py::test_local_two_node_cluster_gloo_is_not_efa",  # starts Ray
    ],
    "efacheck/efa_counters.py": [
        "tests/efacheck/test_efa_counters.py", "tests/efacheck/test_efa_counters_branches.py",
        "tests/efacheck/test_exporter_witness.py", "tests/efacheck/test_efa_exporter.py",
        "tests/efacheck/test_verdict_properties.py",
    ],
    "training/fabric.py": [
        "tests/training/test_fabric.py", "tests/training/test_fabric_branches.py",
        "tests/efacheck/test_verdict_properties.py",
        # builds two whole-stack mock runs in each mutant's fork (5.5 s CPU; mutmut times only the call phase, so
        # its wall limit stays 16.5 s, which nice 19 on shared cores passes): every mutant it reached timed out;
        # test_fabric_branches.py asserts its outcomes
        "--deselect", "tests/training/test_fabric.py::test_the_deployed_worker_env_captures_and_a_recorded_efa_log",
    ],
    "efacheck/sweep.py": ["tests/efacheck/test_sweep_branches.py"],
    "efacheck/storage_proof.py": [
        "tests/efacheck/test_storage_proof_branches.py", "tests/efacheck/test_storage_hints.py",
        "tests/efacheck/test_storage_proof.py",
        # these four run prove() in a subprocess (Ray Train's import) against the S3 emulator: past mutmut's 15.5 s
        # wall limit (it times the call phase only: 0.01 s) under nice 19 on shared cores, where 26 of the first
        # run's 453 mutants stopped before the tests said anything; test_storage_proof_branches.py asserts each
        # outcome in process (a stand-in agent, a local filesystem)
        *(arg for name in ("test_storage_proof_writes_lists_reads_and_deletes_with_pod_identity",
                           "test_the_pods_role_policy_admits_every_request_of_the_proof",
                           "test_agent_refusing_credentials_is_a_trust_policy_failure",
                           "test_no_pod_identity_env_and_a_missing_bucket")
          for arg in ("--deselect", f"tests/efacheck/test_storage_proof.py::{name}")),
    ],
    "efacheck/stack_probe.py": ["tests/efacheck/test_stack_probe.py", "tests/efacheck/test_stack_probe_branches.py"],
    "efacheck/worker_pods.py": ["tests/efacheck/test_worker_pods.py"],
    "efacheck/node_check.py": ["tests/efacheck/test_node_check.py"],
    "components/values.py": ["tests/components/test_values.py", "tests/components/test_values_branches.py"],
    "components/config_fields.py": ["tests/components/test_config_fields.py", "tests/components/test_config.py"],
    "components/config.py": [
        "tests/components/test_config.py", "tests/components/test_config_branches.py",
        "tests/components/test_values.py",
    ],
    "tools/preflight.py": [
        "tests/tools/test_preflight_branches.py", "tests/tools/test_preflight_quota.py",
        "tests/tools/test_preflight_args.py",
    ],
    "components/capacity.py": ["tests/components/test_capacity_branches.py"],
    "components/cost.py": ["tests/components/test_cost_branches.py"],
    "tools/aws_rules.py": ["tests/tools/test_aws_rules_branches.py"],
    "tools/security_rules.py": ["tests/tools/test_security_rules_branches.py"],
    "tools/layout.py": ["tests/tools/test_layout_branches.py"],
    "tools/layout_node_groups.py": ["tests/tools/test_layout_branches.py"],
    "tools/layout_pods.py": ["tests/tools/test_layout_branches.py"],
    "tools/layout_network.py": ["tests/tools/test_layout_branches.py"],
    "tools/plan_diff.py": ["tests/tools/test_plan_diff_branches.py"],
    "tools/plan_run.py": ["tests/tools/test_plan_run_branches.py"],
}

STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 34: "skipped", 36: "timeout",
          -24: "timeout", 24: "timeout", 152: "timeout", 255: "timeout", 37: "caught by type check", None: "not run"}
"""mutmut 3.8.1's exit code -> status (mutmut/stats.py ``status_by_exit_code``); anything else is "suspicious"."""
RETRY = {"survived", "no tests", "timeout", "suspicious"}
"""Results reset before a run: tests added since may now kill them (a killed mutant stays killed)."""


def slug(module: str) -> str:
    return module.removesuffix(".py").replace("/", ".")


def installed_path(rel: str) -> str:
    """The path of a checkout file in the work dir's ``src/ray_efa_eks`` (the whole checkout is mirrored there, as
    the editable install resolves it: tools/mockrun.py runs ``<package>/../__main__.py``)."""
    return f"src/ray_efa_eks/{rel}"


def tree_files() -> list[str]:
    """Tracked and untracked-not-ignored files of the checkout (what a commit would hold), without .mutation."""
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                         check=True).stdout.decode()
    return sorted(f for f in out.split("\0") if f and not f.startswith(".mutation/") and (ROOT / f).is_file())


def sync(work: Path) -> list[str]:
    """Mirror the checkout into ``work`` twice: under src/ray_efa_eks/ (what the tests import) and at the top (the
    tests and the fixtures they read by path); copy only changed files (mtime kept: mutmut compares it), drop files gone from the checkout. Returns
    the top-level entries (mutmut's also_copy)."""
    want: dict[str, str] = {}
    for rel in tree_files():
        want[rel] = rel
        want[installed_path(rel)] = rel
    for dst, rel in want.items():
        target = work / dst
        if target.is_file() and filecmp.cmp(ROOT / rel, target, shallow=False):
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, target)
        if dst.startswith("src/") and not dst.endswith(".py"):  # mutmut copies src/ once: refresh its data files
            (work / "mutants" / dst).unlink(missing_ok=True)
    init = work / "src/ray_efa_eks/__init__.py"
    if not init.exists():
        init.write_text('"""Regular package for the mutation copy (.ci/mutation.py): found before the editable '
                        'install."""\n')
    keep = set(want) | {"src/ray_efa_eks/__init__.py", "pyproject.toml"}
    for path in sorted(work.rglob("*")):
        rel = path.relative_to(work).as_posix()
        if path.is_file() and not rel.startswith("mutants/") and rel not in keep and "__pycache__" not in rel:
            path.unlink()
    return sorted({rel.split("/", 1)[0] for rel in want if not rel.startswith("src/")} - {"pyproject.toml"})


def toml_list(items: list[str]) -> str:
    return "[" + ", ".join(json.dumps(i) for i in items) + "]"


def write_config(work: Path, module: str, tests: list[str], also_copy: list[str]) -> None:
    """The checkout's pyproject.toml (pytest options) plus a [tool.mutmut] section for this module; written only
    when it differs (mutmut watches it)."""
    text = (ROOT / "pyproject.toml").read_text()
    text = text.split("\n[tool.mutmut]", 1)[0].rstrip() + "\n"
    text += f"""
[tool.mutmut]
# written by .ci/mutation.py for {module}
source_paths = ["src"]
only_mutate = [{json.dumps(installed_path(module))}]
pytest_add_cli_args_test_selection = {toml_list(tests)}
pytest_add_cli_args = ["-p", "no:cacheprovider"]
also_copy = {toml_list(also_copy)}
use_git_change_detection = false
process_isolation = "forkserver"
on_dependency_change = "ignore"
"""
    cfg = work / "pyproject.toml"
    if not cfg.exists() or cfg.read_text() != text:
        cfg.write_text(text)


def meta_file(work: Path, module: str) -> Path:
    return work / "mutants" / (installed_path(module) + ".meta")


def results(work: Path, module: str) -> dict[str, str]:
    """Mutant name -> status, from mutmut's .meta of the module ({} before a run)."""
    meta = meta_file(work, module)
    if not meta.exists():
        return {}
    for attempt in range(5):  # mutmut rewrites it after each mutant: a read can catch it half written
        try:
            codes = json.loads(meta.read_text())["exit_code_by_key"]
            break
        except ValueError:
            time.sleep(0.5)
    else:
        raise SystemExit(f".ci/mutation.py: {meta}: not JSON after 5 reads (is mutmut writing it?)")
    return {name: STATUS.get(code, "suspicious") for name, code in codes.items()}


def reset_retry(work: Path, module: str) -> int:
    meta = meta_file(work, module)
    if not meta.exists():
        return 0
    data = json.loads(meta.read_text())
    n = 0
    for name, code in data["exit_code_by_key"].items():
        if code is not None and STATUS.get(code, "suspicious") in RETRY:
            data["exit_code_by_key"][name] = None
            n += 1
    meta.write_text(json.dumps(data, indent=4))
    return n


def summary(module: str, status: dict[str, str]) -> tuple[str, list[str]]:
    count = {s: sum(1 for v in status.values() if v == s) for s in set(status.values())}
    killed, timeout, survived = count.get("killed", 0), count.get("timeout", 0), count.get("survived", 0)
    no_tests, not_run = count.get("no tests", 0), count.get("not run", 0)
    other = len(status) - killed - timeout - survived - no_tests - not_run
    decided = len(status) - not_run
    score = f"{100 * (killed + timeout) / decided:.1f}%" if decided else "-"
    line = (f"{module}: mutants {len(status)}, killed {killed}, survived {survived}, timeout {timeout}, "
            f"no tests {no_tests}, other {other}, not run {not_run}, score {score}")
    return line, sorted(n for n, s in status.items() if s not in ("killed", "timeout", "not run"))


def diffs(work: Path, module: str, names: list[str]) -> str:
    """mutmut's own diff of each mutant (one process, in the work dir)."""
    if not names:
        return ""
    code = ("import sys\nfrom mutmut.mutation.diff_apply import get_diff_for_mutant\n"
            f"path = {installed_path(module)!r}\n"
            "for name, status in (l.rstrip('\\n').split('\\t') for l in sys.stdin):\n"
            "    print(f'# {name}: {status}')\n"
            "    print(get_diff_for_mutant(name, path=path))\n    print()\n")
    status = results(work, module)
    run = subprocess.run([sys.executable, "-c", code], cwd=work, capture_output=True, text=True,
                         input="".join(f"{n}\t{status[n]}\n" for n in names))
    return run.stdout + (f"# diff errors:\n{run.stderr}" if run.returncode else "")


def run_module(module: str, args: argparse.Namespace) -> tuple[int, str, str]:
    tests = args.tests.split() if args.tests else MODULES[module]
    work = WORK / (slug(module) + (".custom" if args.tests else ""))  # another test set: another cache
    if args.fresh and work.exists():
        shutil.rmtree(work)
    if not args.report_only:
        work.mkdir(parents=True, exist_ok=True)
        also_copy = sync(work)
        write_config(work, module, tests, also_copy)
        retried = reset_retry(work, module)
        (work / "mutants" / "src").mkdir(parents=True, exist_ok=True)  # exists before Python caches sys.path
        env = {**os.environ, "RAY_EFA_EKS_PROPERTY_EXAMPLES": os.environ.get("RAY_EFA_EKS_PROPERTY_EXAMPLES", "25"),
               "PYTHONPATH": os.pathsep.join([str(work / "mutants" / "src"), str(work / "mutants")]),
               "PYTHONDONTWRITEBYTECODE": "1"}
        print(f"--- {module}: mutmut run in {work} ({retried} earlier survivors retried)", flush=True)
        t0 = time.monotonic()
        run = subprocess.run([sys.executable, "-m", "mutmut", "run", "--max-children", str(MAX_CHILDREN),
                              *(args.only or [])], cwd=work,
                             env=env, stdout=None if args.verbose else subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
        took = time.monotonic() - t0
        if run.returncode != 0:
            tail = (run.stdout or "")[-4000:]
            return 1, f"{module}: mutmut failed (exit {run.returncode}) after {took:.0f} s\n{tail}", ""
        print(f"--- {module}: {took:.0f} s", flush=True)
    line, left = summary(module, results(work, module))
    return 0, line, diffs(work, module, left) if args.survivors else ""


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog=".ci/mutation.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("modules", nargs="*", help="modules to mutate, as paths in the checkout (rows of MODULES)")
    p.add_argument("--list", action="store_true", help="print the MODULES table and exit")
    p.add_argument("--survivors", type=Path, help="write the diff of every surviving mutant to this file")
    p.add_argument("--report-only", action="store_true", help="print the last run's figures; run nothing")
    p.add_argument("--fresh", action="store_true", help="drop the module's work dir and cache first")
    p.add_argument("--tests", help="pytest arguments to use instead of the module's MODULES row (one string; its "
                   "own cache, .mutation/<module>.custom)")
    p.add_argument("--only", action="append", metavar="GLOB",
                   help="run only these mutants (mutmut names, * allowed, e.g. 'ray_efa_eks.efacheck.verdict.x_judge*'"
                        "), even when cached; repeatable")
    p.add_argument("--verbose", action="store_true", help="show mutmut's own output")
    args = p.parse_args(argv)
    if args.list:
        for mod, tests in MODULES.items():
            print(f"{mod}: {' '.join(tests)}")
        return 0
    unknown = [m for m in args.modules if m not in MODULES]
    if not args.modules or unknown:
        print(f".ci/mutation.py: name modules from MODULES ({', '.join(MODULES)})"
              + (f"; unknown: {', '.join(unknown)}" if unknown else ""), file=sys.stderr)
        return 2
    if not args.report_only:
        try:
            import mutmut  # noqa: F401
        except ImportError:
            print(".ci/mutation.py: mutmut is not installed: .venv/bin/pip install -r requirements-mutation.txt",
                  file=sys.stderr)
            return 2
    rc, lines, out = 0, [], []
    for mod in args.modules:
        code, line, diff = run_module(mod, args)
        rc = max(rc, code)
        lines.append(line)
        out.append(diff)
    print("\n".join(lines))
    if args.survivors:
        args.survivors.write_text("".join(out))
        print(f"survivors' diffs: {args.survivors}")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
