"""The env the stack renders on the GPU worker pods reaches the run's decisions: the fabric capture reads which
NCCL_* values are the stack's (``RAY_EFA_EKS_STACK_NCCL_ENV``) and the memory check reads the worker GPU
(``RAY_EFA_EKS_GPU_MEMORY_MIB``, ``RAY_EFA_EKS_GPU_MODEL``). Each is taken from the rendered RayCluster, run
through the run's own entry points, then changed: the outcome changes. (NCCL_SOCKET_IFNAME, FI_PROVIDER,
NCCL_NET_PLUGIN and FI_EFA_FORK_SAFE are read by NCCL and libfabric, not by this code: the gate's verdict on a GPU
run judges what they did.)"""

from __future__ import annotations

import pytest

from ray_efa_eks.training.errors import CliError
from ray_efa_eks.training.request import TrainRequest, gpu_memory_problem
from ray_efa_eks.training.fabric import plan_capture
from ray_efa_eks.training.memory import min_ranks
from ray_efa_eks.training.model import get_config
from tests.helpers.mockruns import shared_run


def worker_env() -> dict[str, str]:
    """The plain values the default stack renders on the GPU worker container."""
    rc = shared_run({}).one("kubernetes:ray.io/v1:RayCluster")
    (container,) = [
        c for c in rc["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"] if c["name"] == "ray-worker"
    ]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def capture(env: dict[str, str]) -> dict:
    return plan_capture("nccl", env, "/tmp/nccl-logs", 0, "gpu-node-0", 42)["capture"]


@pytest.mark.parametrize(
    "name, value",
    [
        ("RAY_EFA_EKS_STACK_NCCL_ENV", "{}"),  # the stack's WARN now looks like the user's own: the capture stands back
        ("NCCL_DEBUG", "INFO"),  # a value other than the stack's is the user's
    ],
)
def test_the_fabric_capture_reads_the_rendered_nccl_env(name, value):
    env = worker_env()
    assert capture(env)["by"] == "run" and capture(env)["replaced"]["NCCL_DEBUG"] == env["NCCL_DEBUG"]
    assert capture({**env, name: value})["by"] == "user"


def refusal(env: dict[str, str], workers: int) -> str | None:
    try:
        gpu_memory_problem(None, TrainRequest(preset="1b", workers=workers, storage_path="/tmp/x"), env)
    except CliError as e:
        return str(e)
    return None


def test_the_memory_check_reads_the_rendered_gpu():
    env = worker_env()
    mib = float(env["RAY_EFA_EKS_GPU_MEMORY_MIB"])
    fewest = min_ranks(get_config("1b"), 8, mib)
    assert fewest and refusal(env, fewest) is None  # fits the rendered GPU ...
    assert refusal({**env, "RAY_EFA_EKS_GPU_MEMORY_MIB": str(mib / 2)}, fewest)  # ... not one of half its memory
    said = refusal(env, fewest - 1) if fewest > 1 else refusal({**env, "RAY_EFA_EKS_GPU_MEMORY_MIB": "1024"}, 1)
    assert env["RAY_EFA_EKS_GPU_MODEL"] in said
    renamed = {**env, "RAY_EFA_EKS_GPU_MODEL": "X9"}
    assert "X9" in (
        refusal(renamed, fewest - 1) if fewest > 1 else refusal({**renamed, "RAY_EFA_EKS_GPU_MEMORY_MIB": "1024"}, 1)
    )
