"""One entry point, one exit-status table: tools/dev/exit_status.py, run_cli, docs/cli.md.

Every subcommand's ``--help`` lists the codes the table gives it; docs/cli.md is the table rendered; SIGTERM takes
Ctrl-C's path and exits 143 (train with its resume hint and JSON line, diff removing its temporary plan); an
unexpected exception is one line naming a trace file (exit 70), never a traceback.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ray_efa_eks.tools import command
from ray_efa_eks.tools.dev import exit_status
from ray_efa_eks.efacheck import cli as efacheck_cli

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent / "ray-efa-eks"
TRACEBACK = re.compile(r"Traceback \(most recent call last\)")


def test_docs_cli_md_is_the_table():
    current = exit_status.PAGE.read_text(encoding="utf-8")
    assert current == exit_status.page_text(current), (
        "docs/cli.md is stale: python -m ray_efa_eks.tools.dev.exit_status --write"
    )
    for status in exit_status.ExitStatus:
        assert f"| {int(status)} | {exit_status.MEANING[status]} |" in current


def test_the_codes_are_defined_once():
    assert exit_status.check_consistent() == []
    assert set(exit_status.COMMANDS) == set(command.SUBCOMMANDS), "every subcommand has its row in the table"


@pytest.mark.parametrize("name", sorted(command.SUBCOMMANDS))
def test_help_lists_the_tables_codes(name):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = command.main([name, "--help"])
    assert code == 0, err.getvalue()
    listed = exit_status.help_codes(out.getvalue())
    table = set(exit_status.COMMANDS[name])
    assert table <= listed, f"{name} --help does not list {sorted(table - listed)}"
    assert listed <= table | set(exit_status.COMMON), f"{name} --help lists {sorted(listed - table)}, not in the table"


@pytest.mark.parametrize("name", sorted(command.SUBCOMMANDS))
def test_help_ends_with_the_tables_rows(name, monkeypatch):
    """--help's exit codes are rendered from the table docs/cli.md is rendered from (before: a hand-written epilog per
    CLI, checked only for which numbers it named: its words could say anything)."""
    from ray_efa_eks.efacheck import exit_codes

    monkeypatch.setenv("COLUMNS", "100")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert command.main([name, "--help"]) == 0
    text = out.getvalue()
    block = exit_codes.epilog(name, 98)
    assert text.rstrip().endswith(block), text[-800:]
    assert text.count("exit codes:") == 1, "one exit-code block, no hand-written one beside it"
    for code, meaning in exit_codes.codes(name).items():
        assert f"| {code} | {meaning} |" in exit_status.PAGE.read_text(encoding="utf-8")


def test_module_aliases_print_their_commands_rows(monkeypatch):
    """python -m ray_efa_eks.tools.plan has plan's rows; ray-efa-eks diff has diff's (before: plan's epilog)."""
    from ray_efa_eks.efacheck import exit_codes

    assert exit_codes.command_for("python -m ray_efa_eks.tools.plan") == "plan"
    assert exit_codes.command_for("ray-efa-eks diff") == "diff"
    assert exit_codes.command_for("python -m ray_efa_eks.efacheck.efa_check") == "efa-check"  # the gate's own prog
    with pytest.raises(KeyError):  # one name per module: the checkout's folder name has no row
        exit_codes.command_for("python -m efacheck.efa_check")
    monkeypatch.setenv("COLUMNS", "100")
    proc = subprocess.run(
        [sys.executable, "-m", "ray_efa_eks.tools.plan", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "100"},
    )
    assert proc.returncode == 0 and proc.stdout.rstrip().endswith(exit_codes.epilog("plan", 98)), proc.stdout[-600:]


def test_sigterm_takes_ctrl_c_path_and_exits_143(capsys):
    def main(argv, prog):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
        raise AssertionError("SIGTERM did not arrive")

    before = signal.getsignal(signal.SIGTERM)
    assert efacheck_cli.run_cli(main, [], "demo") == 143
    assert "demo: interrupted (SIGTERM)" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) is before, "run_cli restores the handler it replaced"
    assert efacheck_cli.run_cli(lambda a, p: 130, [], "demo") == 130, "a later Ctrl-C is not read as SIGTERM"


