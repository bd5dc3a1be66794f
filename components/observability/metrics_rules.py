"""Alert rules on the fabric: the silent TCP fallback, degraded links, a slow link, unproven nodes, stale verdicts.

The rules are data (a Prometheus rule file's ``groups``): :class:`~.observability.Observability` ships them as a
PrometheusRule and the tests run them through ``promtool check rules`` / ``promtool test rules`` with synthetic
series for every alert (tests/components/test_metrics_rules.py). The series they read:

- the EFA exporter (efacheck/efa_exporter.py): ``efa_<hw_counter>_total{node,device,port}``, scraped with
  ``honorLabels`` so ``node`` is the exporter's;
- DCGM exporter: ``DCGM_FI_DEV_GPU_UTIL{Hostname,gpu}`` (``Hostname`` is the node name: the chart sets NODE_NAME);
- kubelet/cAdvisor: ``container_network_transmit_bytes_total{namespace,pod}`` (TCP sockets, NCCL's fallback,
  show up here; EFA's OS-bypass traffic does not) joined to its node through kube-state-metrics' ``kube_pod_info``;
- kube-state-metrics: ``kube_node_spec_taint{node,key,effect}``, ``kube_pod_start_time{namespace,pod}``;
- the verdicts (training/fabric.py and the gate, via Ray's metrics): :data:`VERDICT_METRIC` and
  :data:`VERDICT_TIME_METRIC`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

VERDICT_METRIC = "ray_efa_eks_fabric_verdict"
"""Gauge, 1 for a run's current verdict: ``{run, source="gate"|"train", verdict="efa"|"fallback"|...}``."""
VERDICT_TIME_METRIC = "ray_efa_eks_fabric_verdict_timestamp_seconds"
"""Gauge, when that verdict was reached (Unix seconds): ``{run, source}``."""
RUN_EFA_BYTES_METRIC = "ray_efa_eks_run_efa_bytes"
"""Gauge, EFA bytes the run's nodes moved during the run (counter deltas): ``{run, source}``."""
EFA_BYTES = ("efa_tx_bytes_total", "efa_rx_bytes_total", "efa_rdma_read_bytes_total", "efa_rdma_write_bytes_total")
"""Every EFA byte counter, both directions (send/recv and RDMA; older devices lack the RDMA-write group)."""
EFA_OUT_BYTES = ("efa_tx_bytes_total", "efa_rdma_write_bytes_total")
"""Bytes a node put on the wire through EFA (compared with its line rate, one direction)."""
EFA_IN_BYTES = ("efa_rx_bytes_total", "efa_rdma_read_bytes_total")
REMOTE_EVENTS = ("efa_impaired_remote_conn_events_total", "efa_unresponsive_remote_events_total")


def rate_sum(names: tuple[str, ...], window: str, by: str = "node", fn: str = "rate") -> str:
    """``sum by (BY)`` of ``fn(name[window])`` over several counters, a counter a device lacks counting 0.

    Not ``rate({__name__=~"a|b"})``: rate drops the name, and two counters of one port then have the same labels,
    which Prometheus refuses ("vector cannot contain metrics with the same labelset"; the real-Prometheus test in
    tests/components/test_metrics_scrape.py caught it). The first counter must exist wherever the others do."""
    first = f"sum by ({by}) ({fn}({names[0]}[{window}]))"
    rest = [f"(sum by ({by}) ({fn}({n}[{window}])) or {first} * 0)" for n in names[1:]]
    return " + ".join([first, *rest])


RUNBOOK = "docs/observability.md#alerts"


@dataclass(frozen=True)
class AlertThresholds:
    """What the alerts fire on; defaults are for the reference layout (g6.12xlarge: 40 Gbit/s EFA)."""

    line_rate_bytes_per_s: float = 40e9 / 8
    """The GPU type's EFA line rate (catalogue ``efa_gbps`` / 8), per node, one direction."""
    below_line_rate_fraction: float = 0.25
    """Below line rate: the busiest minute of 15 under this fraction of the line rate while EFA carries traffic."""
    active_efa_bytes_per_s: float = 10e6
    """EFA 'carrying a collective': at least this much on average over the window."""
    gpu_busy_percent: float = 50.0
    tcp_bytes_per_s: float = 50e6
    """Ray pods' TCP traffic on a node (cAdvisor) that means NCCL is moving tensors over sockets."""
    efa_flat_bytes_per_s: float = 1e6
    """Under this, EFA is flat (the exporter's scrape and keepalives move a few KB/s at most)."""
    retrans_pkts_per_s: float = 10.0
    rx_drops_per_s: float = 10.0
    unproven_after: str = "30m"
    """How long a GPU node may carry the startup taint (its fabric proof budget) before it is reported."""
    startup_taint: str = "startup-taint.cluster-autoscaler.kubernetes.io/efa-unproven"
    fabric_failing_after: str = "5m"
    """How long a node's ``EfaFabricProven`` condition may be False (the node agent's proof failing) before it is
    reported; a node proven once is not tainted again (docs/gpus.md, "Per-node proof"), so this is the signal."""
    fabric_condition: str = "EfaFabricProven"
    ray_namespace: str = "ray"
    stale_after: str = "1h"
    """How long Ray pods may run with no gate or run verdict reached since they started."""


def _alert(name: str, expr: str, for_: str, severity: str, summary: str, description: str) -> dict[str, Any]:
    rule: dict[str, Any] = {"alert": name, "expr": expr}
    if for_:
        rule["for"] = for_
    rule["labels"] = {"severity": severity, "component": "ray-efa-eks"}
    rule["annotations"] = {"summary": summary, "description": description, "runbook_url": RUNBOOK}
    return rule


def _g(x: float) -> str:
    return f"{x:g}"


