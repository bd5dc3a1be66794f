"""In-cluster proof that NCCL traffic between nodes goes over EFA, not TCP.

The driver runs wherever the Ray job lands (on EKS: the GPU-less head), so it never looks at its own CUDA: the
backend and topology come from the cluster's resources. With GPU nodes in the cluster (or GPUs expected with
``--expect-gpus-per-node``) it is NCCL, one rank per GPU as a GPU actor, never gloo; gloo only on a cluster that
has no GPU node and is expected to have none (``--local`` on a laptop). The check waits for the declared
topology (``--expect-nodes`` x ``--expect-gpus-per-node``) up to ``--wait-s``, places the ranks with a
STRICT_SPREAD placement group (one bundle per node), checks each rank really has CUDA, runs the collective sweep
with NCCL_DEBUG=INFO and a per-rank NCCL_DEBUG_FILE under ``--timeout-s``, brings the logs back and judges them
with ``efacheck.nccl_log`` (expected nodes/NICs/GDRDMA passed on where it accepts them).

Every failure ends in one JSON object (``--json``) and an exit code, never a traceback or an endless wait:

  exit 0  efa: the NCCL logs show inter-node traffic on EFA (and every floor is met)
  exit 1  fallback (NCCL on TCP/Socket), below a busbw floor, or failed: a rank raised (NCCL init error, CUDA
          error), a collective hung past --timeout-s, or a rank's actor died
  exit 2  undetermined / could not be answered: Ray address unreachable, the declared topology did not come up
          within --wait-s (too few nodes, GPUs or ranks), Ray declares GPUs the ranks cannot use (no CUDA), no
          GPU nodes where GPUs are expected, NCCL not used
  exit 3  NCCL logs unreadable
  exit 64 usage error (bad arguments: checked before Ray starts)
  exit 130 interrupted (Ctrl-C; with --json one JSON object whose verdict is "interrupted")

JSON: ``verdict``, ``code``, ``failure`` ({``stage``, ``reason``} or null), ``reasons``, ``hints``, ``backend``,
``expected``, ``nodes``, ``world``, ``sweep`` rows, ``probes``, ``witness`` (the EFA counters: moved | flat |
unreadable), ``storage`` (the storage proof), ``transport`` and ``efa_exercised``; stages: unreachable, topology, no_gpu, no_cuda,
placement, rank_error, timeout, actor_died, wrong_result (a collective gave wrong values: exit 1), storage
(``--storage-proof``: a GPU worker pod could not write/list/read/delete a checkpoint object, exit 1), internal,
stale, busy;
``comparison`` carries the Socket sweep's own failure (``error``) without touching the EFA verdict.

What really runs: ``--image`` and ``--spec-hash`` are what the gate Job was rendered for; every rank
(and the driver, on the head) reads ``RAY_EFA_EKS_IMAGE`` / ``RAY_EFA_EKS_SPEC_HASH`` from its pod's env and a
pod that differs ends the check with stage ``stale`` (exit 2, naming the pods and nodes) instead of vouching for
old pods under a new name. A busy cluster: when fewer GPUs are free than the check needs, it names the Ray jobs
holding them (state API) and waits within ``--wait-s``; then stage ``busy`` (exit 2) names them and what to do.

python -m ray_efa_eks.efacheck.efa_check [--address auto | --local] [--json] [--expect-nodes N]
    [--expect-gpus-per-node G] [--expect-nics K] [--expect-gdrdma] [--wait-s S] [--timeout-s T] [--min-busbw-gbps X]
    [--efa-gbps G --min-busbw-fraction F] [--compare-socket] [--preset P] [--manifest JSON | --image REF]
    [--spec-hash H] [--strict-versions] [--report DIR]

Every shape the stack accepts has a gate it can pass (``--expect-transport``): ``efa`` (the default) is the proof
above; ``socket`` (a stack with ``efa: false``) passes when NCCL crossed the nodes over its Socket transport, the
collectives gave the right values, and says EFA was not exercised (exit 0, verdict ``socket``); ``intra-node`` (one
GPU node) runs NCCL across the node's GPUs only and says EFA was not exercised (exit 0, verdict ``intra_node``).
Neither demands EFA interfaces, GPUDirect RDMA, counters or a second node.

Second witness and extras where their modules are present: EFA hardware counters per node before
and after the sweep (counters flat while the log says efa -> fallback), the three FSDP collectives with the
preset's shard sizes, an NCCL_NET=Socket sweep in fresh ranks (--compare-socket), line-rate fraction, per-rank
versions against the image manifest (ranks that disagree, or --strict-versions mismatches, fail an efa verdict
with exit 1), report.md + busbw.png.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
import time
import traceback
from typing import Any

from .cli import EXIT_INTERRUPTED, run_cli  # noqa: F401 - the check's Ctrl-C code, named here for its callers
from . import report as _report
from . import stack_probe as _probe
from . import sweep as _sweep
from .check_args import CheckRequest, manifest_text, parse, parser, usage_problem  # noqa: F401 - the CLI's names
from .failures import CheckFailed, failure_result
from .gate_steps import CHECK_JOB_PREFIX  # noqa: F401 - the gate's Ray jobs (the GPU holders' names)
from .ranks import run_check
from .stale import check_stale, pod_stack
from .topology import ask_autoscaler, busy_probe, wait_topology
from .verdict import judge, summarize_sweep, wrong_results


def _table(r: dict) -> str:
    out = [f"{'collective':>24} {'size':>12} {'time(us)':>12} {'algbw(GB/s)':>12} {'busbw(GB/s)':>12}"]
    out += [
        f"{s.get('collective', 'all_reduce'):>24} {s['bytes']:>12} {s['time_us']:>12.1f} {s['algbw_gbps']:>12.3f} "
        f"{s['busbw_gbps']:>12.3f}"
        for s in r.get("sweep") or []
    ]
    out.append(
        f"verdict: {r['verdict']} (exit {r['code']})  backend={r.get('backend')} ranks={r.get('world')} "
        f"nodes={r.get('nodes')} network={r.get('network')} provider={r.get('provider')}"
    )
    if r.get("failure"):
        out.append(f"  failure [{r['failure']['stage']}]: {r['failure']['reason']}")
    out += [f"  reason: {x}" for x in r["reasons"]] + [f"  hint: {h}" for h in r["hints"]]
    for p in r.get("probes") or []:
        out.append(
            f"  probe {p['host']}: efa_devices={p['efa_devices']} fi_info={p['fi_info_efa']} "
            f"plugins={p['ofi_plugin_libs']} "
            f"env={ {k: v for k, v in p['env'].items() if k != 'LD_LIBRARY_PATH'} }"
        )
    return "\n".join(out)


GCS_PROBE_S = 30.0
"""At most this long (or ``--wait-s`` when shorter) for a GCS address to answer before ``ray.init`` is called."""
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
"""The HTTP/2 client connection preface and an empty SETTINGS frame (RFC 9113 section 3.4)."""


def gcs_silence(host: str, port: int, timeout: float) -> str | None:
    """None when ``host:port`` answers as a gRPC server does (the GCS is one): an HTTP/2 SETTINGS frame back after
    the client preface, within ``timeout`` s in all (RFC 9113 section 3.4: the server's preface is a SETTINGS
    frame). Else why not. ``ray.init`` itself retries a silent address for many minutes (ray/_private/node.py
    ``_init_gcs_client``: 20 tries, then ``get_all_node_info_until_retrieved`` at 60 s a try), so this is asked
    first."""
    deadline = time.monotonic() + timeout
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(_H2_PREFACE)
            head = b""
            while len(head) < 9:
                s.settimeout(max(0.01, deadline - time.monotonic()))
                chunk = s.recv(9 - len(head))
                if not chunk:
                    return "it closed the connection without answering"
                head += chunk
    except (socket.timeout, TimeoutError):
        return f"it accepted the connection but did not answer within {timeout:g} s"
    except (OSError, ValueError) as e:
        return str(e)
    if head[3] != 0x04:
        return "it answered, but not as a Ray GCS (a gRPC server) does"
    return None


def _connect(address: str, wait_s: float) -> None:
    """ray.init that cannot hang: a host:port that does not answer as a GCS within ``min(wait_s, GCS_PROBE_S)`` is
    'unreachable' (:func:`gcs_silence`)."""
    import ray

    # "auto" connects to $RAY_ADDRESS first when it is set (ray/_private/services.py canonicalize_bootstrap_address)
    target = os.environ.get("RAY_ADDRESS", "") if address == "auto" else address
    if re.fullmatch(r"[^/:\s]+:\d+|\[[0-9a-fA-F:.]+\]:\d+", target):
        host, _, port = target.rpartition(":")
        try:
            why = gcs_silence(host.strip("[]"), int(port), min(wait_s, GCS_PROBE_S))
        except ValueError as e:
            why = str(e)
        if why:
            said = f"{address!r} (RAY_ADDRESS={target})" if target != address else repr(address)
            raise CheckFailed("unreachable", f"Ray GCS at {said} is unreachable: {why}") from None
    elif address not in ("auto", "local") and not address.startswith("ray://"):
        raise CheckFailed("unreachable", f"Ray GCS at {address!r} is unreachable: not HOST:PORT") from None
    try:
        ray.init(address=address, log_to_driver=False)
    except Exception as e:  # noqa: BLE001 - ConnectionError, RuntimeError, ValueError from ray.init
        raise CheckFailed(
            "unreachable",
            f"could not connect to Ray at {address!r}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
        ) from None


def socket_comparison(
    backend: str, lo: int, hi: int, a: CheckRequest, nodes: list[dict], gpu: bool, efa_rows: list[dict]
) -> dict:
    """The NCCL_NET=Socket sweep in fresh ranks and its EFA/Socket ratios: {"socket_rows", "comparison"}.

    Its own failure (a hung or failing Socket sweep, wrong values over Socket) is reported as
    ``comparison.error`` {stage, reason} and never replaces the EFA verdict: the comparison is a measurement,
    not a witness."""
    try:
        # fresh actors: NCCL reads NCCL_NET at communicator init, so the Socket sweep needs new processes
        sock = run_check(
            backend,
            lo,
            hi,
            a.iters,
            nodes=nodes,
            gpus_per_node=a.expect_gpus_per_node if gpu else 0,
            timeout_s=a.timeout_s,
            preset=a.preset,
            env_vars=dict(_sweep.SOCKET_ENV),
        )
        errors = [(o.get("rank"), o["error"]) for o in sock["outs"] if o.get("error")]
        if errors:
            raise CheckFailed("rank_error", "; ".join(f"rank {r}: {e}" for r, e in errors[:4]))
        rows = summarize_sweep(sock["outs"], sock["world"])
        wrong = wrong_results(sock["outs"])
        comparison = _sweep.compare(efa_rows, rows)
        if wrong:
            comparison["error"] = {
                "stage": "wrong_result",
                "reason": "wrong values over Socket: "
                + "; ".join(f"{w['collective']} of {w['bytes']} bytes" for w in wrong[:6]),
            }
        return {"socket_rows": rows, "comparison": comparison}
    except CheckFailed as e:
        return {"socket_rows": [], "comparison": {"error": {"stage": e.stage, "reason": e.reason}}}
    except Exception as e:  # noqa: BLE001 - a comparison failure must not hide the verdict
        return {"socket_rows": [], "comparison": {"error": {"stage": "internal", "reason": f"{type(e).__name__}: {e}"}}}


def image_of(a: CheckRequest) -> dict:
    """The image the check vouches for: the reference, and the digest the pods run (``--image-digest``, from the
    gate's image audit; else the reference's own when it pins one)."""
    ref = a.image or os.environ.get("RAY_EFA_EKS_IMAGE")
    m = re.search(r"@(sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128})$", ref or "")
    return {"reference": ref, "digest": a.image_digest or (m.group(1) if m else None)}


def check(a: CheckRequest) -> dict:
    """Wait for the topology, run, judge; CheckFailed is turned into a result by the caller."""
    expected = {
        "nodes": a.expect_nodes,
        "gpus_per_node": a.expect_gpus_per_node,
        "nics": a.expect_nics,
        "gdrdma": a.expect_gdrdma,
    }

    def log(m: str) -> None:
        print(m, file=sys.stderr, flush=True)

    expect_stack = {"image": a.image, "spec_hash": a.spec_hash} if (a.image or a.spec_hash) and not a.local else None
    if expect_stack:  # the driver runs on the head: its pod's env says which spec the head was created from
        import ray

        check_stale(
            [{"role": "head", "host": socket.gethostname(), "ip": ray.util.get_node_ip_address(), **pod_stack()}],
            expect_stack,
        )
    backend, nodes = wait_topology(
        a.expect_nodes,
        a.expect_gpus_per_node,
        a.wait_s,
        a.backend,
        log=log,
        busy=None if a.local else busy_probe,
        ask=None if a.local else ask_autoscaler,
    )
    gpu = backend == "nccl"
    lo = a.min_bytes or (1 << 20 if gpu else 64 << 10)
    hi = a.max_bytes or (1 << 30 if gpu else 4 << 20)
    transport = a.expect_transport
    extra: dict[str, Any] = {"storage_proof": True, "storage_path": a.storage_path} if a.storage_proof else {}
    if transport == "intra-node":
        extra["min_nodes"] = 1
    data = run_check(
        backend,
        lo,
        hi,
        a.iters,
        nodes=nodes,
        gpus_per_node=a.expect_gpus_per_node if gpu else 0,
        timeout_s=a.timeout_s,
        preset=a.preset,
        expect_stack=expect_stack,
        **extra,
    )
    expect = (
        {"expect_nodes": a.expect_nodes, "expect_nics": a.expect_nics, "expect_gdrdma": a.expect_gdrdma or None}
        if transport == "efa"
        else {}
    )
    r = judge(data, backend, a.min_busbw_gbps, expect, require_counters=a.require_counters, transport=transport)
    r["expected"] = expected
    r["rows"] = r["sweep"]
    fail: list[str] = []
    if a.compare_socket and transport != "efa":
        r["reasons"].append(f"--compare-socket skipped: the {transport} gate has no EFA sweep to compare")
    elif a.compare_socket and _sweep is not None and not r.get("failure"):
        r.update(socket_comparison(backend, lo, hi, a, nodes, gpu, r["rows"]))
        if r["comparison"].get("error"):
            err = r["comparison"]["error"]
            r["reasons"].append(
                f"the Socket comparison failed ({err['stage']}): {err['reason']}; the EFA verdict "
                "above stands, only the EFA/Socket ratio is missing"
            )
    if _sweep is not None:
        r["line_rate"] = _sweep.line_rate(r["rows"], a.efa_gbps)
        why = _sweep.below_floor(r["line_rate"], a.min_busbw_fraction)
        if why:
            fail.append(why)
    if _probe is not None:
        r["stack_probes"] = [o.get("stack") or {} for o in data["outs"]]
        try:
            manifest = (
                _probe.parse_manifest(manifest_text(a.manifest))
                if a.manifest
                else _probe.manifest_for(a.image or os.environ.get("RAY_EFA_EKS_IMAGE"))
            )
        except ValueError as e:
            manifest = None
            r["reasons"].append(f"--manifest: {e}")
        r["versions"] = _probe.compare_versions(r["stack_probes"], manifest, a.strict_versions)
        if r["versions"]["status"] == "failure":
            fail += r["versions"]["reasons"]
    if fail:
        r["reasons"] += fail
        if r["code"] == 0:  # efa, but below the line-rate floor or with ranks on different stacks
            r["verdict"], r["code"] = "failed", 1
    return r


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    a = parse(argv, prog)
    try:
        return _main(a)
    except KeyboardInterrupt:
        print("efa_check: interrupted", file=sys.stderr, flush=True)
        if a.json:
            print(
                json.dumps(
                    {
                        "verdict": "interrupted",
                        "code": EXIT_INTERRUPTED,
                        "failure": {"stage": "interrupted", "reason": "interrupted (Ctrl-C)"},
                    }
                ),
                flush=True,
            )
        return EXIT_INTERRUPTED


def _publish(r: dict) -> None:
    """The gate's verdict as a metric on the head (efacheck/verdict_metrics.py), run name ``gate``; never fails it."""
    from . import verdict_metrics

    why = verdict_metrics.publish("gate", "gate", r.get("verdict"))
    if why:
        print(f"efa_check: verdict not exported as a metric: {why}", file=sys.stderr, flush=True)


