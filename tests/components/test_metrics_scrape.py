"""The dashboard's queries against a REAL Prometheus on loopback scraping what the cluster's Prometheus scrapes:
``ray-efa-eks efa-exporter`` on a kernel-shaped sysfs tree (tests/helpers/sysfs.py) and a local Ray cluster's
metrics port carrying the verdicts (efacheck/verdict_metrics.py).

Every panel query whose source is here returns data; DCGM's (GPU nodes only) are sent too and must parse. The
Prometheus server is Debian's ``prometheus`` package (``.ci/run`` installs it); without it the tests skip, saying so.
The Ray test starts a local cluster: run it under the Ray lock (``flock /work/ray.lock``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from ray_efa_eks.components.observability import dashboard, metrics_rules
from ray_efa_eks.efacheck import verdict_metrics
from tests.helpers.sysfs import kernel_sysfs, write_counter

PROMETHEUS = shutil.which("prometheus")
needs_prometheus = pytest.mark.skipif(
    PROMETHEUS is None,
    reason="prometheus server not installed (Debian package `prometheus`; .ci/run installs it as root)",
)
LINE_GBPS = 40.0
SCRAPE_S = 0.25
"""The test Prometheus's scrape interval (the cluster's PodMonitors set their own): short, so a test waits less."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 5) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def _wait(url: str, proc: subprocess.Popen, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            _get(url)
            return
        except OSError:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, f"{url} never answered"
            time.sleep(0.2)


@contextmanager
def _process(argv: list[str], ready_url: str, **kw) -> Iterator[subprocess.Popen]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    try:
        _wait(ready_url, proc)
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


@contextmanager
def prometheus(tmp: Path, jobs: dict[str, str]) -> Iterator[str]:
    """A Prometheus on loopback scraping ``jobs`` (name -> host:port) every ``SCRAPE_S``, ``honor_labels`` as our
    PodMonitors set it for the exporter. Yields its base URL."""
    port = _free_port()
    every = f"{int(SCRAPE_S * 1000)}ms"
    cfg = {
        "global": {"scrape_interval": every, "evaluation_interval": every},
        "scrape_configs": [
            {"job_name": n, "honor_labels": True, "static_configs": [{"targets": [t]}]} for n, t in jobs.items()
        ],
    }
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(cfg))
    url = f"http://127.0.0.1:{port}"
    with _process(
        [
            PROMETHEUS,
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        f"{url}/-/ready",
    ):
        # Ready is not scraping: the discovery manager hands targets over at most every 5 s
        deadline = time.monotonic() + 30
        while len(query(url, "up == 1")["result"]) < len(jobs):
            assert time.monotonic() < deadline, f"Prometheus never scraped {jobs}"
            time.sleep(0.3)
        yield url


def query(base: str, expr: str) -> dict:
    body = json.loads(_get(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})))
    assert body["status"] == "success", (expr, body)
    return body["data"]


def _until_data(base: str, exprs: list[str], seconds: float = 25) -> dict[str, list]:
    deadline = time.monotonic() + seconds
    while True:
        got = {e: query(base, e)["result"] for e in exprs}
        if all(got.values()) or time.monotonic() > deadline:
            return got
        time.sleep(0.5)


@contextmanager
def exporter(tmp: Path, node: str = "node-a") -> Iterator[tuple[str, Path]]:
    sysfs = kernel_sysfs(tmp / "sys", counters={"rdmap0s30": {"tx_bytes": 1, "rx_bytes": 1}})
    port = _free_port()
    exe = Path(sys.executable).with_name("ray-efa-eks")
    with _process(
        [str(exe), "efa-exporter", "--sysfs", str(sysfs), "--port", str(port), "--host", "127.0.0.1"],
        f"http://127.0.0.1:{port}/healthz",
        env={**os.environ, "NODE_NAME": node},
    ):
        yield f"127.0.0.1:{port}", sysfs


