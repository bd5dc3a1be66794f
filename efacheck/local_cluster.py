"""Local Ray cluster shaped like the deployed one: CPU-less head + 2 worker nodes."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

import ray
from ray._private import ray_constants
from ray.cluster_utils import Cluster

_LIGHT_ENV = {
    "RAY_DEDUP_LOGS": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_TRAIN_ENABLE_STATE_ACTOR_RECONCILIATION": "0",
    # Ray starts workers at nice 15; on a shared laptop/CI box that hands the training
    # ranks' CPU to any other process. Run them at the same priority as everything else.
    "RAY_worker_niceness": "0",
    # The Ray Train controller drains one report per worker per poll (default every 2 s) and
    # ray.train.report blocks while the previous one is undrained; the tiny CPU model reports
    # every ~0.5 s, so poll faster. This also shortens the window in which a killed worker
    # loses its last, not yet collected, checkpoint report.
    "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.25",
    # Local nodes are never preempted; skip the per-run preemption watcher actor.
    "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
    # Ray Train's print patch tees worker prints to stdout and the log, so each line shows twice.
    "RAY_TRAIN_ENABLE_PRINT_PATCH": "0",
    # The dashboard starts each module in a subprocess and gives up after 30 s (ray/dashboard/consts.py
    # SUBPROCESS_MODULE_WAIT_READY_TIMEOUT): "Module MetricsHead failed to start" on a loaded 2-core box.
    "RAY_DASHBOARD_SUBPROCESS_MODULE_WAIT_READY_TIMEOUT": "180",
}


def add_worker_node(
    cluster: Cluster,
    num_cpus: int = 1,
    num_gpus: int = 0,
    object_store_memory: int = 80 * 1024**2,
    log_monitor: bool = True,
):
    """Add a worker node with its own Ray temp dir, as a pod has its own disk; removed by ``local_cluster``.

    Nodes sharing the head's temp dir share one ``runtime_resources`` dir, and each node's runtime-env agent
    deletes and re-extracts a job's working_dir there when it installs it: a job driver's working directory
    (``python -m ray_efa_eks.training`` from the submitted package) vanishes under it while it imports.
    """
    temp_dir = tempfile.mkdtemp(prefix="rn-")  # short: Ray's unix socket paths live under it
    cluster.__dict__.setdefault("_node_temp_dirs", []).append(temp_dir)
    # ray.cluster_utils starts added nodes without a log monitor, so nothing their workers print (the ranks'
    # [train] and [fabric] lines) would reach the driver; a pod's raylet runs one.
    return cluster.add_node(
        num_cpus=num_cpus,
        num_gpus=num_gpus,
        object_store_memory=object_store_memory,
        temp_dir=temp_dir,
        dashboard_agent_listen_port=0,
        include_log_monitor=log_monitor,
    )


@contextmanager
def local_cluster(
    worker_nodes: int = 2,
    cpus_per_node: int = 1,
    object_store_memory: int = 80 * 1024**2,
    dashboard: bool = False,
    dashboard_port: int = 0,
    num_gpus: int = 0,
    log_monitor: bool = True,
    head_args: Optional[dict] = None,
) -> Iterator[Cluster]:
    """Start head (num_cpus=0) + ``worker_nodes`` nodes, connect ray, tear down on exit.

    Args:
        dashboard: run the dashboard and Jobs API on the head, as the deployed head does (needs
            ``ray[default]``); its address is ``"http://" + cluster.webui_url``.
        dashboard_port: 0 picks a free port (tests run side by side).
        num_gpus: logical GPUs each worker node declares (no CUDA behind them).
        log_monitor: stream what the ranks print to the driver, as a pod's raylet does (off only for the
            overhead benchmark, where the monitor's CPU on 2 cores would be charged to Ray Train).
        head_args: more of the head's ``ray.cluster_utils.Cluster.add_node`` arguments (e.g. ``autoscaling_config``:
            the head then runs Ray's autoscaler, as KubeRay's sidecar does; ``env_vars`` for its raylet).

    Ray token auth: set ``RAY_AUTH_MODE=token`` and ``RAY_AUTH_TOKEN`` in the environment first; every
    process of the cluster inherits them, as KubeRay injects them into each Ray pod.
    """
    for k, v in _LIGHT_ENV.items():
        os.environ.setdefault(k, v)
    # Every process of the cluster gets its address, as a pod's do: Ray Train's placement-group cleaner looks the
    # cluster up "auto"matically, which fails (a traceback in the job's log) when another Ray instance runs on
    # the same machine; with the GCS port chosen here, RAY_ADDRESS can name this cluster before it starts.
    saved_address = os.environ.get("RAY_ADDRESS")
    gcs_port = _free_port()
    os.environ["RAY_ADDRESS"] = f"{ray.util.get_node_ip_address()}:{gcs_port}"
    # That does not reach job drivers: the Jobs API resets RAY_ADDRESS to "auto" and resolves each driver's address
    # from "ray_current_cluster" in the head's temp dir (job_supervisor.py _get_driver_env_vars), falling back to any
    # raylet's --gcs-address that `ps` shows (services.py get_ray_address_from_environment). Under the default temp
    # root /tmp/ray that file is machine-wide: every Cluster() writes its address there and deletes the file on
    # shutdown, whoever wrote it last. With another local cluster on the machine (a test before, a session beside)
    # the driver joined THAT cluster, and failed with "Failed to connect to GCS within 60 seconds" once it stopped
    # . A private temp root per cluster, inherited by every process it starts, keeps the file its own.
    saved_tmpdir = os.environ.get("RAY_TMPDIR")
    # Inside the user's RAY_TMPDIR when set (Ray's files stay where they asked; one that is not a directory fails
    # here, "Ray could not start", exit 4); short: Ray's unix socket paths live under it.
    try:
        ray_tmp = tempfile.mkdtemp(prefix="rt-", dir=saved_tmpdir or None)
    except OSError:
        _restore("RAY_ADDRESS", saved_address)
        raise
    os.environ["RAY_TMPDIR"] = ray_tmp
    if dashboard and "RAY_DASHBOARD_STARTUP_TIMEOUT_S" not in os.environ:
        # The head waits this long for the dashboard to publish its URL, then fails ("Failed to start the dashboard",
        # ray/_private/services.py start_api_server); Ray reads the variable once, at `import ray`, so set the
        # constant. 60 s is too short for the dashboard and its 9 module subprocesses on a loaded 2-core box.
        ray_constants.RAY_DASHBOARD_STARTUP_TIMEOUT_S = max(ray_constants.RAY_DASHBOARD_STARTUP_TIMEOUT_S, 180)
    common = {"object_store_memory": object_store_memory}
    # Every node's dashboard agent listens on 52365 by default: with a second local cluster on the machine (tests
    # side by side) the head's agent cannot bind it and the Jobs API answers "No available agent" forever.
    head = {
        "num_cpus": 0,
        "include_dashboard": dashboard,
        "dashboard_agent_listen_port": 0,
        "gcs_server_port": gcs_port,
        **common,
    }
    if dashboard:
        head["dashboard_port"] = dashboard_port
    head.update(head_args or {})
    try:
        cluster = _start_head(head, ray_tmp)
    except BaseException:
        _restore("RAY_ADDRESS", saved_address)
        _restore("RAY_TMPDIR", saved_tmpdir)
        shutil.rmtree(ray_tmp, ignore_errors=True)
        raise
    try:
        for _ in range(worker_nodes):
            add_worker_node(cluster, cpus_per_node, num_gpus, object_store_memory, log_monitor)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=True)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()  # deletes ray_current_cluster under RAY_TMPDIR: ours, no other cluster's
        for d in cluster.__dict__.get("_node_temp_dirs", []):
            shutil.rmtree(d, ignore_errors=True)
        _restore("RAY_ADDRESS", saved_address)
        _restore("RAY_TMPDIR", saved_tmpdir)
        shutil.rmtree(ray_tmp, ignore_errors=True)


HEAD_START_TRIES = 2
"""Ray's head start waits 30 s for its raylet to register with the GCS (ray/_private/node.py, "The current node
timed out during startup"); seen once in a whole test run on the 2-core box, where the same test then passed three
times in a row: a second try, on a new GCS port, is cheaper than a failed run."""


def _start_head(head: dict, ray_tmp: str) -> Cluster:
    """The head of a local cluster, started again once if its raylet never registered; the last failure carries the
    tails of that try's GCS and raylet logs (exception notes), which go with ``ray_tmp`` when the cluster does."""
    attempt = 1
    while True:
        try:
            return Cluster(initialize_head=True, head_node_args=head)
        except Exception as e:
            if "timed out during startup" not in str(e):
                raise
            for note in _log_tails(ray_tmp):
                e.add_note(note)
            _stop_leftovers(ray_tmp)  # the failed try's GCS and raylet: their command lines name its temp dir
            if attempt == HEAD_START_TRIES:
                raise
            print(
                f"local cluster: the head's raylet did not register within Ray's 30 s (try {attempt} of "
                f"{HEAD_START_TRIES}); starting the head again",
                file=sys.stderr,
                flush=True,
            )
            attempt += 1
            head["gcs_server_port"] = _free_port()
            os.environ["RAY_ADDRESS"] = f"{ray.util.get_node_ip_address()}:{head['gcs_server_port']}"


def _log_tails(ray_tmp: str, lines: int = 5) -> list[str]:
    """The last lines of each GCS and raylet log under ``ray_tmp`` (every session a try made)."""
    notes = []
    for path in sorted(Path(ray_tmp).glob("session_*/logs/*")):
        if path.name.startswith(("gcs_server", "raylet")) and path.suffix in (".out", ".err") and path.is_file():
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            if tail:
                notes.append(f"{path}:\n" + "\n".join(tail))
    return notes


def _stop_leftovers(ray_tmp: str) -> None:
    """Kill the processes a failed head start left running (Ray kills them only at the interpreter's exit): those
    whose command line names ``ray_tmp`` (read from /proc; nothing to do where there is none)."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            pid = int(cmdline.parent.name)
            if pid != os.getpid() and ray_tmp.encode() in cmdline.read_bytes():
                os.kill(pid, signal.SIGKILL)
        except (OSError, ValueError):
            pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _restore(key: str, value: Optional[str]) -> None:
    if value is None:
        os.environ.pop(key, None)
    else:
        os.environ[key] = value
