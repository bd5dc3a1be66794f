"""The Grafana dashboard "ray-efa-eks: fabric" (JSON), provisioned by kube-prometheus-stack's Grafana sidecar.

Each panel is a :class:`Panel` whose queries are the series the metrics stack scrapes: the EFA exporter's
counters, DCGM's GPU fields, the verdict and throughput gauges the gate and training runs export through Ray
(:data:`.metrics_rules.VERDICT_METRIC`, ...). tests/components/test_metrics_scrape.py runs every query against a real
Prometheus scraping the exporter and a local Ray cluster (DCGM's need a GPU and are checked for syntax only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .metrics_rules import EFA_IN_BYTES, EFA_OUT_BYTES, REMOTE_EVENTS, RUN_EFA_BYTES_METRIC, VERDICT_METRIC, rate_sum

TOKENS_METRIC = "ray_efa_eks_train_tokens_per_second"
"""Gauge, a training run's global tokens/s (steady state): ``{run}``."""
UID = "ray-efa-eks-fabric"


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    exprs: tuple[tuple[str, str], ...]
    """(PromQL, legend) pairs."""
    unit: str
    kind: str = "timeseries"
    source: str = "exporter"
    """Which scrape feeds it: ``exporter`` (EFA exporter), ``dcgm`` (GPU nodes only), ``ray`` (Ray metrics port)."""


def panels(line_rate_gbps: float) -> list[Panel]:
    return [
        Panel(
            "EFA throughput per node vs line rate",
            "Bits/s each node sent and received through EFA (send/recv and RDMA), against the GPU type's EFA line "
            f"rate ({line_rate_gbps:g} Gbit/s). Flat at zero during a run while GPUs are busy: NCCL fell back.",
            (
                (f"({rate_sum(EFA_OUT_BYTES, '1m')}) * 8", "{{node}} out"),
                (f"({rate_sum(EFA_IN_BYTES, '1m')}) * 8", "{{node}} in"),
                (f"max(efa_devices) * 0 + {line_rate_gbps * 1e9:g}", "line rate"),
            ),
            "bps",
        ),
        Panel(
            "EFA error counters",
            "Per device: retransmitted packets, receive drops, impaired/unresponsive remote connection events "
            "(per second) and the exporter's own read errors. Any steady non-zero rate is a degraded link.",
            (
                ("sum by (node, device) (rate(efa_retrans_pkts_total[5m]))", "{{node}} {{device}} retrans pkts"),
                ("sum by (node, device) (rate(efa_rx_drops_total[5m]))", "{{node}} {{device}} rx drops"),
                (rate_sum(REMOTE_EVENTS, "5m", "node, device"), "{{node}} {{device}} remote impaired/unresponsive"),
                ("sum by (node) (rate(efa_exporter_read_errors_total[5m]))", "{{node}} exporter read errors"),
            ),
            "ops",
        ),
        Panel(
            "GPU utilization",
            "DCGM: average GPU utilization per node (%).",
            (("avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL)", "{{Hostname}}"),),
            "percent",
            source="dcgm",
        ),
        Panel(
            "GPU memory used",
            "DCGM: framebuffer memory used per node (bytes; DCGM reports MiB).",
            (("sum by (Hostname) (DCGM_FI_DEV_FB_USED) * 1048576", "{{Hostname}}"),),
            "bytes",
            source="dcgm",
        ),
        Panel(
            "Ray Train throughput",
            "Global tokens/s of each training run (steady state), as rank 0 reports it.",
            ((f"max by (run) ({TOKENS_METRIC})", "{{run}}"),),
            "short",
            source="ray",
        ),
        Panel(
            "Fabric verdicts",
            "The gate's and each training run's fabric verdict (efa, fallback, undetermined, ...) with the EFA bytes "
            "the run's nodes moved. A run on EFA shows verdict efa and bytes in the GB; fallback shows ~0.",
            (
                (f"max by (run, source, verdict) ({VERDICT_METRIC}) == 1", "{{source}} {{run}}: {{verdict}}"),
                (f"max by (run, source) ({RUN_EFA_BYTES_METRIC})", "{{source}} {{run}} EFA bytes"),
            ),
            "short",
            kind="table",
            source="ray",
        ),
    ]


def _panel_json(i: int, p: Panel) -> dict[str, Any]:
    return {
        "id": i + 1,
        "type": p.kind,
        "title": p.title,
        "description": p.description,
        "datasource": {"type": "prometheus", "uid": "prometheus"},
        "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
        "fieldConfig": {"defaults": {"unit": p.unit}, "overrides": []},
        "targets": [
            {
                "refId": chr(ord("A") + j),
                "expr": e,
                "legendFormat": legend,
                **({"instant": True, "format": "table"} if p.kind == "table" else {}),
            }
            for j, (e, legend) in enumerate(p.exprs)
        ],
    }


def dashboard(line_rate_gbps: float) -> dict[str, Any]:
    """The dashboard JSON (Grafana schema 39; the datasource uid is kube-prometheus-stack's default ``prometheus``)."""
    return {
        "uid": UID,
        "title": "ray-efa-eks: fabric",
        "tags": ["ray-efa-eks", "efa"],
        "schemaVersion": 39,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "editable": False,
        "panels": [_panel_json(i, p) for i, p in enumerate(panels(line_rate_gbps))],
    }


def all_exprs(line_rate_gbps: float) -> list[tuple[Panel, str]]:
    return [(p, e) for p in panels(line_rate_gbps) for e, _ in p.exprs]
