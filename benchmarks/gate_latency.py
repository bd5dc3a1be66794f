"""The EFA gate's time from Job start to verdict, in the local rehearsal.

    python benchmarks/gate_latency.py [--runs 3] [--json]

Runs the gate Job's own shell script, as the stack renders it (``components.addons.efa_check.check_script`` with
``check_args``, the way tests/efacheck/test_gate_rehearsal.py does): the ConfigMap's files (``check_files()``)
laid out in a mount dir as the Ray job's working_dir, against a local Ray cluster shaped like the deployed one
(``efacheck.local_cluster``: a 0-CPU head with the dashboard and Jobs API, where the check's driver lands, plus
two 1-CPU worker nodes). The script waits for the head, submits ``python -m ray_efa_eks.efacheck.efa_check
--json``, follows its log and exits with the check's exit code: everything a ``pulumi up`` waits for once the pods
are up.

The machine has no GPU, so the declared topology is the CPU one (``check_args(None, 2, ...)``: two nodes, no
GPUs expected) and the real check runs its collective sweep on gloo; its verdict is ``undetermined`` (exit 2:
NCCL was not used). The figure is the latency, not the verdict. On EKS the sweep runs on NCCL over EFA, the
ranks start on GPU nodes and the image is bigger: this measures the gate's own overhead (CLI start-ups, job
submission and working_dir upload, driver and rank start-up, the sweep on gloo, the verdict), not the cluster's
boot.

Stages: the script is run with a ``ray`` wrapper first on PATH that records when each ``ray job ...`` call starts
and ends and then runs the venv's own ``ray`` with the same arguments and output (a bash fork, a few ms), and
every output line is timestamped as it arrives:

  head    script start -> the first ``ray job list`` that answers (the head wait; the head is already up here,
          so this is the CLI's start-up)
  submit  ``ray job submit`` (CLI start-up, working_dir upload, submission)
  driver  submitted -> the check's driver connected to Ray (runtime env set-up, interpreter and imports), at the
          time Ray's own "Connected to Ray cluster" log line carries
  check   -> the verdict's JSON in the Job's log (topology, placing and starting the ranks, the sweep, the
          NCCL-log verdict, the log stream to the script)
  total   script start -> the verdict's JSON line; ``tail`` is what the script does after it (the log stream's
          end, ``ray job status``) before it exits

CPU time: the whole run's CPU seconds, summed over the local cluster's processes and the script's (their own
and their reaped children's), since on a shared machine the wall clock also measures the neighbours.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

RAY_WRAPPER = """#!/usr/bin/env bash
# records when each `ray ...` call of the gate script starts and ends, then runs the real ray unchanged
s=$(date +%s.%N)
{real} "$@"
rc=$?
printf '%s\\t%s\\t%s\\t%s\\n' "$s" "$(date +%s.%N)" "$rc" "$*" >> {log}
exit $rc
"""


def _cpu_seconds(pids: set[int]) -> float:
    """CPU seconds of these processes and the children they have reaped (psutil; gone processes count 0)."""
    import psutil

    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def _tree() -> set[int]:
    import psutil

    return {p.pid for p in psutil.Process().children(recursive=True)}


def _wait_jobs_api(url: str, limit_s: float = 120) -> None:
    """The Jobs API answers a little after the dashboard URL is known (as the rehearsal waits for it)."""
    end = time.monotonic() + limit_s
    while True:
        try:
            with urllib.request.urlopen(f"{url}/api/jobs/", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > end:
            raise SystemExit(f"Jobs API at {url} not ready after {limit_s:.0f} s")
        time.sleep(1)


def verdict_of(out: str) -> dict | None:
    """The check's JSON object in the Job's log (as the rehearsal reads it), or None."""
    try:
        start = out.index('{\n  "verdict"')
    except ValueError:
        return None
    try:
        return json.JSONDecoder().raw_decode(out[start:])[0]
    except json.JSONDecodeError:
        return None


STAGES = ("head", "submit", "driver", "check", "tail")
"""head: script start -> the Jobs API answers; submit: `ray job submit`; driver: submitted -> the check's driver
connected to Ray; check: -> the verdict's JSON in the Job's log; tail: -> the script's exit."""
_CONNECTED = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\s+INFO worker\.py:\d+ -- Connected to Ray cluster")


def driver_connected(lines: list[tuple[float, str]], after: float, before: float) -> float:
    """When the check's driver connected to Ray: the time Ray's own log line carries (the log reaches the script
    later, by the `ray job logs` stream), else when that line arrived, else ``after``."""
    for t, ln in lines:
        m = _CONNECTED.match(ln)
        if m and after <= t <= before + 1:
            stamp = time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")) + int(m.group(2)) / 1000
            return stamp if after <= stamp <= t else t
    return after


