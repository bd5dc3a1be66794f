"""One lifecycle for a ``train`` run: a small supervisor process that never imports Ray, and the run in a child.

Why a second process: the driver that imports Ray cannot keep one signal behaviour. Ray 2.58 replaces it in three
places, each at a different moment of the run:

- ``ray.init`` installs a Python SIGTERM handler that is ``sys.exit(signum)`` (ray/_private/worker.py ``init``,
  "terminate any signal before connecting driver"): exit 15, no resume hint.
- Connecting creates the driver's CoreWorker with ``install_failure_signal_handler = True`` (python/ray/_raylet.pyx
  ``CoreWorker.__init__``), and ``RayLog::InstallFailureSignalHandler`` (src/ray/util/logging.cc) installs absl's
  failure signal handler over SIGSEGV, SIGILL, SIGFPE, SIGABRT, SIGBUS, SIGTRAP and SIGTERM: SIGTERM prints
  ``*** SIGTERM received at time=...`` with a stack dump, then re-raises to the previous handler (exit 15, 1, or
  134 when the process aborts meanwhile).
- Ray Train V2 installs its own SIGINT handler for ``fit()`` (ray/train/v2/api/data_parallel_trainer.py
  ``_register_sigint_handler``): the controller is aborted and ``fit()`` may end with ``sys.exit(0)``.
  Ray's own processes (GCS, raylets, workers) block SIGINT and die with their parent (ray/_private/services.py
  ``start_ray_process``: ``pthread_sigmask(SIG_BLOCK, {SIGINT})`` and ``PR_SET_PDEATHSIG``).

A Ctrl-C just after "Connected to Ray cluster" then unwinds a half-made CoreWorker, and the interpreter's teardown
may crash (SIGSEGV) after the JSON line was printed. So the command itself (this module) only supervises: it takes
SIGINT and SIGTERM at any moment, forwards one SIGINT to the run (a child in its own session, where Ray Train's abort
and the local cluster's teardown run as they would for Ctrl-C), waits at most :data:`GRACE_S`, then kills whatever of
the run is left (the child's process group and every process that was ever its descendant: the supervisor is a
child subreaper, ``prctl(PR_SET_CHILD_SUBREAPER)``, so orphaned Ray processes come back to it) and reaps them. It
prints the one ``--json`` line and returns 130 (SIGINT) or 143 (SIGTERM) with the resume hint, whatever the run was
doing: within :data:`GRACE_S` + :data:`KILL_WAIT_S`, inside a pod's default 30 s grace period. The child's stdout
passes through the supervisor, so a reader that closes it (``train --json | head -1``) stops the run the same way:
exit 141.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

from ..efacheck.exit_codes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_PIPE, EXIT_TERMINATED

RESULT_ENV = "RAY_EFA_EKS_TRAIN_RESULT"
"""Set in the run's environment: the file the run writes its outcome to (``{"code", "message", "json"}``)."""
TTY_ENV = "RAY_EFA_EKS_TRAIN_TTY"
"""Set to 1 in the run's environment when the supervisor's stdout is a terminal (the run's own is a pipe)."""
GRACE_S = 15.0
"""How long the run has to stop after the forwarded SIGINT (Ray Train's abort, the local cluster's teardown)."""
KILL_WAIT_S = 5.0
"""After :data:`GRACE_S`: how long killing and reaping what is left may take."""
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def is_run() -> bool:
    """True in the run's own process (started by :func:`supervise`)."""
    return bool(os.environ.get(RESULT_ENV))


def write_result(code: int, message: Optional[str], payload: Optional[dict]) -> None:
    """The run's outcome, for the supervisor: its exit code, its error message (None on success), its JSON line."""
    path = os.environ[RESULT_ENV]
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump({"code": code, "message": message, "json": payload}, f)
    os.replace(tmp, path)


def mark_connected() -> None:
    """The run reached its Ray cluster (``ray.init`` returned): the supervisor's connect deadline no longer applies."""
    Path(f"{os.environ[RESULT_ENV]}.connected").touch()


def _prctl(option: int, value: int) -> bool:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux
        return False


def _in_child() -> None:
    """preexec_fn: the run dies with the supervisor, even when the supervisor is SIGKILLed."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _stat(pid: int) -> Optional[tuple[int, str]]:
    """(parent pid, start time) of a process, from /proc; None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    return int(fields[1]), fields[19]


