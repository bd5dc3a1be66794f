"""Verdicts as metrics: the gate's and each training run's fabric verdict, exported on the Ray head's metrics port.

A run's driver and the gate's Ray job are short-lived, and a gauge set in a process goes with it; so the verdicts
are held by one detached actor on the head (``ray-efa-eks-verdicts`` in Ray namespace ``ray-efa-eks``, 0 CPU),
whose gauges Ray exports on the head's metrics port (8080 in the cluster, scraped by the ``ray-head`` PodMonitor).
No Pushgateway, nothing to install: Ray already runs the exporter. The series (Ray prefixes ``ray_``):

- ``ray_efa_eks_fabric_verdict{run, source, verdict}``: 1 for a run's latest verdict, 0 for the ones it replaced;
- ``ray_efa_eks_fabric_verdict_timestamp_seconds{run, source}``: when it was reached (Unix seconds);
- ``ray_efa_eks_run_efa_bytes{run, source}``: EFA bytes the run's nodes moved during it (counter deltas);
- ``ray_efa_eks_train_tokens_per_second{run}``: a training run's steady global tokens/s.

The names are components/observability/metrics_rules.py's and components/observability/dashboard.py's (a test keeps them equal). Publishing
never fails a run: :func:`publish` returns why it could not, and the caller prints that.
"""

from __future__ import annotations

import time
from typing import Any, Optional

ACTOR_NAME = "ray-efa-eks-verdicts"
RAY_NAMESPACE = "ray-efa-eks"
PREFIX = "ray_"
"""What Ray puts before an application metric's name on its metrics port."""
VERDICT = "efa_eks_fabric_verdict"
VERDICT_TIME = "efa_eks_fabric_verdict_timestamp_seconds"
RUN_EFA_BYTES = "efa_eks_run_efa_bytes"
TOKENS = "efa_eks_train_tokens_per_second"
SOURCES = ("gate", "train")
MAX_RUNS = 200
"""Runs whose series the actor keeps setting (the oldest are dropped from its memory, not from Prometheus)."""


class Verdicts:
    """The actor's body (wrapped with ``ray.remote`` on first use, so importing this module needs no Ray)."""

    def __init__(self) -> None:
        from ray.util.metrics import Gauge

        self.verdict = Gauge(
            VERDICT,
            "Fabric verdict of a gate or training run: 1 latest, 0 replaced",
            tag_keys=("run", "source", "verdict"),
        )
        self.when = Gauge(
            VERDICT_TIME, "When the run's fabric verdict was reached (Unix seconds)", tag_keys=("run", "source")
        )
        self.bytes = Gauge(RUN_EFA_BYTES, "EFA bytes the run's nodes moved during the run", tag_keys=("run", "source"))
        self.tokens = Gauge(TOKENS, "Training run's steady global tokens per second", tag_keys=("run",))
        self.latest: dict[tuple[str, str], str] = {}

    def record(
        self,
        run: str,
        source: str,
        verdict: Optional[str],
        efa_bytes: Optional[float],
        tokens_per_s: Optional[float],
        at: float,
    ) -> bool:
        key = (run, source)
        if verdict:
            old = self.latest.pop(key, None)
            if old and old != verdict:
                self.verdict.set(0, tags={"run": run, "source": source, "verdict": old})
            self.verdict.set(1, tags={"run": run, "source": source, "verdict": verdict})
            self.when.set(at, tags={"run": run, "source": source})
            self.latest[key] = verdict
            while len(self.latest) > MAX_RUNS:
                self.latest.pop(next(iter(self.latest)))
        if efa_bytes is not None:
            self.bytes.set(float(efa_bytes), tags={"run": run, "source": source})
        if tokens_per_s is not None:
            self.tokens.set(float(tokens_per_s), tags={"run": run})
        return True

    def current(self) -> dict[str, str]:
        return {f"{s}/{r}": v for (r, s), v in self.latest.items()}


def _head_strategy(ray: Any) -> Any:
    """Place the actor on the head (scraped by the ``ray-head`` PodMonitor, and never scaled away)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    for node in ray.nodes():
        if node.get("Alive") and "node:__internal_head__" in node.get("Resources", {}):
            return NodeAffinitySchedulingStrategy(node["NodeID"], soft=True)
    return "DEFAULT"


def actor(ray: Any) -> Any:
    """The cluster's verdict actor, created on first use (``get_if_exists``: one per cluster, whoever asks)."""
    cls = ray.remote(num_cpus=0, max_restarts=-1)(Verdicts)
    return cls.options(
        name=ACTOR_NAME,
        namespace=RAY_NAMESPACE,
        lifetime="detached",
        get_if_exists=True,
        scheduling_strategy=_head_strategy(ray),
    ).remote()


def publish(
    run: str,
    source: str,
    verdict: Optional[str] = None,
    efa_bytes: Optional[float] = None,
    tokens_per_s: Optional[float] = None,
    timeout_s: float = 30.0,
) -> Optional[str]:
    """Record a run's verdict (and its EFA bytes, tokens/s) on the cluster it is connected to.

    None when recorded; otherwise why not (Ray not connected, the actor unreachable): never raises."""
    if source not in SOURCES:
        return f"source {source!r} is not one of {', '.join(SOURCES)}"
    try:
        import ray
    except ImportError:
        return "Ray is not installed"
    if not ray.is_initialized():
        return "not connected to a Ray cluster"
    try:
        ref = actor(ray).record.remote(str(run), source, verdict, efa_bytes, tokens_per_s, time.time())
        ray.get(ref, timeout=timeout_s)
    except Exception as e:  # noqa: BLE001 - metrics never fail the run; the caller prints why
        return f"{type(e).__name__}: {e}"
    return None
