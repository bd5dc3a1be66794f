"""Deploy-path rehearsal of the EFA gate: the Job's own shell script, as components/addons/efa_check.py
renders it, run against a local Ray cluster's Jobs API with the ConfigMap's files (``check_files()``) laid out
as the working dir.

The cluster is shaped like the deployed one: a 0-CPU head with the dashboard and Jobs API (the check's driver
lands there, as on the GPU-less system node) and worker nodes the test adds and removes: CPU-only, or declaring a
logical GPU (``num_gpus``) with no CUDA behind it. It runs in a child process (commands on stdin) so the test
process never joins it. The GPU "type" is catalogue-shaped (1 GPU, 1 EFA interface per node) to keep the rank
count at two on a 2-core machine; the deadlines are shortened, everything else is what the stack renders.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import warnings
from pathlib import Path

import pytest

pytest.importorskip("ray.job_submission")
pytest.importorskip("aiohttp")  # ray[default]: dashboard + Jobs API

from ray_efa_eks.components.addons.efa_check import (  # noqa: E402
    IMAGE_FLEET_FILE,
    MOUNT,
    Deadlines,
    check_args,
    check_script,
    check_files,
)
from ray_efa_eks.components.nodes.instances import CATALOGUE, InstanceType  # noqa: E402
from ray_efa_eks.tools.mockrun import run_program  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
BIN = str(Path(sys.executable).parent)
IMAGE, SPEC_HASH = "rehearsal/ray:v2", "0123456789ab"
"""What the rehearsal's Ray nodes say they run (their env), and what the gate is rendered for."""
ONE_GPU = InstanceType(
    "rehearsal.1gpu", 4, 16384, gpus=1, gpu_model="L4", efa_supported=True, max_efa_interfaces=1, network_cards=1
)

SERVER = """
import sys, time
import ray
from ray_efa_eks.efacheck.local_cluster import local_cluster
with local_cluster(worker_nodes=0, dashboard=True) as c:
    print("http://" + c.webui_url, c.address, flush=True)
    added = []  # the worker nodes, in the order added
    for line in sys.stdin:
        cmd = line.split()
        if cmd[0] in ("clear", "pop"):  # all worker nodes, or the last one added
            for n in (added[-1:] if cmd[0] == "pop" else list(added)):
                c.remove_node(n)
                added.remove(n)
            end = time.monotonic() + 60  # until the GCS no longer lists them alive (the check reads ray.nodes())
            while sum(n["Alive"] for n in ray.nodes()) > 1 + len(added) and time.monotonic() < end:
                time.sleep(0.5)
        elif cmd[0] == "add":  # add GPUS [ENV=VALUE ...]: the node's raylet (and so its workers) get that env
            env_vars = dict(kv.split("=", 1) for kv in cmd[2:])
            added.append(c.add_node(num_cpus=1, num_gpus=int(cmd[1]), object_store_memory=80 * 1024**2,
                                    **({"env_vars": env_vars} if env_vars else {})))
            c.wait_for_nodes()
        print("ok", flush=True)
"""


class Cluster:
    def __init__(self, env: dict[str, str]):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=REPO
        )
        self.url, _, self.gcs = self.proc.stdout.readline().strip().partition(" ")
        assert self.url.startswith("http://"), f"local cluster did not start (exit {self.proc.poll()})"
        end = time.monotonic() + 120  # the Jobs API answers a little after the dashboard URL is known
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/api/jobs/", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < end, f"Jobs API at {self.url} not ready after 120 s"
            time.sleep(1)
        self.nodes: list[str] = []
        """The worker nodes' ``add`` arguments, in the order added."""

    def do(self, cmd: str) -> None:
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "ok"
        verb, _, arg = cmd.partition(" ")
        if verb == "clear":
            self.nodes.clear()
        elif verb == "pop":
            self.nodes.pop()
        elif verb == "add":
            self.nodes.append(arg)

    def workers(self, *nodes: int | str) -> None:
        """Exactly these worker nodes (``add`` arguments: GPUS [ENV=VALUE ...]). The nodes already up that match the
        start of the list are kept, not restarted: a node's raylet and its Python agents take seconds of CPU to start
        on 2 cores, and a check leaves nothing on them (its ranks are killed and its placement group removed)."""
        want = [str(n) for n in nodes]
        keep = 0
        while keep < min(len(want), len(self.nodes)) and want[keep] == self.nodes[keep]:
            keep += 1
        while len(self.nodes) > keep:
            self.do("pop")
        for n in want[keep:]:
            self.do(f"add {n}")


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    home = tmp_path_factory.mktemp("home")
    e = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
    # the venv's `ray` and `python` first: the Job image has them on PATH; CUDA_VISIBLE_DEVICES unset as in a pod
    e.update(HOME=str(home), PATH=f"{BIN}{os.pathsep}{e.get('PATH', '')}", RAY_USAGE_STATS_ENABLED="0")
    # every Ray "pod" of the rehearsal carries what the stack sets on each Ray container
    e.update(RAY_EFA_EKS_IMAGE=IMAGE, RAY_EFA_EKS_SPEC_HASH=SPEC_HASH)
    e.pop("CUDA_VISIBLE_DEVICES", None)
    return e