def one_run(script: str, env: dict[str, str], calls_log: Path, timeout_s: float) -> dict:
    """Run the gate script once; wall times of its stages from the ray wrapper's log and the output's arrival."""
    calls_log.write_text("")
    lines: list[tuple[float, str]] = []
    cpu_before = _cpu_seconds(_tree())
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    ru_before = ru.ru_utime + ru.ru_stime
    t0 = time.time()
    p = subprocess.Popen(
        ["bash", "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT
    )

    def pump() -> None:
        for ln in p.stdout:
            lines.append((time.time(), ln))

    th = threading.Thread(target=pump, daemon=True)
    th.start()
    try:
        p.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        p.kill()
        raise SystemExit(f"the gate script did not finish within {timeout_s:.0f} s") from None
    finally:
        th.join(10)
    t_exit = time.time()
    out = "".join(ln for _, ln in lines)
    # the cluster's processes (and the workers they reaped), plus the script's: bash reaped its `ray` CLIs and this
    # process reaped bash, so they are in RUSAGE_CHILDREN
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = _cpu_seconds(_tree()) - cpu_before + (ru.ru_utime + ru.ru_stime - ru_before)
    v = verdict_of(out)
    t_verdict = next((t for t, ln in lines if ln.startswith('  "verdict"')), None)
    calls = []
    for row in calls_log.read_text().splitlines():
        s, e, rc, args = row.split("\t", 3)
        calls.append({"start": float(s), "end": float(e), "rc": int(rc), "args": args})
    lists = [c for c in calls if c["args"].startswith("job list")]
    submit = next((c for c in calls if c["args"].startswith("job submit") and c["rc"] == 0), None)
    stages: dict[str, float | None] = dict.fromkeys(STAGES)
    if lists and lists[-1]["rc"] == 0:
        stages["head"] = lists[-1]["end"] - t0
    if submit:
        stages["submit"] = submit["end"] - submit["start"]
    if submit and t_verdict:
        t_up = driver_connected(lines, submit["end"], t_verdict)
        stages["driver"] = t_up - submit["end"]
        stages["check"] = t_verdict - t_up
        stages["tail"] = t_exit - t_verdict
    return {
        "rc": p.returncode,
        "verdict": (v or {}).get("verdict"),
        "stage": ((v or {}).get("failure") or {}).get("stage"),
        "backend": (v or {}).get("backend"),
        "world": (v or {}).get("world"),
        "reasons": (v or {}).get("reasons"),
        "total": (t_verdict - t0) if t_verdict else None,
        "exit": t_exit - t0,
        "cpu_s": cpu,
        "stages": stages,
        "tail": out[-3000:],
        "timeline": [(round(t - t0, 2), ln.rstrip()) for t, ln in lines],
        "calls": [(round(c["start"] - t0, 2), round(c["end"] - t0, 2), c["rc"], c["args"][:60]) for c in calls],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="gate runs on one cluster (median and spread reported)")
    ap.add_argument("--timeout-s", type=float, default=600, help="give up on one run after this long")
    ap.add_argument(
        "--timeline",
        action="store_true",
        help="print each run's output lines and `ray` calls with their times from the script's start",
    )
    ap.add_argument("--json", action="store_true", help="last stdout line is a JSON summary")
    a = ap.parse_args()
    if a.runs < 1:
        ap.error("--runs must be >= 1")

    from ray_efa_eks.components.addons.efa_check import Deadlines, check_args, check_files, check_script
    from ray_efa_eks.efacheck.local_cluster import local_cluster

    with tempfile.TemporaryDirectory(prefix="gate-") as tmp:
        tmpd = Path(tmp)
        mount = tmpd / "mount"  # the Job's volumes: the ConfigMap's files as the pod sees them
        for path, text in check_files().items():
            (mount / path).parent.mkdir(parents=True, exist_ok=True)
            (mount / path).write_text(text)
        wrap = tmpd / "bin"
        wrap.mkdir()
        calls_log = tmpd / "ray-calls.tsv"
        (wrap / "ray").write_text(RAY_WRAPPER.format(real=BIN / "ray", log=calls_log))
        (wrap / "ray").chmod(0o755)
        (tmpd / "home").mkdir()
        # as the rehearsal: the venv's `ray` and `python` first on PATH (the Job image has them), a fresh HOME, no
        # inherited Ray address/auth, CUDA_VISIBLE_DEVICES unset as in a pod
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
        env.update(
            HOME=str(tmpd / "home"),
            PATH=f"{wrap}{os.pathsep}{BIN}{os.pathsep}{env.get('PATH', '')}",
            RAY_USAGE_STATS_ENABLED="0",
        )
        env.pop("CUDA_VISIBLE_DEVICES", None)
        d = Deadlines(head_wait_s=300, topology_wait_s=120, sweep_timeout_s=300)
        args = check_args(None, 2, d)  # two CPU nodes declared, no GPU: the check runs on gloo

        runs = []
        # the check's driver runs `python -m ray_efa_eks.efacheck.efa_check` with the cluster's PATH: the venv's
        # python first, as the image's python has Ray (the rehearsal starts its cluster with the same PATH)
        os.environ["PATH"] = f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"
        # (local_cluster gives the cluster a private Ray temp root, so the Jobs API starts the check's driver on
        # this cluster, not on another engineer's; see its comments)
        with local_cluster(worker_nodes=2, dashboard=True) as c:
            url = "http://" + c.webui_url
            _wait_jobs_api(url)
            script = check_script(url, args, d, working_dir=str(mount))
            for i in range(a.runs):
                r = one_run(script, env, calls_log, a.timeout_s)
                runs.append(r)
                s = r["stages"]
                print(
                    f"[gate] run {i + 1}/{a.runs}: verdict {r['verdict']} (exit {r['rc']}, backend {r['backend']},"
                    f" ranks {r['world']}) at {_f(r['total'])} s: "
                    + ", ".join(f"{k} {_f(s[k])}" for k in STAGES)
                    + f"; exit at {r['exit']:.1f} s; CPU {r['cpu_s']:.1f} s",
                    flush=True,
                )
                if a.timeline:
                    for start, end, rc, call in r["calls"]:
                        print(f"    {start:7.2f}..{end:7.2f} s  ray {call} (exit {rc})")
                    for t, ln in r["timeline"]:
                        print(f"    {t:7.2f} s | {ln[:160]}")
                if r["total"] is None or r["verdict"] != "undetermined" or r["stage"] is not None:
                    # a failed stage (timeout, rank error, ...) is not the gate's latency: show why and stop
                    sys.stderr.write(r["tail"] + "\n")
                    print(
                        f"the check did not reach its verdict as expected (verdict {r['verdict']}, failure "
                        f"stage {r['stage']}); see its output above",
                        file=sys.stderr,
                    )
                    return 2

    def med(key: str, stage: bool = False) -> tuple[float, float, float]:
        xs = [(r["stages"][key] if stage else r[key]) for r in runs]
        xs = [x for x in xs if x is not None]
        return (statistics.median(xs), min(xs), max(xs)) if xs else (float("nan"),) * 3

    total, exit_, cpu = med("total"), med("exit"), med("cpu_s")
    print(
        f"gate script start -> verdict, {a.runs} run(s) on one cluster, {os.cpu_count()} CPUs "
        f"(verdict {runs[0]['verdict']}: {(runs[0]['reasons'] or ['?'])[0]}):"
    )
    print(f"  {'stage':<36} {'median s':>9} {'min..max s':>14}")
    labels = {
        "head": "head wait (`ray job list` answers)",
        "submit": "submit (`ray job submit`)",
        "driver": "driver up (connected to Ray)",
        "check": "check (ranks, sweep, verdict)",
        "tail": "after the verdict: log end, status",
    }
    rows = [("start -> verdict", total)] + [(f"  {labels[k]}", med(k, True)) for k in STAGES[:-1]]
    rows += [
        ("start -> script exit", exit_),
        (f"  {labels['tail']}", med("tail", True)),
        ("CPU s, cluster + script", cpu),
    ]
    for name, (m, lo, hi) in rows:
        print(f"  {name:<36} {m:9.2f} {lo:6.2f}..{hi:<6.2f}")
    if a.json:
        print(
            json.dumps(
                {
                    "runs": a.runs,
                    "verdict": runs[0]["verdict"],
                    "backend": runs[0]["backend"],
                    "total_median_s": total[0],
                    "total_min_s": total[1],
                    "total_max_s": total[2],
                    "exit_median_s": exit_[0],
                    "stages_median_s": {k: med(k, True)[0] for k in STAGES},
                    "cpu_median_s": cpu[0],
                    "totals_s": [round(r["total"], 2) for r in runs],
                }
            )
        )
    return 0


def _f(x: float | None) -> str:
    return "?" if x is None else f"{x:.1f}"


if __name__ == "__main__":
    sys.exit(main())