def _main(a: CheckRequest) -> int:
    expected = {
        "nodes": a.expect_nodes,
        "gpus_per_node": a.expect_gpus_per_node,
        "nics": a.expect_nics,
        "gdrdma": a.expect_gdrdma,
    }
    try:
        if a.local:
            from .local_cluster import local_cluster  # imports ray: only for --local

            with local_cluster(worker_nodes=2, cpus_per_node=1):  # connects ray itself
                r = check(a)
        else:
            _connect(a.address, a.wait_s)
            r = check(a)
            _publish(r)
    except CheckFailed as e:
        r = failure_result(e, expected)
    except Exception as e:  # noqa: BLE001 - the contract is JSON + exit code, never a traceback
        tb = traceback.extract_tb(e.__traceback__)[-1]
        r = failure_result(
            CheckFailed("internal", f"{type(e).__name__}: {e} ({os.path.basename(tb.filename)}:{tb.lineno})"), expected
        )
    r.setdefault("image", image_of(a))  # a failed check says which image it failed on, too
    if a.report and _report is not None:
        try:
            out = _report.write_report(a.report, r, a.efa_gbps)
            r["report"] = {k: out[k] for k in ("report_md", "png", "plot_error")}
            print(out["text"], file=sys.stderr, flush=True)  # readable in the Job log, files or not
        except Exception as e:  # noqa: BLE001 - the verdict stands without its report
            r["report"] = {"error": f"{type(e).__name__}: {e}"}
    try:
        print(json.dumps(r, indent=2, default=str) if a.json else _table(r), flush=True)
    except BrokenPipeError:
        pass
    return r["code"]


if __name__ == "__main__":
    sys.exit(run_cli(main, None, "python -m ray_efa_eks.efacheck.efa_check"))