@pytest.fixture(scope="module")
def cluster(env):
    c = Cluster(env)
    try:
        yield c
    finally:
        c.proc.stdin.close()
        try:
            c.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            c.proc.kill()


@pytest.fixture(scope="module")
def mount(tmp_path_factory) -> Path:
    """The Job's volume: the ConfigMap's files under <mount>/ray_efa_eks, as the pod sees them."""
    root = tmp_path_factory.mktemp("mount")
    for path, text in check_files().items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root


def script(
    cluster: Cluster, mount: Path, topology_wait_s: int, image_fleet_file: str = IMAGE_FLEET_FILE, **stack: str
) -> str:
    """The Job's script; ``stack`` (``image``, ``spec_hash``) is what the gate checks every Ray pod against;
    ``image_fleet_file`` where the image audit left its verdict (absent here unless a test writes one)."""
    d = Deadlines(head_wait_s=300, topology_wait_s=topology_wait_s, sweep_timeout_s=120)
    args = check_args(ONE_GPU, 2, d, **stack)
    return check_script(cluster.url, args, d, working_dir=str(mount), image_fleet_file=image_fleet_file)


def verdict(out: str) -> dict:
    """The check's JSON object, as it comes back through `ray job logs` in the Job's log."""
    start = out.index('{\n  "verdict"')
    return json.JSONDecoder().raw_decode(out[start:])[0]


def verdict_of(out: str, kind: str) -> dict:
    """The one-line JSON the script itself prints (head unreachable, submit failed, timeout)."""
    line = next(ln for ln in out.splitlines() if ln.startswith(f'{{"verdict": "{kind}"'))
    return json.loads(line)


GPU_TYPES = sorted(n for n, t in CATALOGUE.items() if t.gpus)


def test_the_catalogue_has_gpudirect_rdma_types():
    """Not vacuous: the per-type test below sees both kinds (EC2: p4d/p5 GPUs reach EFA by GPUDirect RDMA)."""
    assert {"p4d.24xlarge", "p5.48xlarge"} <= {n for n in GPU_TYPES if CATALOGUE[n].gpudirect_rdma}
    assert any(not CATALOGUE[n].gpudirect_rdma for n in GPU_TYPES)


@pytest.mark.parametrize("name", GPU_TYPES)
def test_gate_arguments_for_every_catalogue_gpu_type(name):
    """What the gate's check reads from its arguments, per type: GPUs, EFA interfaces and GPUDirect RDMA; a GDRDMA
    type's gate refuses NET connections without /GDRDMA (a g7e log that lacks them comes out 'fallback')."""
    from ray_efa_eks.efacheck.efa_check import parser
    from ray_efa_eks.efacheck.nccl_log import analyze_paths

    it = CATALOGUE[name]
    a = parser().parse_args(check_args(it, 2, Deadlines(), image="img:1"))
    assert (a.expect_nodes, a.expect_gpus_per_node) == (2, it.gpus)
    assert a.expect_nics == (it.max_efa_interfaces or None) and a.expect_gdrdma is it.gpudirect_rdma
    assert a.efa_gbps == (it.efa_gbps or None)
    no_gdr = REPO / "tests" / "fixtures" / "nccl-logs" / "real_efa_g7e_slurm_nccl2292_ofi1180_2node.log"
    assert analyze_paths([no_gdr], expect_gdrdma=a.expect_gdrdma).verdict == (
        "fallback" if it.gpudirect_rdma else "efa"
    )


