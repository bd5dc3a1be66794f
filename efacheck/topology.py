"""The declared topology, from the cluster, with a deadline: which backend, which nodes the ranks use, and who
holds the GPUs when the cluster is busy (Ray's state API)."""

from __future__ import annotations

import time
from typing import Any

from .failures import CheckFailed

STATE_API_TIMEOUT_S = 30
"""Each Ray state API list (placement groups, actors, tasks, jobs) may take at most this long (Ray's own default,
ray.util.state ``DEFAULT_RPC_TIMEOUT``, said here so the figure is ours)."""


def _node_view(n: dict) -> dict:
    res = n.get("Resources") or {}
    return {
        "node_id": n.get("NodeID", "")[:12],
        "ip": n.get("NodeManagerAddress"),
        "cpus": res.get("CPU", 0),
        "gpus": int(res.get("GPU", 0)),
    }


def choose_backend(nodes: list[dict], expect_gpus_per_node: int, requested: str = "auto") -> str:
    """nccl when any alive node declares GPUs or GPUs are expected; gloo only for an all-CPU cluster expected so."""
    if requested != "auto":
        return requested
    if expect_gpus_per_node > 0 or any(n.get("Alive") and (n.get("Resources") or {}).get("GPU", 0) >= 1 for n in nodes):
        return "nccl"
    return "gloo"


def assess(
    nodes: list[dict], backend: str, expect_nodes: int, expect_gpus_per_node: int
) -> tuple[list[dict], str | None]:
    """The nodes the ranks will use and, while the topology is short of what was declared, why (None = ready)."""
    alive = [n for n in nodes if n.get("Alive")]
    if backend == "nccl":
        gpu = [n for n in alive if (n.get("Resources") or {}).get("GPU", 0) >= 1]
        want = max(expect_gpus_per_node, 1)
        full = [n for n in gpu if (n.get("Resources") or {}).get("GPU", 0) >= want]
        views = ", ".join(f"{v['ip']} ({v['gpus']} GPU, {v['cpus']:g} CPU)" for v in map(_node_view, alive)) or "none"
        if not gpu:
            return [], (
                f"no GPU nodes: {len(alive)} alive Ray node(s) [{views}] declare no GPU; expected "
                f"{expect_nodes} node(s) with {want} GPU(s) each"
            )
        if len(full) < expect_nodes:
            short = [f"{v['ip']} has {v['gpus']}" for v in map(_node_view, gpu) if v["gpus"] < want]
            return full, (
                f"{len(full)} of {expect_nodes} expected GPU nodes with {want} GPU(s) each are up"
                + (f" ({'; '.join(short)})" if short else "")
                + f"; alive nodes: [{views}]"
            )
        return full, None
    cpu = [n for n in alive if (n.get("Resources") or {}).get("CPU", 0) >= 1]
    if len(cpu) < expect_nodes:
        return cpu, f"{len(cpu)} of {expect_nodes} expected nodes with a CPU are up"
    return cpu, None


def _holder_line(h: dict) -> str:
    name = h.get("submission_id") or f"job {h['job_id']}"
    what = f" ({h['entrypoint'][:80]})" if h.get("entrypoint") else ""
    return f"{name}{what} holds {h['gpus']:g} GPU(s), status {h.get('status') or 'unknown'}"


def gpu_holders(own_job_id: str | None = None) -> list[dict]:
    """The Ray jobs that hold GPUs now, from Ray's state API (the dashboard's): placement groups with GPU bundles,
    and GPU actors and running GPU tasks outside a placement group, summed per job; our own job is left out (an
    earlier gate check, ``efa-check-*``, is named too: the gate's script stops those before it submits, so one that
    still holds GPUs is being stopped or outlived the stop).

    Each: ``job_id``, ``submission_id`` (None for a driver started by hand), ``entrypoint``, ``status``, ``gpus``.
    """
    from ray.util.state import list_actors, list_jobs, list_placement_groups, list_tasks

    held: dict[str, float] = {}

    def add(job: str | None, n: float) -> None:
        if job and n:
            held[job] = held.get(job, 0.0) + n

    kw: dict[str, Any] = {
        "detail": True,
        "limit": 10000,
        "raise_on_missing_output": False,
        "timeout": STATE_API_TIMEOUT_S,
    }
    for pg in list_placement_groups(filters=[("state", "=", "CREATED")], **kw):
        add(pg.creator_job_id, sum((b.get("unit_resources") or {}).get("GPU", 0) for b in pg.bundles or []))
    for a in list_actors(filters=[("state", "=", "ALIVE")], **kw):
        if not getattr(a, "placement_group_id", None):
            add(a.job_id, (a.required_resources or {}).get("GPU", 0))
    for t in list_tasks(filters=[("state", "=", "RUNNING")], **kw):
        if not getattr(t, "placement_group_id", None) and getattr(t, "type", "") == "NORMAL_TASK":
            add(t.job_id, (t.required_resources or {}).get("GPU", 0))
    listed = list_jobs(raise_on_missing_output=False, timeout=STATE_API_TIMEOUT_S)
    jobs = {j.job_id: j for j in listed if getattr(j, "job_id", None)}
    out = []
    for job_id, n in sorted(held.items()):
        j = jobs.get(job_id)
        sid = getattr(j, "submission_id", None)
        if job_id == own_job_id:
            continue
        status = getattr(j, "status", None)
        out.append(
            {
                "job_id": job_id,
                "submission_id": sid,
                "entrypoint": getattr(j, "entrypoint", None),
                "status": getattr(status, "value", status),
                "gpus": n,
            }
        )
    return out