def descendants(root: int) -> dict[int, str]:
    """Every live process below ``root`` (pid -> start time, so a reused pid is never mistaken for it)."""
    parents: dict[int, list[int]] = {}
    starts: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            st = _stat(int(entry.name))
            if st:
                parents.setdefault(st[0], []).append(int(entry.name))
                starts[int(entry.name)] = st[1]
    found: dict[int, str] = {}
    todo = list(parents.get(root, []))
    while todo:
        pid = todo.pop()
        if pid not in found and pid in starts:
            found[pid] = starts[pid]
            todo.extend(parents.get(pid, []))
    return found


def _alive(pid: int, start: str) -> bool:
    st = _stat(pid)
    return bool(st) and st[1] == start and not _zombie(pid)


def _zombie(pid: int) -> bool:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return text[text.rfind(")") + 2 :].startswith("Z")


def _kill_all(seen: dict[int, str], child: int) -> None:
    """SIGKILL the run's process group and every process seen below the run that is still the same process (only
    the run's own: the supervisor may be a library call in a process with other children)."""
    seen.update(descendants(child))
    try:
        os.killpg(child, signal.SIGKILL)
    except OSError:
        pass
    for pid, start in seen.items():
        if _alive(pid, start):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def _reap(seen: dict[int, str], deadline: float) -> None:
    """Collect the exits of the run's processes (reparented to this subreaper), until all are gone or time is up."""
    while time.monotonic() < deadline:
        for pid in seen:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # not ours to reap (already reaped, or reparented elsewhere)
                pass
        if not any(_alive(pid, start) for pid, start in seen.items()):
            return
        time.sleep(0.05)


class _Relay(threading.Thread):
    """Copies the run's stdout to ours; notes when our reader has gone (EPIPE) and then only drains the run's."""

    def __init__(self, source: Any, closed: threading.Event, wake: threading.Event):
        super().__init__(daemon=True)
        self.source, self.closed, self.wake = source, closed, wake

    def run(self) -> None:
        out = sys.stdout.buffer if hasattr(sys.stdout, "buffer") else None
        for line in iter(self.source.readline, b""):
            if self.closed.is_set():
                continue
            try:
                if out is not None:
                    out.write(line)
                    out.flush()
                else:
                    sys.stdout.write(line.decode(errors="replace"))
                    sys.stdout.flush()
            except (BrokenPipeError, ValueError, OSError):
                self.closed.set()
                self.wake.set()


def supervise(
    cmd: list[str],
    *,
    name: str,
    resume: str,
    as_json: bool,
    tick: Optional[Callable[[], Optional[tuple[int, str]]]] = None,
    tick_every: float = 10.0,
    connect_within: Optional[tuple[float, int, str]] = None,
) -> int:
    """Run ``cmd`` (the run) to its end and return the command's exit code; see the module docstring.

    ``resume``: the hint an interrupted run ends with. ``tick``: called every ``tick_every`` seconds while the run
    lives (the name's lease is renewed there); when it returns (code, message) the run is stopped and ends so.
    ``connect_within``: (seconds, code, message): the run is stopped and ends so unless it called
    :func:`mark_connected` in time (``ray.init`` retries a GCS that accepts and never answers for minutes).
    """
    signals: list[int] = []
    wake, closed, done = threading.Event(), threading.Event(), threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        signals.append(signum)
        wake.set()

    saved = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    workdir = tempfile.mkdtemp(prefix="ray-efa-eks-run-")
    result = Path(workdir, "result.json")
    env = {**os.environ, RESULT_ENV: str(result), "PYTHONUNBUFFERED": "1", TTY_ENV: "1" if _tty() else "0"}
    seen: dict[int, str] = {}
    proc: Optional[subprocess.Popen] = None
    try:
        if signals:
            return _interrupted(signals, name, resume, as_json)
        proc = subprocess.Popen(
            cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, start_new_session=True, preexec_fn=_in_child
        )
        started = time.monotonic()
        relay = _Relay(proc.stdout, closed, wake)
        relay.start()
        stop_at: Optional[float] = None
        lost: Optional[tuple[int, str]] = None
        ticks: list[tuple[int, str]] = []
        if tick is not None:  # in a thread: a slow storage must not delay the answer to a signal
            threading.Thread(target=_ticker, args=(tick, tick_every, ticks, wake, done), daemon=True).start()
        while proc.poll() is None:
            wake.wait(0.5)
            wake.clear()
            seen.update(descendants(proc.pid))
            now = time.monotonic()
            if (signals or closed.is_set()) and stop_at is None:
                _signal(proc, signal.SIGINT)
                stop_at = now + GRACE_S
            if len(signals) > 1 and stop_at is not None:  # a second signal: no more waiting
                stop_at = min(stop_at, now)
            if stop_at is not None and now >= stop_at:
                break
            if (
                lost is None
                and connect_within is not None
                and now - started > connect_within[0]
                and not Path(f"{result}.connected").exists()
            ):
                ticks.append(connect_within[1:])
            if lost is None and ticks:
                lost = ticks[0]
                if stop_at is None:
                    _signal(proc, signal.SIGINT)
                    stop_at = now + GRACE_S
        _kill_all(seen, proc.pid)
        end = time.monotonic() + KILL_WAIT_S  # one bound for killing, reaping and the last of the output
        proc.wait(KILL_WAIT_S)
        _reap(seen, end)
        relay.join(max(0.1, min(1.0, end - time.monotonic())))
        if closed.is_set() and not signals:
            _stdout_gone()
            print(
                f"error: stdout was closed by its reader: training run {name!r} was stopped; {resume}",
                file=sys.stderr,
                flush=True,
            )
            return EXIT_PIPE
        if signals:
            return _interrupted(signals, name, resume, as_json)
        if lost is not None:
            return _say(lost[0], lost[1], {}, as_json)
        return _outcome(result, proc.returncode, name, resume, as_json)
    finally:
        done.set()
        if proc is not None and proc.poll() is None:
            _kill_all(seen, proc.pid)
            _reap(seen, time.monotonic() + KILL_WAIT_S)
        for s, h in saved.items():
            signal.signal(s, h)
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)