def test_unexpected_exception_is_one_line_and_a_trace_file(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(__import__("tempfile"), "tempdir", str(tmp_path))
    from ray_efa_eks.efacheck import nccl_log

    def boom(argv=None, prog=None):
        raise ZeroDivisionError("planted bug\nsecond line")

    monkeypatch.setattr(nccl_log, "main", boom)
    code = command.main(["nccl-verdict", "x.log"])
    err = capsys.readouterr().err
    assert code == 70 and not TRACEBACK.search(err), err
    assert len(err.strip().splitlines()) == 1 and "ZeroDivisionError: planted bug" in err, err
    path = Path(re.search(r"the full trace is in (\S+);", err).group(1))
    assert path.parent == tmp_path and "Traceback (most recent call last)" in path.read_text()
    assert 'raise ZeroDivisionError("planted bug' in path.read_text()


def test_train_sigterm_says_how_to_resume_like_ctrl_c(tmp_path, capsys):
    """SIGTERM inside fit() (a scheduler stopping the driver) runs Ray Train's abort like Ctrl-C and exits 143 with
    the resume hint (before: exit 134/1, no JSON line, no hint). Stand-in trainer as in test_bad_input's Ctrl-C case."""
    from ray_efa_eks.training.errors import CliError
    from ray_efa_eks.training.request import TrainRequest
    from ray_efa_eks.training.run import run_training

    class RayLikeTrainer:
        def _register_sigint_handler(self, controller):
            signal.signal(signal.SIGINT, lambda signum, frame: sys.exit(0))

        def fit(self):
            self._register_sigint_handler(None)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
            raise AssertionError("SIGTERM did not arrive")

    req = TrainRequest(storage_path=str(tmp_path), name="sched")

    def main(argv, prog):
        try:
            run_training(req)
        except CliError as e:
            print(e, file=sys.stderr)
            return e.code
        return 0

    saved = signal.getsignal(signal.SIGINT)
    try:
        with pytest.MonkeyPatch.context() as m:
            m.setattr("ray_efa_eks.training.trainer.build_trainer", lambda **kw: RayLikeTrainer())
            code = efacheck_cli.run_cli(main, [], "train")
    finally:
        signal.signal(signal.SIGINT, saved)
    err = capsys.readouterr().err
    assert code == 143, err
    assert "interrupted (SIGTERM)" in err and "--name sched" in err and "resume" in err, err


def _wait_for(pred, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return False


def test_diff_removes_its_temporary_plan_on_sigterm(tmp_path):
    """Before: SIGTERM killed the process and left plan-base-* behind in TMPDIR."""
    proc = subprocess.Popen(
        [str(BIN), "diff", "HEAD"],
        cwd=ROOT,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert _wait_for(lambda: any(p.name.startswith("plan-base-") for p in tmp_path.iterdir())), "no temp plan"
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, err
    assert not TRACEBACK.search(err), err
    assert not any(p.name.startswith("plan-base-") for p in tmp_path.iterdir()), list(tmp_path.iterdir())


def test_nccl_verdict_sigterm_exits_143():
    proc = subprocess.Popen(
        [sys.executable, "-m", "ray_efa_eks.efacheck.nccl_log", "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(1.5)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143 and "interrupted" in err and not TRACEBACK.search(err), (proc.returncode, err)


def _options_without_help(sub: str) -> list[str]:
    """Option lines of ``SUB --help`` with no description (argparse prints the flag alone on its line)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        command.main([sub, "--help"])
    lines = out.getvalue().splitlines()
    bad = []
    for i, line in enumerate(lines):
        if not line.startswith("  -") or line.lstrip().startswith("-h"):
            continue
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if re.search(r"\S\s{2,}\S", line.strip()) or (nxt.startswith(" " * 6) and not nxt.strip().startswith("-")):
            continue
        bad.append(line.strip())
    return bad


@pytest.mark.parametrize("name", sorted(command.SUBCOMMANDS))
def test_every_option_has_help(name):
    """A newcomer's tour: --region, --steps and others had none, and --preset did not list the presets."""
    assert _options_without_help(name) == []


def test_diff_and_check_rules_have_their_own_help():
    for name, says in (("diff", "REF"), ("check-rules", "rule")):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert command.main([name, "--help"]) == 0
        text = out.getvalue()
        assert text.startswith(f"usage: ray-efa-eks {name}") and says in text.split("\n\n")[0] + text, text[:400]


def test_catalogue_checks_the_checkout_it_runs_in(tmp_path, monkeypatch, capsys):
    """Before: `catalogue --check` judged the installed package wherever it ran; now the checkout of the cwd."""
    from ray_efa_eks.tools.dev import gen_catalogue

    seen = []
    monkeypatch.setattr(gen_catalogue, "stale", lambda root: seen.append(root) or [])
    monkeypatch.chdir(ROOT / "docs")
    assert command.main(["catalogue", "--check"]) == 0 and seen == [ROOT]
    monkeypatch.chdir(tmp_path)
    assert command.main(["catalogue", "--check"]) == 2 and "not a ray-efa-eks checkout" in capsys.readouterr().err


def test_preflight_honours_aws_region(monkeypatch, capsys):
    """boto3 reads AWS_DEFAULT_REGION only; the AWS CLI and the other SDKs read AWS_REGION first, so preflight does."""
    from ray_efa_eks.tools import preflight

    seen = {}

    def stop(a):
        seen["region"] = a.region
        return 0

    monkeypatch.setattr(preflight, "_main", stop)
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    assert command.main(["preflight"]) == 0 and seen["region"] == "eu-west-1"
    assert command.main(["preflight", "--region", "us-west-2"]) == 0 and seen["region"] == "us-west-2"
    monkeypatch.setenv("AWS_REGION", "mars")
    assert command.main(["preflight"]) == 64 and "AWS_REGION='mars'" in capsys.readouterr().err


def test_an_interrupted_run_prints_no_finalizer_traceback(tmp_path):
    """Ctrl-C in the Pulumi mocks' event loop can leave it with its self-pipe closed; when the interpreter collects
    it, BaseEventLoop.__del__ raised "ValueError: Invalid file descriptor: -1" and Python printed it with a
    traceback after "plan: interrupted" (seen once in CI, test_bad_input's Ctrl-C test). Here that state is made on
    purpose: the run says it was interrupted, exits 130 and prints nothing else."""
    script = tmp_path / "interrupted.py"
    script.write_text(
        "import asyncio, sys\n"
        "from ray_efa_eks.efacheck.cli import run_cli\n"
        "LOOPS = []\n"
        "def main(argv, prog):\n"
        "    loop = asyncio.new_event_loop()\n"
        "    loop._ssock.close()\n"
        "    LOOPS.append(loop)\n"
        "    raise KeyboardInterrupt\n"
        "sys.exit(run_cli(main, [], 'demo'))\n"
    )
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert (p.returncode, p.stderr, p.stdout) == (130, "demo: interrupted (Ctrl-C)\n", "")
