"""The alert rules, run by the real Prometheus tooling: ``promtool check rules`` and ``promtool test rules``.

Every alert gets synthetic series in which it fires for one node/run and stays silent for another (and before its
``for`` has passed). promtool is Debian's ``prometheus`` package (``.ci/run`` installs it); without it these tests
skip and say so. Annotations are templates ``promtool check rules`` validates; the unit tests compare labels only
(their rule file is the same rules with the annotations left out, since promtool compares annotations verbatim).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from ray_efa_eks.components.observability.metrics_rules import AlertThresholds, alert_groups, alert_names

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (Debian package `prometheus`; .ci/run installs it as root)"
)
TAINT = AlertThresholds().startup_taint
CRIT = {"severity": "critical", "component": "ray-efa-eks"}
WARN = {"severity": "warning", "component": "ray-efa-eks"}


def _port(node: str) -> str:
    return f'node="{node}",device="rdmap0s30",port="1"'


def _alert(name: str, at: str, *labels: dict) -> dict:
    return {"eval_time": at, "alertname": name, "exp_alerts": [{"exp_labels": lab} for lab in labels]}


# (alert, interval, input series, [(eval_time, [expected labels]), ...]): each fires for one subject, not another.
CASES = [
    (
        "EfaFallbackSuspected",
        "1m",
        [
            # n1: GPUs busy, Ray pod sending 100 MB/s over TCP, EFA flat -> fallback
            ('DCGM_FI_DEV_GPU_UTIL{Hostname="n1",gpu="0"}', "90x40"),
            ('container_network_transmit_bytes_total{namespace="ray",pod="w1",interface="eth0"}', "0+6000000000x40"),
            ('kube_pod_info{namespace="ray",pod="w1",node="n1"}', "1x40"),
            (f"efa_tx_bytes_total{{{_port('n1')}}}", "0+1000x40"),
            # n2: the same but EFA carrying 100 MB/s -> healthy
            ('DCGM_FI_DEV_GPU_UTIL{Hostname="n2",gpu="0"}', "90x40"),
            ('container_network_transmit_bytes_total{namespace="ray",pod="w2",interface="eth0"}', "0+6000000000x40"),
            ('kube_pod_info{namespace="ray",pod="w2",node="n2"}', "1x40"),
            (f"efa_tx_bytes_total{{{_port('n2')}}}", "0+6000000000x40"),
            (f"efa_rx_bytes_total{{{_port('n2')}}}", "0+6000000000x40"),
            # n3: EFA flat, TCP busy, GPUs idle (data loading) -> not a fallback
            ('DCGM_FI_DEV_GPU_UTIL{Hostname="n3",gpu="0"}', "5x40"),
            ('container_network_transmit_bytes_total{namespace="ray",pod="w3",interface="eth0"}', "0+6000000000x40"),
            ('kube_pod_info{namespace="ray",pod="w3",node="n3"}', "1x40"),
            (f"efa_tx_bytes_total{{{_port('n3')}}}", "0x40"),
        ],
        [("5m", []), ("20m", [{"node": "n1", **CRIT}])],
    ),
    (
        "EfaRunVerdictFallback",
        "1m",
        [
            ('ray_efa_eks_fabric_verdict{run="r1",source="train",verdict="fallback",instance="h:8080"}', "1x5"),
            ('ray_efa_eks_fabric_verdict{run="r2",source="gate",verdict="efa",instance="h:8080"}', "1x5"),
        ],
        [("2m", [{"run": "r1", "source": "train", **CRIT}])],
    ),
    (
        "EfaRetransmits",
        "1m",
        [
            (f"efa_retrans_pkts_total{{{_port('n1')}}}", "0+1200x30"),  # 20/s
            (f"efa_retrans_pkts_total{{{_port('n2')}}}", "0+60x30"),  # 1/s
        ],
        [("8m", []), ("20m", [{"node": "n1", "device": "rdmap0s30", **WARN}])],
    ),
    (
        "EfaRemoteImpaired",
        "1m",
        [
            (f"efa_impaired_remote_conn_events_total{{{_port('n1')}}}", "0x10 1x10"),
            (f"efa_unresponsive_remote_events_total{{{_port('n2')}}}", "0x20"),
        ],
        [("5m", []), ("13m", [{"node": "n1", "device": "rdmap0s30", **WARN}]), ("30m", [])],
    ),
    (
        "EfaRxDrops",
        "1m",
        [
            (f"efa_rx_drops_total{{{_port('n1')}}}", "0+1200x30"),
            (f"efa_rx_drops_total{{{_port('n2')}}}", "0+60x30"),
        ],
        [("8m", []), ("20m", [{"node": "n1", "device": "rdmap0s30", **WARN}])],
    ),
    (
        "EfaBelowLineRate",
        "15s",
        [
            (f"efa_tx_bytes_total{{{_port('n1')}}}", "0+1500000000x200"),  # 100 MB/s: 2% of 40 Gbit/s
            (f"efa_tx_bytes_total{{{_port('n2')}}}", "0+60000000000x200"),  # 4 GB/s: 80%
            (f"efa_rdma_write_bytes_total{{{_port('n2')}}}", "0x200"),  # a second byte counter on the same port
            (f"efa_rdma_write_bytes_total{{{_port('n1')}}}", "0x200"),
            (f"efa_tx_bytes_total{{{_port('n3')}}}", "0x200"),  # idle: no collective, no verdict
        ],
        [("10m", []), ("40m", [{"node": "n1", **WARN}])],
    ),
    (
        "GpuNodeUnproven",
        "1m",
        [
            (f'kube_node_spec_taint{{node="n1",key="{TAINT}",value="",effect="NoSchedule"}}', "1x50"),
            (f'kube_node_spec_taint{{node="n2",key="{TAINT}",value="",effect="NoSchedule"}}', "1x10"),  # proven at 10m
            ('kube_node_spec_taint{node="n3",key="nvidia.com/gpu",value="",effect="NoSchedule"}', "1x50"),
        ],
        [("20m", []), ("40m", [{"node": "n1", **WARN}])],
    ),
    (
        "GpuNodeFabricFailing",
        "1m",
        [
            ('kube_node_status_condition{node="n1",condition="EfaFabricProven",status="false"}', "0x5 1x30"),
            ('kube_node_status_condition{node="n1",condition="EfaFabricProven",status="true"}', "1x5 0x30"),
            ('kube_node_status_condition{node="n2",condition="EfaFabricProven",status="false"}', "0x35"),
            ('kube_node_status_condition{node="n3",condition="Ready",status="false"}', "1x35"),
        ],
        [("8m", []), ("20m", [{"node": "n1", **WARN}])],
    ),
    (
        "FabricVerdictStale",
        "1m",
        [  # pods started at t=600 s, no verdict at all
            ('kube_pod_start_time{namespace="ray",pod="head"}', "600x100"),
        ],
        [("30m", []), ("90m", [{**WARN}])],
    ),
    (
        "FabricVerdictStale",
        "1m",
        [  # pods started at t=600 s, the gate's verdict at t=1200 s
            ('kube_pod_start_time{namespace="ray",pod="head"}', "600x100"),
            ('ray_efa_eks_fabric_verdict_timestamp_seconds{run="gate",source="gate"}', "_x19 1200x80"),
        ],
        [("90m", [])],
    ),
    (
        "FabricVerdictStale",
        "1m",
        [  # recreated at t=7200 s after a verdict at t=1200 s: stale again
            ('kube_pod_start_time{namespace="ray",pod="head"}', "600x110 7200x100"),
            ('ray_efa_eks_fabric_verdict_timestamp_seconds{run="gate",source="gate"}', "_x19 1200x190"),
        ],
        [("150m", []), ("190m", [{**WARN}])],
    ),
]


def unit_tests() -> dict:
    tests = []
    for alert, interval, series, evals in CASES:
        tests.append(
            {
                "interval": interval,
                "input_series": [{"series": s, "values": v} for s, v in series],
                "alert_rule_test": [_alert(alert, at, *labels) for at, labels in evals],
            }
        )
    return {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests}


def _write(tmp_path: Path, groups: list[dict], tests: dict) -> None:
    bare = [{**g, "rules": [{k: v for k, v in r.items() if k != "annotations"} for r in g["rules"]]} for g in groups]
    (tmp_path / "full.yaml").write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": bare}, sort_keys=False))
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))


def test_every_alert_has_a_case():
    assert sorted(set(a for a, *_ in CASES)) == sorted(alert_names(alert_groups()))


@needs_promtool
def test_promtool_check_rules(tmp_path):
    _write(tmp_path, alert_groups(), unit_tests())
    r = subprocess.run([PROMTOOL, "check", "rules", str(tmp_path / "full.yaml")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"SUCCESS: {len(alert_names(alert_groups()))} rules found" in r.stdout


@needs_promtool
def test_promtool_unit_tests_fire_and_stay_silent(tmp_path):
    _write(tmp_path, alert_groups(), unit_tests())
    r = subprocess.run([PROMTOOL, "test", "rules", "tests.yaml"], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


@needs_promtool
def test_unit_tests_can_fail(tmp_path):
    """The same cases against rules with every threshold moved out of reach: promtool must report failures."""
    blind = AlertThresholds(
        gpu_busy_percent=101,
        retrans_pkts_per_s=1e9,
        rx_drops_per_s=1e9,
        below_line_rate_fraction=0.0,
        unproven_after="10h",
        stale_after="10h",
        fabric_failing_after="10h",
    )
    _write(tmp_path, alert_groups(blind), unit_tests())
    r = subprocess.run([PROMTOOL, "test", "rules", "tests.yaml"], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode != 0
    for name in (
        "EfaFallbackSuspected",
        "EfaRetransmits",
        "EfaRxDrops",
        "EfaBelowLineRate",
        "GpuNodeUnproven",
        "GpuNodeFabricFailing",
        "FabricVerdictStale",
    ):
        assert f"alertname: {name}" in r.stdout + r.stderr, name
