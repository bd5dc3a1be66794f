"""Local Ray cluster shaped like the deployed one: CPU-less head + 2 worker nodes."""
from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

import ray
from ray.cluster_utils import Cluster

_LIGHT_ENV = {
    "RAY_DEDUP_LOGS": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_TRAIN_ENABLE_STATE_ACTOR_RECONCILIATION": "0",
}


@contextmanager
def local_cluster(worker_nodes: int = 2, cpus_per_node: int = 1,
                  object_store_memory: int = 80 * 1024**2) -> Iterator[Cluster]:
    """Start head (num_cpus=0) + ``worker_nodes`` nodes, connect ray, tear down on exit."""
    for k, v in _LIGHT_ENV.items():
        os.environ.setdefault(k, v)
    common = {"object_store_memory": object_store_memory}
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 0, "include_dashboard": False, **common},
    )
    try:
        for _ in range(worker_nodes):
            cluster.add_node(num_cpus=cpus_per_node, **common)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=True)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
