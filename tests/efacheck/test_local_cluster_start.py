"""The local cluster's head start (efacheck/local_cluster.py): Ray gives the head's raylet 30 s to register with the
GCS; a start that runs past it is tried once more on a new GCS port, its leftover processes stopped, and a second
failure carries both tries' GCS/raylet log tails. Ray's Cluster is a stand-in here (no Ray processes start)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import ray

from ray_efa_eks.efacheck import local_cluster as lc

TIMED_OUT = (
    "The current node timed out during startup. This could happen because some of the raylet failed to "
    "startup or the GCS has become overloaded."
)


class Heads:
    """Cluster(initialize_head=True, head_node_args=...) that fails the first ``fail`` calls as Ray's does, each
    leaving a raylet log and a process whose command line names the cluster's temp dir."""

    def __init__(self, fail: int, error: str = TIMED_OUT):
        self.fail, self.error, self.args, self.leftovers = fail, error, [], []

    def __call__(self, initialize_head, head_node_args):
        self.args.append(dict(head_node_args))
        if len(self.args) <= self.fail:
            logs = Path(os.environ["RAY_TMPDIR"]) / f"session_{len(self.args)}" / "logs"
            logs.mkdir(parents=True)
            (logs / "raylet.err").write_text(f"line 1\nraylet try {len(self.args)}: cannot reach the GCS\n")
            (logs / "dashboard.log").write_text("not a GCS or raylet log\n")
            proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", os.environ["RAY_TMPDIR"]])
            self.leftovers.append(proc)
            # Ray's leftovers have run for 30 s when the start times out; a process just spawned may not show its
            # command line yet (the parent's Popen returns at the exec's close-on-exec, before the kernel has set the
            # new argv up), and /proc/PID/cmdline is what the cluster reads to find it
            cmdline, deadline = Path(f"/proc/{proc.pid}/cmdline"), time.monotonic() + 10
            while os.environ["RAY_TMPDIR"].encode() not in cmdline.read_bytes() and time.monotonic() < deadline:
                time.sleep(0.01)
            raise Exception(self.error)
        return SimpleNamespace(address="127.0.0.1:1", wait_for_nodes=lambda: None, shutdown=lambda: None)


@pytest.fixture()
def heads(monkeypatch):
    monkeypatch.setattr(ray, "init", lambda **kw: None)
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_TMPDIR", raising=False)

    def make(fail, error=TIMED_OUT):
        h = Heads(fail, error)
        monkeypatch.setattr(lc, "Cluster", h)
        return h

    return make


def test_a_head_that_timed_out_is_started_again_on_a_new_port(heads, capsys):
    h = heads(fail=1)
    with lc.local_cluster(worker_nodes=0):
        address = os.environ["RAY_ADDRESS"]
    first, second = h.args
    assert first["gcs_server_port"] != second["gcs_server_port"]
    assert address.endswith(f":{second['gcs_server_port']}")
    assert h.leftovers[0].wait(timeout=10) == -9  # the failed try's process, killed
    assert capsys.readouterr().err == (
        "local cluster: the head's raylet did not register within Ray's 30 s (try 1 of 2); starting the head again\n"
    )
    assert "RAY_ADDRESS" not in os.environ and "RAY_TMPDIR" not in os.environ


def test_a_second_timeout_fails_with_both_tries_raylet_logs(heads):
    h = heads(fail=2)
    with pytest.raises(Exception, match="timed out during startup") as e:
        with lc.local_cluster(worker_nodes=0):
            pass
    assert len(h.args) == 2 and all(p.wait(timeout=10) == -9 for p in h.leftovers)
    notes = e.value.__notes__
    assert [n.splitlines()[-1] for n in notes] == [
        "raylet try 1: cannot reach the GCS",
        "raylet try 2: cannot reach the GCS",
    ]
    assert all(n.splitlines()[0].endswith("/logs/raylet.err:") for n in notes)
    assert "RAY_ADDRESS" not in os.environ and "RAY_TMPDIR" not in os.environ
    assert not Path(notes[0].splitlines()[0][:-1]).exists()  # the temp dir went with the failure


def test_any_other_start_failure_is_not_tried_again(heads):
    h = heads(fail=1, error="Ray could not bind the GCS port")
    with pytest.raises(Exception, match="could not bind"):
        with lc.local_cluster(worker_nodes=0):
            pass
    assert len(h.args) == 1
