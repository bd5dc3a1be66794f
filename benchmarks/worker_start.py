"""The cold-start parts this machine can measure: a Ray worker joining, the ray CLI's start, the node proof's check.

    python benchmarks/worker_start.py [--runs 3] [--json]

A GPU node from zero (docs/gpus.md "Cold start", components/nodes/cold_start.py) spends minutes on EC2, EKS and the image
pull, none of which runs here; three of its parts do:

  join       a worker node joining a running local head (``efacheck.local_cluster.add_worker_node``: the raylet and
             its processes, as ``ray start --address`` starts them in a KubeRay worker pod) until the head lists it
             alive
  cli        the ``ray`` command's own start-up (``ray --version``): a worker pod runs ``ray start`` through it
  agent      the node agent's own start: a fresh ``python -S`` importing the shipped proof
             (``ray_efa_eks.efacheck.node_check``, from the ConfigMap's files written as the pod mounts them), as
             the agent's container does before its first proof
  proof      the per-node proof's decisions (``efacheck.node_check.decide``) on a p5.48xlarge-shaped sysfs tree of 32
             EFA devices (tests/helpers/sysfs.py), fi_info's answer given

Medians and ranges of ``--runs`` runs; on a shared machine the figures include the neighbours' load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _join(runs: int) -> list[float]:
    import ray

    from ray_efa_eks.efacheck.local_cluster import add_worker_node, local_cluster

    out = []
    with local_cluster(worker_nodes=0) as cluster:
        for _ in range(runs):
            alive = sum(n["Alive"] for n in ray.nodes())
            t0 = time.monotonic()
            add_worker_node(cluster, num_cpus=1)
            while sum(n["Alive"] for n in ray.nodes()) <= alive:
                time.sleep(0.05)
            out.append(time.monotonic() - t0)
    return out


def _cli(runs: int) -> list[float]:
    ray_cli = os.path.join(os.path.dirname(sys.executable), "ray")
    out = []
    for _ in range(runs):
        t0 = time.monotonic()
        subprocess.run([ray_cli, "--version"], capture_output=True, check=True)
        out.append(time.monotonic() - t0)
    return out


def _proof(runs: int) -> list[float]:
    sys.path.insert(0, str(ROOT))  # tests.helpers.sysfs: the kernel-shaped trees the proof's tests use
    from ray_efa_eks.efacheck import node_check as nc
    from tests.helpers.sysfs import P5_48XLARGE, kernel_sysfs

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        root = str(kernel_sysfs(Path(tmp), P5_48XLARGE))
        for _ in range(runs):
            t0 = time.perf_counter()
            findings = nc.decide(root, 32, {nc.EFA_RESOURCE: "32"}, (True, "provider: efa"))
            out.append(time.perf_counter() - t0)
            assert all(f.ok for f in findings), findings
    return out


def _agent(runs: int) -> list[float]:
    from ray_efa_eks.components.addons.node_agent import code_files

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for rel, text in code_files().items():
            (Path(tmp) / rel).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / rel).write_text(text)
        env = {"PATH": os.environ.get("PATH", ""), "PYTHONDONTWRITEBYTECODE": "1"}
        code = "import ray_efa_eks.efacheck.node_check, ray_efa_eks.efacheck.efa_exporter"
        for _ in range(runs):  # in the payload's folder, as the pod runs (-S: no installed ray_efa_eks answers)
            t0 = time.monotonic()
            subprocess.run([sys.executable, "-S", "-c", code], cwd=tmp, env=env, check=True)
            out.append(time.monotonic() - t0)
    return out


def _summary(xs: list[float]) -> dict[str, float]:
    return {"median_s": round(statistics.median(xs), 3), "min_s": round(min(xs), 3), "max_s": round(max(xs), 3)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="runs of each part (default 3; the proof runs 20x this)")
    ap.add_argument("--json", action="store_true", help="print only the JSON summary")
    a = ap.parse_args(argv)
    if a.runs < 1:
        ap.error("--runs must be >= 1")
    result = {
        "runs": a.runs,
        "join": _summary(_join(a.runs)),
        "cli": _summary(_cli(a.runs)),
        "agent": _summary(_agent(a.runs)),
        "proof": _summary(_proof(20 * a.runs)),
    }
    if not a.json:
        for part in ("join", "cli", "agent", "proof"):
            s = result[part]
            print(f"{part:6} median {s['median_s']:.3f} s ({s['min_s']:.3f}..{s['max_s']:.3f})")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