def alert_groups(t: AlertThresholds = AlertThresholds()) -> list[dict[str, Any]]:
    """The rule file's ``groups`` (also a PrometheusRule's ``spec.groups``)."""
    ns = t.ray_namespace
    gpu_busy = 'max by (node) (label_replace(DCGM_FI_DEV_GPU_UTIL, "node", "$1", "Hostname", "(.+)")) > ' + _g(
        t.gpu_busy_percent
    )
    tcp = (
        f'sum by (node) (sum by (namespace, pod) (rate(container_network_transmit_bytes_total{{namespace="{ns}"}}[5m]))'
        f' * on (namespace, pod) group_left (node) max by (namespace, pod, node) (kube_pod_info{{namespace="{ns}"}}))'
        f' > {_g(t.tcp_bytes_per_s)}'
    )
    efa_flat = f"({rate_sum(EFA_BYTES, '5m')}) < {_g(t.efa_flat_bytes_per_s)}"
    out_1m = rate_sum(EFA_OUT_BYTES, "1m")
    line = t.line_rate_bytes_per_s
    fabric = [
        _alert(
            "EfaFallbackSuspected",
            f"({gpu_busy}) and on (node) ({tcp}) and on (node) ({efa_flat})",
            "10m",
            "critical",
            "GPUs busy, Ray pods sending over TCP, EFA flat on {{ $labels.node }}",
            "NCCL looks fallen back to sockets on {{ $labels.node }}: GPUs busy, the Ray pods' TCP traffic high and "
            "the node's EFA byte counters flat for 10 minutes. Check the run's [fabric] line.",
        ),
        _alert(
            "EfaRunVerdictFallback",
            f'max by (run, source) ({VERDICT_METRIC}{{verdict="fallback"}}) == 1',
            "",
            "critical",
            "{{ $labels.source }} {{ $labels.run }}: fabric verdict fallback",
            "The {{ $labels.source }} '{{ $labels.run }}' judged its NCCL traffic to have gone over TCP, not EFA.",
        ),
    ]
    link = [
        _alert(
            "EfaRetransmits",
            f"sum by (node, device) (rate(efa_retrans_pkts_total[5m])) > {_g(t.retrans_pkts_per_s)}",
            "10m",
            "warning",
            "EFA retransmitting on {{ $labels.node }}/{{ $labels.device }}",
            "{{ $value | humanize }} packets/s retransmitted for 10 minutes: a lossy or congested path.",
        ),
        _alert(
            "EfaRemoteImpaired",
            f"({rate_sum(REMOTE_EVENTS, '10m', 'node, device', 'increase')}) > 0",
            "",
            "warning",
            "EFA remote connections impaired or unresponsive from {{ $labels.node }}/{{ $labels.device }}",
            "The device reported impaired or unresponsive remote connections in the last 10 minutes.",
        ),
        _alert(
            "EfaRxDrops",
            f"sum by (node, device) (rate(efa_rx_drops_total[5m])) > {_g(t.rx_drops_per_s)}",
            "10m",
            "warning",
            "EFA dropping received packets on {{ $labels.node }}/{{ $labels.device }}",
            "{{ $value | humanize }} packets/s dropped on receive for 10 minutes.",
        ),
        _alert(
            "EfaBelowLineRate",
            f"(max_over_time(({out_1m})[15m:1m]) < {_g(t.below_line_rate_fraction * line)})"
            f" and on (node) (avg_over_time(({out_1m})[15m:1m]) > {_g(t.active_efa_bytes_per_s)})",
            "15m",
            "warning",
            "EFA on {{ $labels.node }} far below its line rate",
            f"For 15 minutes of traffic the busiest minute moved under {t.below_line_rate_fraction:.0%} of the "
            f"line rate ({line * 8 / 1e9:g} Gbit/s): a degraded link, a throttled path or a misplaced node.",
        ),
    ]
    nodes = [
        _alert(
            "GpuNodeUnproven",
            f'max by (node) (kube_node_spec_taint{{key="{t.startup_taint}"}}) == 1',
            t.unproven_after,
            "warning",
            "GPU node {{ $labels.node }} still unproven",
            f"{{{{ $labels.node }}}} has carried {t.startup_taint} for {t.unproven_after}: its fabric proof has "
            "not passed, so nothing schedules there while it costs GPU hours.",
        ),
        _alert(
            "GpuNodeFabricFailing",
            f'max by (node) (kube_node_status_condition{{condition="{t.fabric_condition}",status="false"}}) == 1',
            t.fabric_failing_after,
            "warning",
            "GPU node {{ $labels.node }} fails its fabric proof",
            f"{{{{ $labels.node }}}} has reported {t.fabric_condition}=False for {t.fabric_failing_after} (the node "
            "agent's proof; kubectl describe node shows what failed). A node proven before keeps its Ray worker "
            "and is not tainted again: runs with --require-efa on it fail; drain it or let it be replaced.",
        ),
        _alert(
            "FabricVerdictStale",
            f'max(kube_pod_start_time{{namespace="{ns}"}}) > on () '
            f'(max(max_over_time({VERDICT_TIME_METRIC}[7d])) or on () vector(0))',
            t.stale_after,
            "warning",
            "No fabric verdict since the Ray pods were last recreated",
            f"Ray pods in '{ns}' started after the last gate or run verdict and none has been reached for "
            f"{t.stale_after}: EFA is unproven on the current pods.",
        ),
    ]
    return [
        {"name": "ray-efa-eks.fabric", "rules": fabric},
        {"name": "ray-efa-eks.link", "rules": link},
        {"name": "ray-efa-eks.nodes", "rules": nodes},
    ]


def alert_names(groups: list[dict[str, Any]]) -> list[str]:
    return [r["alert"] for g in groups for r in g["rules"] if "alert" in r]