def test_the_stack_renders_the_rehearsed_script(tmp_path):
    """What the rehearsal runs is the stack's Job command (same function, same arguments from the catalogue)."""
    run = run_program()
    job = run.one("kubernetes:batch/v1:Job")
    cmd = job["spec"]["template"]["spec"]["containers"][0]["command"]
    from ray_efa_eks.components.nodes.instances import CATALOGUE

    image = job["spec"]["template"]["spec"]["containers"][0]["image"]
    env = {
        e["name"]: e["value"]
        for e in run.one("kubernetes:ray.io/v1:RayCluster")["spec"]["headGroupSpec"]["template"]["spec"]["containers"][
            0
        ]["env"]
    }
    args = check_args(
        CATALOGUE["g6.12xlarge"],
        2,
        Deadlines(),
        image=image,
        require_counters=True,
        storage_proof=True,
        spec_hash=env["RAY_EFA_EKS_SPEC_HASH"],
    )
    assert "--efa-gbps" in args and "--compare-socket" not in args
    assert cmd[2] == check_script(
        "http://ray-head-svc.ray.svc.cluster.local:8265", args, Deadlines(), MOUNT, image_fleet_file=IMAGE_FLEET_FILE
    )
    assert args[args.index("--expect-gpus-per-node") + 1] == "4" and args[args.index("--expect-nics") + 1] == "1"
    assert job["spec"]["activeDeadlineSeconds"] == Deadlines().active_deadline_s


