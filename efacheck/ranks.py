"""The ranks: one torch.distributed rank per GPU (one per node for gloo) as a Ray actor in a STRICT_SPREAD
placement group; each checks its CUDA, reads the EFA counters, runs the sweep with NCCL_DEBUG=INFO and brings
its NCCL logs back. Errors come back as data or as :class:`~.failures.CheckFailed`, never as a hang."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from datetime import timedelta
from typing import Any

from . import efa_counters as _counters
from . import stack_probe as _probe
from . import sweep as _sweep
from .failures import CheckFailed
from .stale import check_stale, pod_stack

STARTUP_S = 150.0
"""Budget for rank placement, actor start-up, the CUDA check and counter reads, after the topology is there
(components/efa_check.Deadlines.startup_s adds job submission on top)."""

ENV_VARS = (
    "FI_PROVIDER",
    "NCCL_NET_PLUGIN",
    "NCCL_SOCKET_IFNAME",
    "FI_EFA_USE_DEVICE_RDMA",
    "NCCL_NET",
    "LD_LIBRARY_PATH",
)


OFI_PLUGIN_DIRS = ("/opt/amazon/ofi-nccl/lib64", "/opt/amazon/ofi-nccl/lib")
"""Where aws-ofi-nccl lives when LD_LIBRARY_PATH does not say: ``lib64`` in the pinned DLC (Amazon Linux 2023; its
sanity test checks ``/opt/amazon/ofi-nccl/lib64/libnccl-net.so``: aws/deep-learning-containers
test/sanity/scripts/test_sanity_training.py ``test_ofi_plugin_exists``), ``lib`` where the EFA installer runs on
Ubuntu images."""


def sizes(min_bytes: int, max_bytes: int) -> list[int]:
    out, s = [], max(4, min_bytes)
    while s <= max_bytes:
        out.append(s)
        s *= 2
    return out


def probe_env(
    env: dict[str, str] | None = None, dev_dir: str = "/dev/infiniband", plugin_dirs: tuple[str, ...] = OFI_PLUGIN_DIRS
) -> dict[str, Any]:
    """What this pod has for EFA: devices, libfabric efa provider, OFI plugin library, relevant env."""
    env = dict(os.environ if env is None else env)
    devices = sorted(os.path.basename(p) for p in glob.glob(os.path.join(dev_dir, "uverbs*")))
    fi_info: str | None = None
    exe = shutil.which("fi_info", path=env.get("PATH"))
    if exe:
        try:
            r = subprocess.run([exe, "-p", "efa"], capture_output=True, text=True, timeout=20)
            fi_info = "efa" if r.returncode == 0 and "efa" in r.stdout else "no efa provider"
        except (OSError, subprocess.TimeoutExpired) as e:
            fi_info = f"error: {e}"
    plugin = env.get("NCCL_NET_PLUGIN", "")
    libs: list[str] = []
    if plugin and os.path.isabs(plugin) and os.path.exists(plugin):
        libs.append(plugin)
    for d in filter(None, env.get("LD_LIBRARY_PATH", "").split(":") + list(plugin_dirs)):
        libs += sorted(glob.glob(os.path.join(d, "libnccl-net*.so*")))
    return {
        "host": socket.gethostname(),
        "efa_devices": devices,
        "fi_info_efa": fi_info,
        "ofi_plugin_libs": sorted(set(libs)),
        "env": {k: env.get(k) for k in ENV_VARS},
    }


class _Rank:
    """One torch.distributed rank; a Ray actor on one GPU (or one CPU slot)."""

    def preflight(self, backend: str) -> dict:
        import ray

        out = {
            "host": socket.gethostname(),
            "ip": ray.util.get_node_ip_address(),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "cuda": None,
            "devices": 0,
            **pod_stack(),
        }
        if backend == "nccl":
            import torch

            try:
                out["cuda"] = bool(torch.cuda.is_available())
                out["devices"] = torch.cuda.device_count() if out["cuda"] else 0
            except Exception as e:  # noqa: BLE001 - reported, not raised
                out["cuda"], out["error"] = False, f"{type(e).__name__}: {e}"
        return out

    def addr(self) -> tuple[str, int]:
        import ray

        s = socket.socket()
        s.bind(("", 0))
        port = s.getsockname()[1]
        s.close()
        return ray.util.get_node_ip_address(), port

    def counters(self) -> dict | None:
        if _counters is None:
            return None
        try:
            if hasattr(_counters, "read_view"):  # the node agent's exporter first, then the pod's sysfs
                return {"host": socket.gethostname(), **_counters.read_view()}
            return {"host": socket.gethostname(), "snapshot": _counters.read_counters()}
        except Exception as e:  # noqa: BLE001
            return {"host": socket.gethostname(), "error": f"{type(e).__name__}: {e}"}

    def storage(self, storage_path: str | None) -> dict:
        """efacheck.storage_proof in this rank's pod (a GPU worker): errors come back as data."""
        try:
            from . import storage_proof

            return storage_proof.prove(storage_path)
        except Exception as e:  # noqa: BLE001
            return {
                "ok": False,
                "host": socket.gethostname(),
                "step": "internal",
                "storage_path": storage_path,
                "error": f"{type(e).__name__}: {e}",
                "causes": ["unknown"],
            }

    def run(
        self,
        rank: int,
        world: int,
        master: tuple[str, int],
        backend: str,
        sz: list[int],
        iters: int,
        timeout_s: float,
        entries: list[dict] | None = None,
    ) -> dict:
        """Init the group, sweep, return timings + this rank's NCCL logs; errors come back as data (with the logs)."""
        import torch
        import torch.distributed as dist

        logdir = tempfile.mkdtemp(prefix="efa-check-")
        logfile = os.path.join(logdir, f"nccl-rank{rank}.log")
        os.environ.update(NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT,NET", NCCL_DEBUG_FILE=logfile)
        results: list[dict] = []
        error = None
        try:
            dev = torch.device("cpu")
            sync = None
            if backend == "nccl":
                dev = torch.device("cuda", 0)
                torch.cuda.set_device(dev)
                sync = torch.cuda.synchronize
            dist.init_process_group(
                backend,
                init_method=f"tcp://{master[0]}:{master[1]}",
                rank=rank,
                world_size=world,
                timeout=timedelta(seconds=timeout_s),
            )
            try:
                if entries is not None and _sweep is not None:
                    results = _sweep.run_sweep(entries, dev, iters=iters, sync=sync)
                else:
                    for n in sz:
                        t = torch.ones(n // 4, dtype=torch.float32, device=dev)
                        dist.all_reduce(t)  # warm-up / connection setup
                        if sync:
                            sync()
                        dist.barrier()
                        t0 = time.perf_counter()
                        for _ in range(iters):
                            dist.all_reduce(t)
                        if sync:
                            sync()
                        results.append(
                            {"collective": "all_reduce", "bytes": n, "time_s": (time.perf_counter() - t0) / iters}
                        )
            finally:
                dist.destroy_process_group()
        except Exception as e:  # noqa: BLE001 - the driver reports it with the NCCL logs
            error = f"{type(e).__name__}: {e}".strip()[:2000]
        logs = {}
        for f in glob.glob(os.path.join(logdir, "*")):
            with open(f, "rb") as fh:
                logs[f"{socket.gethostname()}:{os.path.basename(f)}"] = fh.read()
        stack = None
        if _probe is not None:
            try:
                stack = _probe.probe(nccl_log=b"".join(logs.values()).decode("utf-8", "replace"))
            except Exception as e:  # noqa: BLE001 - a probe failure must not hide the verdict
                stack = {"error": f"{type(e).__name__}: {e}"}
        return {"rank": rank, "results": results, "logs": logs, "probe": probe_env(), "error": error, "stack": stack}


def _get(refs, timeout: float, stage_what: str, actors=()):
    """ray.get with a deadline; hung, dead or raising ranks become CheckFailed."""
    import ray
    from ray.exceptions import GetTimeoutError, RayActorError

    try:
        return ray.get(refs, timeout=timeout)
    except GetTimeoutError:
        for a in actors:
            ray.kill(a)
        raise CheckFailed(
            "timeout",
            f"{stage_what} did not finish within {timeout:g} s (a hung collective or a "
            "rank that cannot reach its peers); the ranks were killed",
        ) from None
    except RayActorError as e:
        raise CheckFailed("actor_died", f"a rank's actor died during {stage_what}: {str(e).splitlines()[0]}") from None
    except ray.exceptions.RayTaskError as e:
        raise CheckFailed("rank_error", f"a rank raised during {stage_what}: {str(e).splitlines()[0]}") from None


def _sweep_plan(backend: str, lo: int, hi: int, world: int, preset: str | None) -> list[dict] | None:
    if _sweep is None:
        return None
    return _sweep.plan(lo, hi, world, preset=preset)


def run_check(
    backend: str,
    min_bytes: int,
    max_bytes: int,
    iters: int = 5,
    *,
    nodes: list[dict] | None = None,
    gpus_per_node: int = 0,
    timeout_s: float = 600.0,
    wait_s: float = STARTUP_S,
    preset: str | None = None,
    env_vars: dict[str, str] | None = None,
    storage_proof: bool = False,
    storage_path: str | None = None,
    min_nodes: int = 2,
    expect_stack: dict[str, str | None] | None = None,
) -> dict:
    """Place one rank per GPU (per node for gloo) across ``nodes``, check CUDA, sweep; raise CheckFailed on failure.

    storage_proof: rank 0 (in a GPU worker pod) first proves checkpoint storage (``storage_path``, default its
    pod's $RAY_EFA_EKS_STORAGE_PATH); the result is ``data["storage"]``."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    res = "GPU" if backend == "nccl" else "CPU"
    if nodes is None:
        nodes = [n for n in ray.nodes() if n.get("Alive") and (n.get("Resources") or {}).get(res, 0) >= 1]
    if len(nodes) < min_nodes:
        raise CheckFailed("topology", f"need >= {min_nodes} node(s) with {res}, found {len(nodes)}")
    per_node = [(gpus_per_node or int(n["Resources"][res])) if res == "GPU" else 1 for n in nodes]
    end = time.monotonic() + wait_s  # one start-up budget shared by the stages before the sweep

    def left() -> float:
        return max(1.0, end - time.monotonic())

    pg = placement_group([{res: k} for k in per_node], strategy="STRICT_SPREAD")
    actors: list = []
    try:
        try:
            ray.get(pg.ready(), timeout=left())
        except ray.exceptions.GetTimeoutError:
            raise CheckFailed(
                "placement", f"could not reserve {per_node} {res} on {len(per_node)} distinct nodes within {wait_s:g} s"
            ) from None
        Actor = ray.remote(_Rank)
        for b, k in enumerate(per_node):
            for _ in range(k):
                opts: dict[str, Any] = {"num_gpus": 1, "num_cpus": 0} if res == "GPU" else {"num_cpus": 1}
                if env_vars:
                    opts["runtime_env"] = {"env_vars": env_vars}
                strategy = PlacementGroupSchedulingStrategy(pg, b)
                actors.append(Actor.options(**opts, scheduling_strategy=strategy).remote())
        pre = _get([a.preflight.remote(backend) for a in actors], left(), "rank start-up", actors)
        if expect_stack:  # before anything else: a verdict on old pods would vouch for the wrong spec
            check_stale(pre, expect_stack, backend)
        if backend == "nccl":
            bad = [p for p in pre if not p["cuda"]]
            if bad:
                raise CheckFailed(
                    "no_cuda",
                    "Ray declares GPUs but CUDA is not available in "
                    f"{len(bad)} of {len(pre)} ranks: "
                    + "; ".join(
                        f"{p['host']} ({p['ip']}) CUDA_VISIBLE_DEVICES={p['cuda_visible_devices']}"
                        f" torch.cuda.is_available()=False{' ' + p['error'] if p.get('error') else ''}"
                        for p in bad[:4]
                    ),
                    backend=backend,
                )
        storage = (
            _get(actors[0].storage.remote(storage_path), left(), "storage proof", actors) if storage_proof else None
        )
        first = {}
        for i, p in enumerate(pre):
            first.setdefault(p["ip"], i)
        before = _get([actors[i].counters.remote() for i in first.values()], left(), "EFA counter read", actors)
        master = _get(actors[0].addr.remote(), left(), "rank address", actors)
        entries = _sweep_plan(backend, min_bytes, max_bytes, len(actors), preset)
        sz = sizes(min_bytes, max_bytes)
        outs = _get(
            [
                a.run.remote(i, len(actors), master, backend, sz, iters, timeout_s, entries)
                for i, a in enumerate(actors)
            ],
            timeout_s,
            "the collective sweep",
            actors,
        )
        after = _get([actors[i].counters.remote() for i in first.values()], STARTUP_S, "EFA counter read", actors)
    finally:
        for a in actors:
            ray.kill(a)
        remove_placement_group(pg)
    return {
        "world": len(actors),
        "nodes": len(nodes),
        "outs": outs,
        "preflight": pre,
        "counters": {"before": before, "after": after},
        "sweep_module": entries is not None,
        "iters": iters,
        "storage": storage,
    }