def _ticker(
    tick: Callable[[], Optional[tuple[int, str]]], every: float, out: list, wake: threading.Event, done: threading.Event
) -> None:
    """Call ``tick`` every ``every`` seconds until ``done``; its first (code, message) ends the run."""
    while not done.wait(every):
        try:
            result = tick()
        except Exception as e:  # noqa: BLE001 - a renewal that failed is reported, the run goes on until it expires
            print(
                f"[train] warning: renewing the run's owner record failed: {type(e).__name__}: {e}",
                file=sys.stderr,
                flush=True,
            )
            continue
        if result is not None:
            out.append(result)
            wake.set()
            return


def _tty() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def _signal(proc: subprocess.Popen, signum: int) -> None:
    try:
        proc.send_signal(signum)
    except OSError:
        pass


def _stdout_gone() -> None:
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
    except (OSError, ValueError):
        pass


def _say(code: int, message: str, extra: dict, as_json: bool) -> int:
    print(f"error: {message}", file=sys.stderr, flush=True)
    if as_json:
        try:
            print(json.dumps({"error": message, "exit_code": code, **extra}), flush=True)
        except (BrokenPipeError, ValueError, OSError):
            _stdout_gone()
            return EXIT_PIPE
    return code


def _interrupted(signals: list[int], name: str, resume: str, as_json: bool) -> int:
    term = signals[0] == signal.SIGTERM
    code = EXIT_TERMINATED if term else EXIT_INTERRUPTED
    how = "SIGTERM" if term else "Ctrl-C"
    return _say(code, f"interrupted ({how}): training run {name!r} was stopped; {resume}", {}, as_json)


def _outcome(result: Path, returncode: int, name: str, resume: str, as_json: bool) -> int:
    """The run's own outcome; a run that died without one (a signal, a crash) is a failed run."""
    try:
        record = json.loads(result.read_text())
        code = int(record["code"])
    except (OSError, ValueError, KeyError, TypeError):
        how = f"signal {-returncode}" if returncode < 0 else f"exit {returncode}"
        return _say(
            EXIT_FAILED,
            f"training run {name!r}: the run's process ended ({how}) without a result; {resume}",
            {},
            as_json,
        )
    if record.get("message"):
        print(f"error: {record['message']}", file=sys.stderr, flush=True)
    if as_json and record.get("json") is not None:
        try:
            print(json.dumps(record["json"]), flush=True)
        except (BrokenPipeError, ValueError, OSError):
            _stdout_gone()
            return EXIT_PIPE
    return code