def busy_probe(need: int) -> str | None:
    """None when ``need`` GPUs are free in the cluster; else who holds them (one line, for the log and the verdict)."""
    import ray

    free = ray.available_resources().get("GPU", 0)
    if free >= need:
        return None
    try:
        own = ray.get_runtime_context().get_job_id()
    except Exception:  # noqa: BLE001
        own = None
    try:
        holders = gpu_holders(own)
        who = "; ".join(map(_holder_line, holders)) or "no Ray job holds them (they are being released)"
    except Exception as e:  # noqa: BLE001 - the state API needs the dashboard; say so instead of failing
        who = f"the Ray state API could not say which job holds them ({type(e).__name__}: {e})"
    return f"{free:g} of the {need} GPUs the check needs are free: {who}"


def ask_autoscaler(bundles: list[dict[str, float]]) -> None:
    """Ask Ray's autoscaler for ``bundles`` (``ray.autoscaler.sdk.request_resources``).

    The request is sticky: it holds nodes until replaced, so the caller withdraws it (``[]``) once the nodes are
    there; idle workers then go after the autoscaler's idle timeout. With a fixed fleet the request is already met.
    """
    from ray.autoscaler.sdk import request_resources

    request_resources(bundles=bundles)


def wait_topology(
    expect_nodes: int,
    expect_gpus_per_node: int,
    wait_s: float,
    requested: str = "auto",
    poll_s: float = 1.0,
    log=print,
    busy=None,
    ask=None,
) -> tuple[str, list[dict]]:
    """Poll ray.nodes() until the declared topology is there or ``wait_s`` passes; (backend, nodes).

    ``busy(need)`` (e.g. :func:`busy_probe`): with the topology there, the check also waits, within the same
    ``wait_s``, until ``need`` GPUs are free; at the deadline stage ``busy`` names the jobs holding them.
    ``ask(bundles)`` (e.g. :func:`ask_autoscaler`): GPU nodes that scale from zero exist only once Ray asks for
    them, so the wait first asks for ``expect_nodes`` GPU-node bundles and withdraws the request when it returns.
    """
    if ask is None or expect_gpus_per_node < 1:
        return _wait_topology(expect_nodes, expect_gpus_per_node, wait_s, requested, poll_s, log, busy)
    try:
        ask([{"GPU": float(expect_gpus_per_node)}] * expect_nodes)
        log(f"[efa_check] asked Ray's autoscaler for {expect_nodes} node(s) of {expect_gpus_per_node} GPU(s)")
    except Exception as e:  # noqa: BLE001 - no autoscaler is a fixed fleet: the wait below judges it
        log(f"[efa_check] could not ask Ray's autoscaler for nodes ({type(e).__name__}: {e}); waiting for them")
        ask = None
    try:
        return _wait_topology(expect_nodes, expect_gpus_per_node, wait_s, requested, poll_s, log, busy)
    finally:
        if ask is not None:
            try:
                ask([])
            except Exception as e:  # noqa: BLE001
                log(
                    f"[efa_check] could not withdraw the node request ({type(e).__name__}: {e}): idle GPU nodes "
                    "stay until `ray.autoscaler.sdk.request_resources(bundles=[])` is called"
                )


def _wait_topology(
    expect_nodes: int, expect_gpus_per_node: int, wait_s: float, requested: str, poll_s: float, log, busy
) -> tuple[str, list[dict]]:
    import ray

    deadline = time.monotonic() + wait_s
    last = None
    while True:
        nodes = ray.nodes()
        backend = choose_backend(nodes, expect_gpus_per_node, requested)
        use, short = assess(nodes, backend, expect_nodes, expect_gpus_per_node)
        if short is None and busy is not None and backend == "nccl":
            held = busy(expect_nodes * max(expect_gpus_per_node, 1))
            if held is not None:
                if time.monotonic() >= deadline:
                    raise CheckFailed(
                        "busy",
                        f"after waiting {wait_s:g} s: {held}",
                        backend=backend,
                        nodes=[_node_view(n) for n in nodes if n.get("Alive")],
                    )
                if held != last:
                    log(
                        f"[efa_check] the cluster is busy, waiting ({max(0, deadline - time.monotonic()):.0f} s "
                        f"left): {held}"
                    )
                    last = held
                time.sleep(2 * poll_s)  # each busy probe asks the state API: not every second
                continue
        if short is None:
            return backend, use
        if time.monotonic() >= deadline:
            stage = (
                "no_gpu"
                if backend == "nccl"
                and not any((n.get("Resources") or {}).get("GPU", 0) >= 1 for n in nodes if n.get("Alive"))
                else "topology"
            )
            raise CheckFailed(
                stage,
                f"after waiting {wait_s:g} s: {short}",
                backend=backend,
                nodes=[_node_view(n) for n in nodes if n.get("Alive")],
            )
        if short != last:
            left = max(0, deadline - time.monotonic())
            log(f"[efa_check] waiting for the declared topology ({left:.0f} s left): {short}")
            last = short
        time.sleep(poll_s)