def test_cpu_only_workers_exit_2_naming_the_missing_gpus(cluster, mount, env, tmp_path):
    cluster.workers(0, 0)
    digest = "sha256:" + "c" * 64  # the image audit's verdict reaches the check through real `ray job submit`
    fleet = tmp_path / "image-fleet.json"
    fleet.write_text(json.dumps({"image_fleet": {"verdict": "ok", "digest": digest}}))
    r = subprocess.run(
        ["bash", "-c", script(cluster, mount, topology_wait_s=2, image_fleet_file=str(fleet))],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2, r.stdout[-3000:] + r.stderr[-2000:]
    v = verdict(r.stdout)
    assert v["code"] == 2 and v["verdict"] == "undetermined" and v["failure"]["stage"] == "no_gpu", v
    assert v["image"]["digest"] == digest, v.get("image")
    assert "no GPU nodes" in v["failure"]["reason"] and "declare no GPU" in v["failure"]["reason"]
    assert "Traceback" not in r.stdout + r.stderr


def test_second_node_joins_in_time_then_logical_gpus_without_cuda_fail_cleanly(cluster, mount, env):
    """The check waits for the second GPU node, proceeds, picks nccl from the cluster (never gloo) on the GPU-less
    head, and fails cleanly because the declared GPUs have no CUDA behind them."""
    cluster.workers(1)
    p = subprocess.Popen(
        ["bash", "-c", script(cluster, mount, topology_wait_s=120)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    waiting = threading.Event()

    def pump() -> None:
        for ln in p.stdout:
            lines.append(ln)
            if "waiting for the declared topology" in ln:
                waiting.set()

    t = threading.Thread(target=pump, daemon=True)
    t.start()
    try:
        assert waiting.wait(180), "".join(lines)[-3000:]
        cluster.do("add 1")  # the second GPU node boots late, within the deadline
        rc = p.wait(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
    t.join(10)
    out = "".join(lines)
    assert rc == 2, out[-4000:]
    v = verdict(out)
    assert v["failure"]["stage"] == "no_cuda", out[-6000:]
    assert v["backend"] == "nccl" and v["verdict"] not in ("efa", "fallback")
    assert "CUDA is not available in 2 of 2 ranks" in v["failure"]["reason"]
    assert "gloo" not in json.dumps(v) and "Traceback" not in out


@pytest.fixture(scope="module")
def sleeper(tmp_path_factory) -> tuple[Path, Path]:
    """A Job code mount whose stand-in check records where it runs, then sleeps past any budget; and that record."""
    root = tmp_path_factory.mktemp("sleeper")
    record = root / "driver.json"
    check = root / "ray_efa_eks" / "efacheck"  # where the script's python -m finds the check (CHECK_MODULE)
    check.mkdir(parents=True)
    (root / "ray_efa_eks" / "__init__.py").write_text("")
    (check / "__init__.py").write_text("")
    (check / "efa_check.py").write_text(
        "import json, os, time\n"
        f"with open({str(record)!r}, 'w') as f:\n"
        "    json.dump({'pid': os.getpid(), 'ray_address': os.environ.get('RAY_ADDRESS')}, f)\n"
        "print('stand-in check started', flush=True)\n"
        "time.sleep(900)\n"
    )
    return root, record


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_check_that_overruns_its_budget_is_stopped_and_exits_2(cluster, sleeper, env):
    """The script's timeout branch: `timeout <check_s> ray job logs` gives up, the Ray job is stopped (its driver
    killed), and the Job exits 2 with stage `timeout`. The stand-in's driver also shows that the Jobs API handed it
    this cluster's GCS (not another local cluster's on the same machine)."""
    from ray.job_submission import JobStatus, JobSubmissionClient

    mount, record = sleeper
    d = Deadlines(head_wait_s=120, topology_wait_s=1, sweep_timeout_s=1, startup_s=18)  # check_s = 20
    text = check_script(cluster.url, check_args(ONE_GPU, 2, d), d, working_dir=str(mount))
    r = subprocess.run(["bash", "-c", text], env=env, capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 2, out[-4000:]
    v = verdict_of(r.stdout, "undetermined")
    assert v["code"] == 2 and v["failure"]["stage"] == "timeout", v
    assert f"within {d.check_s} s; job stopped" in v["failure"]["reason"]
    job_id = re.search(r"efa-check-\d+-\d+-\d+", out).group(0)
    client = JobSubmissionClient(cluster.url)
    end = time.monotonic() + 60
    while client.get_job_status(job_id) != JobStatus.STOPPED and time.monotonic() < end:
        time.sleep(1)
    assert client.get_job_status(job_id) == JobStatus.STOPPED, client.get_job_info(job_id)
    if not record.exists():  # say so: the check below needs the driver to start within the budget
        warnings.warn(f"the stand-in driver did not start within {d.check_s} s: its GCS address was not checked")
    else:  # the driver started within the budget (it does, unless the machine is swamped)
        seen = json.loads(record.read_text())
        assert seen["ray_address"] == cluster.gcs, (seen, cluster.gcs)
        end = time.monotonic() + 60
        while _alive(seen["pid"]) and time.monotonic() < end:
            time.sleep(1)
        assert not _alive(seen["pid"]), "the stopped job's driver is still running"
    assert "Traceback" not in out


# -- the Job as Pulumi sees it: deadlines agree, re-runs on change, a failed Job does not wedge later ups ----------


def _job_with_options(config: dict | None = None) -> tuple[dict, dict]:
    """The Job's inputs and the options the engine would get (custom timeouts, delete-before-replace)."""
    job = run_program(config).one("kubernetes:batch/v1:Job")
    return job.inputs, {
        "timeouts": job.options.get("custom_timeouts"),
        "delete_before_replace": job.options.get("delete_before_replace", False),
    }


def _secs(go_duration: str) -> int:
    assert go_duration.endswith("s"), go_duration
    return int(go_duration[:-1])


def test_one_deadline_story() -> None:
    job, opts = _job_with_options()
    d = Deadlines()
    script_ = job["spec"]["template"]["spec"]["containers"][0]["command"][2]
    # the script's own waits: the head, then the check's topology wait + start-up + sweep, bounded by `timeout`
    assert f"+ {d.head_wait_s} ))" in script_ and f"timeout {d.check_s} ray job logs" in script_
    assert f"--wait-s {d.topology_wait_s} --timeout-s {d.sweep_timeout_s}" in script_
    assert d.check_s == d.topology_wait_s + d.startup_s + d.sweep_timeout_s
    from ray_efa_eks.efacheck.ranks import STARTUP_S

    assert 2 * STARTUP_S < d.startup_s  # the check's own start-up budgets (before and after the sweep) fit
    assert job["spec"]["activeDeadlineSeconds"] == d.head_wait_s + d.check_s + d.slack_s
    create, update = (_secs(t) for t in opts["timeouts"])
    assert create == update == d.pulumi_timeout_s > job["spec"]["activeDeadlineSeconds"]
    assert create > 600, "pulumi-kubernetes' default Job await (10 min) would give up before the check does"


def test_job_reruns_when_what_it_vouches_for_changes_and_a_failed_job_is_replaced() -> None:
    base, opts = _job_with_options()
    assert base["metadata"]["annotations"]["pulumi.com/replaceUnready"] == "true"
    assert opts["delete_before_replace"] is True  # fixed name: the old Job must go before its replacement
    names = {"base": base["metadata"]["name"]}
    for key, value in [
        ("dlcImage", "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.2"),
        ("gpuInstanceType", "g6.48xlarge"),
        ("gpuNodeCount", 3),
        ("efa", False),
        ("ncclDebug", "INFO"),
    ]:
        cfg = {key: value, **({"allowSingleEfaNode": True} if key == "efa" else {})}
        names[key] = _job_with_options(cfg)[0]["metadata"]["name"]
    assert len(set(names.values())) == len(names), names
    assert names["base"] == _job_with_options()[0]["metadata"]["name"]  # stable when nothing changed


def test_compare_socket_doubles_the_sweep_budget_and_the_await() -> None:
    base, opts = _job_with_options()
    cmp_, cmp_opts = _job_with_options({"efaCheckCompareSocket": True, "efaCheckWaitSeconds": 600})
    d = Deadlines(topology_wait_s=600, sweeps=2)
    assert "--compare-socket" in cmp_["spec"]["template"]["spec"]["containers"][0]["command"][2]
    assert cmp_["spec"]["activeDeadlineSeconds"] == d.active_deadline_s
    assert _secs(cmp_opts["timeouts"][0]) == d.pulumi_timeout_s
    assert cmp_["metadata"]["name"] != base["metadata"]["name"]


# -- the second `pulumi up` -- stale pods, a busy cluster, a gate stopped mid-check -----------------------

JOB_ID = re.compile(r"efa-check-\d+-\d+-\d+")


def client(cluster: Cluster):
    from ray.job_submission import JobSubmissionClient

    return JobSubmissionClient(cluster.url)


def wait_status(cluster: Cluster, job: str, want: set[str], timeout: float = 60) -> str:
    end = time.monotonic() + timeout
    while True:
        status = str(client(cluster).get_job_status(job).value)
        if status in want or time.monotonic() > end:
            return status
        time.sleep(0.5)


class Running:
    """The Job's script in the background, its output pumped; ``until(text)`` waits for a line."""

    def __init__(self, cmd: str, env: dict[str, str]):
        self.p = subprocess.Popen(
            ["bash", "-c", cmd],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self.cond = threading.Condition()
        self.t = threading.Thread(target=self._pump, daemon=True)
        self.t.start()

    def _pump(self) -> None:
        for ln in self.p.stdout:
            with self.cond:
                self.lines.append(ln)
                self.cond.notify_all()

    @property
    def out(self) -> str:
        return "".join(self.lines)

    def until(self, text: str, timeout: float = 180) -> str:
        with self.cond:
            assert self.cond.wait_for(lambda: text in self.out or self.p.poll() is not None, timeout), self.out[-3000:]
        assert text in self.out, self.out[-3000:]
        return self.out

    def wait(self, timeout: float = 300) -> int:
        try:
            return self.p.wait(timeout=timeout)
        finally:
            self.t.join(10)

    def kill(self) -> None:
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait(10)


def test_a_worker_on_another_image_is_stale_not_vouched_for(cluster, mount, env):
    cluster.workers(1, "1 RAY_EFA_EKS_IMAGE=rehearsal/ray:v1 RAY_EFA_EKS_SPEC_HASH=ba9876543210")  # an old pod
    r = subprocess.run(
        ["bash", "-c", script(cluster, mount, 60, image=IMAGE, spec_hash=SPEC_HASH)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2, r.stdout[-3000:] + r.stderr[-2000:]
    v = verdict(r.stdout)
    assert v["failure"]["stage"] == "stale" and v["verdict"] == "undetermined", v
    reason = v["failure"]["reason"]
    assert "1 Ray pod(s)" in reason and "image rehearsal/ray:v1 (expected rehearsal/ray:v2)" in reason, reason
    assert "spec_hash ba9876543210 (expected 0123456789ab)" in reason and " on node " in reason
    assert "Traceback" not in r.stdout + r.stderr


HOLDER = """
import time, ray
from ray.util.placement_group import placement_group
ray.init()
pg = placement_group([{"GPU": 1}, {"GPU": 1}], strategy="STRICT_SPREAD")
ray.get(pg.ready())
print("holding the GPUs", flush=True)
time.sleep(600)
"""


def test_a_busy_cluster_names_the_job_holding_the_gpus_then_proceeds_once_it_ends(cluster, mount, env):
    cluster.workers(1, 1)
    c = client(cluster)
    holder = c.submit_job(entrypoint=f"python -c {shlex.quote(HOLDER)}", submission_id=f"train-run-{os.getpid()}")
    try:
        end = time.monotonic() + 120
        while "holding the GPUs" not in c.get_job_logs(holder):
            assert time.monotonic() < end and c.get_job_status(holder).value in ("PENDING", "RUNNING"), c.get_job_logs(
                holder
            )[-2000:]
            time.sleep(1)
        r = subprocess.run(
            ["bash", "-c", script(cluster, mount, 2)], env=env, capture_output=True, text=True, timeout=300
        )
        assert r.returncode == 2, r.stdout[-3000:] + r.stderr[-2000:]
        v = verdict(r.stdout)
        assert v["failure"]["stage"] == "busy", v
        assert holder in v["failure"]["reason"] and "holds 2 GPU(s)" in v["failure"]["reason"], v
        assert "ray job stop" in " ".join(v["hints"])
        # with time left, the check waits for the holder; once it ends the check goes on (here to the GPUs' CUDA)
        run = Running(script(cluster, mount, 120), env)
        try:
            run.until("the cluster is busy, waiting")
            c.stop_job(holder)
            rc = run.wait()
        finally:
            run.kill()
        assert rc == 2 and verdict(run.out)["failure"]["stage"] == "no_cuda", run.out[-3000:]
    finally:
        c.stop_job(holder)


def test_a_stopped_gate_stops_its_ray_job_and_a_new_gate_stops_an_orphan_then_fails_on_topology(cluster, mount, env):
    """One GPU node of two: the check waits for the second one. A gate stopped while it waits stops its Ray job; one
    killed leaves it running, and the next gate stops that orphan, then fails at its deadline on the topology."""
    cluster.workers(1)
    first = Running(script(cluster, mount, 120), env)
    try:
        first.until("waiting for the declared topology")
        job = JOB_ID.search(first.out).group(0)
        first.p.send_signal(signal.SIGTERM)  # what the kubelet sends when the Job's pod is deleted
        assert first.wait(60) == 143, first.out[-3000:]
    finally:
        first.kill()
    assert f"stopping EFA check job {job}" in first.out
    assert wait_status(cluster, job, {"STOPPED"}) == "STOPPED"
    # SIGKILL leaves no time for the trap: the next gate stops the orphan before it submits its own check
    orphaned = Running(script(cluster, mount, 120), env)
    try:
        orphaned.until("waiting for the declared topology")
        orphan = JOB_ID.search(orphaned.out).group(0)
    finally:
        orphaned.kill()
    assert wait_status(cluster, orphan, {"STOPPED"}, timeout=3) == "RUNNING"
    r = subprocess.run(["bash", "-c", script(cluster, mount, 2)], env=env, capture_output=True, text=True, timeout=300)
    assert f"stopping earlier EFA check job {orphan}" in r.stdout, r.stdout[-3000:]
    assert wait_status(cluster, orphan, {"STOPPED"}) == "STOPPED"
    assert r.returncode == 2, r.stdout[-3000:] + r.stderr[-2000:]
    v = verdict(r.stdout)
    assert v["failure"]["stage"] == "topology" and "1 of 2 expected GPU nodes" in v["failure"]["reason"], v
    assert v["backend"] == "nccl"
    assert "Traceback" not in r.stdout + r.stderr