@needs_prometheus
def test_exporter_panels_return_data_from_a_real_prometheus(tmp_path):
    with exporter(tmp_path) as (target, sysfs), prometheus(tmp_path, {"efa-exporter": target}) as base:
        for i in range(1, 6):  # traffic and errors moving between scrapes
            for name, step in (
                ("tx_bytes", 5 * 10**8),
                ("rx_bytes", 4 * 10**8),
                ("retrans_pkts", 10),
                ("rx_drops", 3),
                ("impaired_remote_conn_events", 1),
            ):
                write_counter(sysfs, "rdmap0s30", name, i * step)
            time.sleep(SCRAPE_S * 1.2)
        exprs = [e for p, e in dashboard.all_exprs(LINE_GBPS) if p.source == "exporter"]
        got = _until_data(base, exprs)
        assert all(got.values()), {e: r for e, r in got.items() if not r}
        out = query(base, exprs[0])["result"]
        assert out[0]["metric"] == {"node": "node-a"}  # honor_labels: the exporter's node, not exported_node
        assert float(out[0]["value"][1]) > 0
        # DCGM's queries (GPU nodes only) parse; they return nothing here
        for p, e in dashboard.all_exprs(LINE_GBPS):
            if p.source == "dcgm":
                assert query(base, e)["result"] == []
        # every alert expression parses and runs against the same server
        for g in metrics_rules.alert_groups():
            for r in g["rules"]:
                query(base, r["expr"])


@needs_prometheus
def test_verdict_series_from_a_local_ray_cluster(tmp_path):
    """A training run's and the gate's verdict published through Ray, scraped from the head's metrics port."""
    pytest.importorskip("ray")
    import ray

    from ray_efa_eks.efacheck.local_cluster import local_cluster

    assert verdict_metrics.PREFIX + verdict_metrics.VERDICT == metrics_rules.VERDICT_METRIC
    assert verdict_metrics.PREFIX + verdict_metrics.VERDICT_TIME == metrics_rules.VERDICT_TIME_METRIC
    assert verdict_metrics.PREFIX + verdict_metrics.RUN_EFA_BYTES == metrics_rules.RUN_EFA_BYTES_METRIC
    assert verdict_metrics.PREFIX + verdict_metrics.TOKENS == dashboard.TOKENS_METRIC
    assert verdict_metrics.publish("r0", "train", "efa") == "not connected to a Ray cluster"
    # the driver exports its metrics every metrics_report_interval_ms (Ray's default 10 s; 1 s is its floor)
    with local_cluster(worker_nodes=0, head_args={"_system_config": {"metrics_report_interval_ms": 1000}}):
        assert verdict_metrics.publish("run-1", "train", "efa", 7.5e9, 1234.0) is None
        assert verdict_metrics.publish("run-2", "train", "undetermined") is None
        assert verdict_metrics.publish("run-2", "train", "fallback", 1000.0) is None
        assert verdict_metrics.publish("gate", "gate", "efa") is None
        head = next(n for n in ray.nodes() if "node:__internal_head__" in n["Resources"])
        target = f"127.0.0.1:{head['MetricsExportPort']}"
        with prometheus(tmp_path, {"ray-head": target}) as base:
            exprs = [e for p, e in dashboard.all_exprs(LINE_GBPS) if p.source == "ray"]
            got = _until_data(base, exprs + [metrics_rules.VERDICT_TIME_METRIC], seconds=40)
            assert all(got.values()), {e: r for e, r in got.items() if not r}
            verdicts = {
                (r["metric"]["run"], r["metric"]["verdict"])
                for r in query(base, f"{metrics_rules.VERDICT_METRIC} == 1")["result"]
            }
            assert verdicts == {("run-1", "efa"), ("run-2", "fallback"), ("gate", "efa")}
            tokens = query(base, dashboard.TOKENS_METRIC)["result"]
            assert [(r["metric"]["run"], float(r["value"][1])) for r in tokens] == [("run-1", 1234.0)]


def test_a_run_is_not_failed_when_its_verdict_cannot_be_exported(capsys):
    """Without a Ray connection the training CLI's publish says why, in one line, and returns."""
    from ray_efa_eks.training.run import publish_fabric

    why = publish_fabric("r1", {"verdict": "efa", "efa_bytes": {"n1": {"sent": 5, "received": None}}}, 10.0)
    assert why == "not connected to a Ray cluster"
    assert capsys.readouterr().out == "[fabric] verdict not exported as a metric: not connected to a Ray cluster\n"
