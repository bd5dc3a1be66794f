"""Which fabric a training run's collectives used, judged per run by the EFA gate's own code.

The gate proves EFA once, at ``pulumi up``; a run weeks later can still land on TCP (a replaced node, an image whose
plugin does not load, a leftover ``NCCL_NET``). So every NCCL run captures NCCL's own INIT and NET lines per rank and
judges them with ``efacheck.nccl_log`` (the gate's verdict code), as soon as NCCL has initialised (the first
collective) and again at the end, and reads the EFA hardware counters of each node (``efacheck.efa_counters``, from
the node agent's EFA exporter) where the node has them.

Capture without changing the job's output. What NCCL logs by default depends on where it runs: NCCL itself logs
nothing when ``NCCL_DEBUG`` is unset, but it also reads ``NCCL_CONF_FILE`` (else ``~/.nccl.conf``) and then
``/etc/nccl.conf``, each with ``setenv(name, value, 0)``, so the environment wins over either file and the user's
file over the system's (NVIDIA/nccl ``src/misc/param.cc`` ``initEnvFunc``/``setEnvFile``, ``ncclOsSetEnv``). The
pinned DLC writes ``NCCL_DEBUG=INFO`` into ``/etc/nccl.conf`` (its EFA installer, checked by its sanity test:
aws/deep-learning-containers ``test/sanity/scripts/test_sanity_training.py`` ``test_nccl_config`` and
``check_nccl_efa_gdrcopy.sh``) and sets ``ENV NCCL_DEBUG=INFO`` (``docker/ray-train/Dockerfile.cuda``): in that image
NCCL prints INFO lines to stdout. The stack puts ``NCCL_DEBUG`` (its ``ncclDebug``, WARN) on every GPU worker pod,
which overrides both, and says so in ``RAY_EFA_EKS_STACK_NCCL_ENV`` (:data:`STACK_NCCL_ENV`: the NCCL_* values it
rendered). With ``NCCL_DEBUG_FILE`` NCCL writes its lines to that file instead of stdout; NCCL reads these variables
when it logs its first line, which is at communicator creation (torch creates NCCL communicators lazily, at the first
collective, unless ``init_process_group`` gets a ``device_id``; Ray Train's does not). Source: NVIDIA/nccl
``src/debug.cc`` (``ncclDebugInit``: ``%h`` is the host name cut at the first '.', ``%p`` the pid, the file is
line-buffered).

Whose settings win (:func:`plan_capture`, and the summary's ``capture`` says which applied): a value the stack
rendered (the same name and value as in :data:`STACK_NCCL_ENV`) is the stack's default, and the run replaces it with
its capture (``NCCL_DEBUG=INFO``, or TRACE when the stack asked for TRACE; ``NCCL_DEBUG_SUBSYS=INIT,NET``; a per-rank
``NCCL_DEBUG_FILE``). A user who set any ``NCCL_DEBUG*`` variable themselves (``submit --env``, a runtime env, a
shell on a node, another value than the stack's) keeps exactly that: nothing is set, and their ``NCCL_DEBUG_FILE``
is read when their level logs INFO; otherwise the verdict is ``undetermined`` and says why. A ``NCCL_DEBUG*`` the
user put in ``~/.nccl.conf`` is overridden by the run's environment (the environment wins).

The verdict is the gate's own code: ``efacheck.nccl_log`` and ``efacheck.efa_counters``, imported plainly (training
may use the proof; the proof never imports training: tests/test_architecture.py). ``submit`` ships those modules
next to ``training`` (``training/submit.py``'s ``EFACHECK_FILES``).

Everything except :class:`Probe` is pure: plain dicts and bytes in and out.
"""

from __future__ import annotations

import json
import os
import re
import socket
from typing import Any, Mapping, Optional

from ..efacheck import efa_counters, nccl_log

DEBUG_KEYS = ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE")
"""NCCL's logging variables: if the user set any of them, the run sets none."""
CAPTURE_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}
"""What the run sets (with a per-rank NCCL_DEBUG_FILE): INIT and NET are the lines the verdict reads."""
STACK_NCCL_ENV = "RAY_EFA_EKS_STACK_NCCL_ENV"
"""JSON of the NCCL_* values the stack rendered on the pod (components/ray/raycluster.py ``STACK_NCCL_ENV``)."""
IMAGE_ENV = "RAY_EFA_EKS_IMAGE"
"""Every Ray container's image reference (components/ray/raycluster.py ``IMAGE_ENV``)."""
_DIGEST = re.compile(r"@(sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128})$")
VERDICTS = ("efa", "fallback", "undetermined", "not-nccl")
FABRIC_FILE = "fabric.json"
"""Written by rank 0 into every checkpoint: the fabric verdict of the attempt that wrote it."""
LOG_DIR_NAME = "nccl-logs"
"""Per-rank NCCL logs live in ``<storage>/<name>/nccl-logs/`` (local storage) on each rank's node."""


def log_dir_for(storage_path: str, name: str, tmpdir: str) -> str:
    """Where ranks write their NCCL logs: under the run's directory for local storage, else under ``tmpdir``
    (NCCL writes to a local file; an ``s3://`` run directory is not one)."""
    if "://" in storage_path:
        return os.path.join(tmpdir, "ray-efa-eks-nccl-logs", name)
    return os.path.join(storage_path, name, LOG_DIR_NAME)


def nccl_hostname(hostname: Optional[str] = None) -> str:
    """The host name NCCL puts in file names and line prefixes: cut at the first '.', '%' and '/' as '-'."""
    host = (hostname or socket.gethostname()).split(".")[0]
    return host.replace("%", "-").replace("/", "-")


def expand_debug_file(pattern: str, host: str, pid: int) -> str:
    """NCCL's expansion of NCCL_DEBUG_FILE: ``%h`` host, ``%p`` pid, ``%%`` a '%', anything else echoed."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c != "%" or i + 1 >= len(pattern):
            out.append(c)
            i += 1
            continue
        nxt = pattern[i + 1]
        out.append({"%": "%", "h": host, "p": str(pid)}.get(nxt, "%" + nxt))
        i += 2
    return "".join(out)


def stack_nccl_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The NCCL_* values the stack says it rendered on this pod (:data:`STACK_NCCL_ENV`); {} when absent or bad."""
    try:
        rendered = json.loads(environ.get(STACK_NCCL_ENV) or "{}")
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in rendered.items()} if isinstance(rendered, dict) else {}


def plan_capture(backend: str, environ: Mapping[str, str], log_dir: str, rank: int, host: str, pid: int) -> dict:
    """How this rank captures NCCL's lines: ``env`` to set, ``log`` to read afterwards, or ``note`` why not, and
    ``capture``: whose logging settings applied (``by``: ``run`` or ``user``; ``replaced``: the stack's defaults the
    run replaced; ``kept``: the user's own settings).

    gloo (CPU) runs use no NCCL: nothing is set. The stack's own defaults (:data:`STACK_NCCL_ENV`) are replaced by
    the capture. A user's own ``NCCL_DEBUG*`` settings win: nothing is set, and their file is read when
    ``NCCL_DEBUG`` is INFO or TRACE and ``NCCL_DEBUG_FILE`` is set.
    """
    if backend != "nccl":
        return {
            "env": {},
            "log": None,
            "note": f"backend {backend}: the collectives do not use NCCL",
            "capture": {"by": "none"},
        }
    stack = stack_nccl_env(environ)
    present = {k: environ[k] for k in DEBUG_KEYS if k in environ}
    replaced = {k: v for k, v in present.items() if stack.get(k) == v}
    user = {k: v for k, v in present.items() if k not in replaced}
    if not user:
        path = os.path.join(log_dir, f"nccl-rank{rank}-{host}-{pid}.log")
        level = "TRACE" if replaced.get("NCCL_DEBUG", "").strip().upper() == "TRACE" else CAPTURE_ENV["NCCL_DEBUG"]
        return {
            "env": {**CAPTURE_ENV, "NCCL_DEBUG": level, "NCCL_DEBUG_FILE": path},
            "log": path,
            "note": None,
            "user": {},
            "capture": {"by": "run", "replaced": replaced},
        }
    capture = {"by": "user", "kept": user}
    shown = " ".join(f"{k}={v}" for k, v in user.items())
    level = user.get("NCCL_DEBUG", replaced.get("NCCL_DEBUG", "")).strip().upper()
    if level in ("INFO", "TRACE") and user.get("NCCL_DEBUG_FILE"):
        return {
            "env": {},
            "log": expand_debug_file(user["NCCL_DEBUG_FILE"], host, pid),
            "note": None,
            "user": user,
            "capture": capture,
        }
    if level in ("INFO", "TRACE"):
        why = "NCCL writes its lines to the job's stdout, which the run does not read"
    else:
        why = (
            f"NCCL_DEBUG is {user.get('NCCL_DEBUG', replaced.get('NCCL_DEBUG', 'unset'))!s}, so NCCL logs no INFO lines"
        )
    return {
        "env": {},
        "log": None,
        "user": user,
        "capture": capture,
        "note": (
            f"your own NCCL logging settings are kept ({shown}): {why}; unset the NCCL_DEBUG* variables "
            "(or add NCCL_DEBUG=INFO NCCL_DEBUG_FILE=/path/nccl.%h.%p.log) for a verdict"
        ),
    }


def capture_text(capture: Optional[Mapping[str, Any]]) -> str:
    """One phrase for the summary: whose NCCL logging settings the run's capture used."""
    capture = capture or {}
    if capture.get("by") == "run":
        rep = capture.get("replaced") or {}
        return ("run (replaced the stack's " + " ".join(f"{k}={v}" for k, v in rep.items()) + ")") if rep else "run"
    if capture.get("by") == "user":
        return "yours (" + " ".join(f"{k}={v}" for k, v in (capture.get("kept") or {}).items()) + ")"
    if capture.get("by") == "mixed":
        return "mixed (" + "; ".join(capture.get("ranks") or []) + ")"
    return str(capture.get("by") or "off")


def merge_captures(captures: list[Mapping[str, Any]]) -> dict:
    """Every rank's ``capture`` as one: the common one, or ``mixed`` listing each distinct one."""
    distinct = list({json.dumps(c, sort_keys=True): dict(c) for c in captures if c}.values())
    if not distinct:
        return {"by": "none"}
    if len(distinct) == 1:
        return distinct[0]
    return {"by": "mixed", "ranks": [capture_text(c) for c in distinct]}


def read_log(path: Optional[str], limit: int = 64 << 20) -> Optional[bytes]:
    """This rank's NCCL log (its first ``limit`` bytes), or None when there is none (yet)."""
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            return f.read(limit)
    except OSError:
        return None


def _efa_bytes(counter_deltas: Optional[Mapping[str, Any]]) -> tuple[Optional[dict], Optional[str]]:
    """Per node {"sent": n, "received": n} over all its EFA devices, or (None, why not)."""
    if not counter_deltas:
        return None, "no node reported EFA counters"
    out: dict[str, dict] = {}
    for node, deltas in sorted(counter_deltas.items()):
        if not deltas:
            continue
        per_dev = efa_counters.node_bytes(deltas)
        sent = [v["sent"] for v in per_dev.values() if v["sent"] is not None]
        recv = [v["received"] for v in per_dev.values() if v["received"] is not None]
        if sent or recv:
            out[node] = {
                "sent": sum(sent) if sent else None,
                "received": sum(recv) if recv else None,
                "devices": len(per_dev),
            }
    if not out:
        return None, f"no EFA device with readable counters under {efa_counters.SYSFS_ROOT} on any node"
    return out, None


def summarize(
    backend: str,
    logs: Mapping[str, Optional[bytes]],
    *,
    notes: Optional[list[str]] = None,
    counter_deltas: Optional[Mapping[str, Any]] = None,
    expected_bytes_per_node: Optional[float] = None,
    previous: Optional[Mapping[str, Any]] = None,
    log_dir: Optional[str] = None,
    at: str = "end",
    capture: Optional[Mapping[str, Any]] = None,
    images: Optional[Mapping[str, Optional[str]]] = None,
) -> dict:
    """The run's ``fabric``: verdict, network, provider, nodes, the deciding line and the reasons.

    backend: the process group's backend (anything but nccl is ``not-nccl``). logs: {source: bytes or None} with
    every rank's NCCL log, judged as one job by the gate's ``nccl_log.analyze_bytes``. notes: why some ranks have no
    log (the user's own settings). counter_deltas: {node: efa_counters.counter_delta(...)} over the run; with
    expected_bytes_per_node (a lower bound of what the collectives had to move per node) an efa log whose counters
    stayed flat becomes fallback, through the gate's ``judge_counters``/``combine``. previous: the verdict kept in
    the checkpoint this attempt resumed from. capture: whose NCCL logging settings applied (:func:`merge_captures`
    of the ranks' :func:`plan_capture`), kept as ``capture`` with its words in ``capture_text``. images: {host:
    image reference} of the ranks, kept as ``image`` (:func:`image_record`: references and, when pinned, the digest).
    """
    fab: dict[str, Any] = {
        "verdict": "undetermined",
        "backend": backend,
        "network": None,
        "provider": None,
        "nodes": None,
        "ranks": len(logs),
        "deciding": None,
        "reasons": [],
        "hints": [],
        "at": at,
        "log_dir": log_dir,
    }
    if capture is not None:
        fab["capture"], fab["capture_text"] = dict(capture), capture_text(capture)
    if images is not None:
        fab["image"] = image_record(images)
    notes = [n for n in (notes or []) if n]
    if backend != "nccl":
        fab.update(
            verdict="not-nccl",
            ranks=None,
            log_dir=None,
            reasons=[
                f"backend {backend}: the collectives do not use NCCL (a CPU run), so no network "
                "carries them that NCCL chose; run with --use-gpu for a fabric verdict"
            ],
        )
    else:
        try:
            rep = nccl_log.analyze_bytes(list(logs.items()))
        except nccl_log.UnreadableInput as e:
            fab["reasons"] = list(dict.fromkeys(notes)) or [
                f"no rank's NCCL log has an NCCL line ({e}): NCCL did not log (yet)"
            ]
        else:
            if counter_deltas and expected_bytes_per_node:
                rep = efa_counters.combine(
                    rep, efa_counters.judge_counters(dict(counter_deltas), expected_bytes_per_node, rep.verdict)
                )
            fab.update(
                verdict=rep.verdict,
                network=rep.network,
                provider=rep.provider,
                nodes=rep.nodes,
                ranks=rep.ranks,
                deciding=rep.evidence[0] if rep.evidence else None,
                reasons=list(rep.reasons) + [n for n in dict.fromkeys(notes) if n not in rep.reasons],
                hints=list(rep.hints),
                evidence=list(rep.evidence),
            )
    efa_bytes, why = _efa_bytes(counter_deltas)
    fab["efa_bytes"] = efa_bytes
    if efa_bytes is None:
        fab["efa_bytes_note"] = why
    if previous and previous.get("verdict"):
        fab["previous"] = {k: previous.get(k) for k in ("verdict", "network", "provider", "nodes", "step")}
    return fab


def image_record(images: Mapping[str, Optional[str]]) -> dict:
    """What the run knows of the image its ranks ran: ``{host: $RAY_EFA_EKS_IMAGE}`` -> the references, and the
    digest when every rank's reference pins the same one. A tag pin leaves ``digest`` None: the digest a pod runs is
    in its Kubernetes status only (the gate's image audit reads it, efacheck/image_fleet.py), not in the pod."""
    refs = sorted({r for r in images.values() if r})
    digests = {m.group(1) if m else None for m in (_DIGEST.search(r) for r in refs)}
    digest = next(iter(digests)) if len(digests) == 1 and refs else None
    out: dict[str, Any] = {"references": refs, "digest": digest}
    if len(refs) > 1:
        out["note"] = "ranks ran different image references: " + "; ".join(
            f"{h}: {r}" for h, r in sorted(images.items()) if r
        )
    elif refs and digest is None:
        out["note"] = "pinned by tag: the run cannot see the digest (the gate's image audit records it)"
    return out


def changed(fab: Mapping[str, Any]) -> Optional[str]:
    """'was efa, now fallback' when the checkpoint this attempt resumed from holds another verdict."""
    prev = fab.get("previous") or {}
    if prev.get("verdict") and prev["verdict"] != fab["verdict"]:
        at = f" (checkpoint of step {prev['step']})" if prev.get("step") is not None else ""
        return f"was {prev['verdict']}{at}, now {fab['verdict']}"
    return None


def line(fab: Mapping[str, Any]) -> str:
    """The ``[fabric]`` log line: verdict, network, provider, nodes, and the deciding line or first reason."""
    parts = [f"[fabric] {fab['verdict']}"]
    if fab["verdict"] != "not-nccl":
        parts.append(
            f"network={fab.get('network')} provider={fab.get('provider')} nodes={fab.get('nodes')} "
            f"ranks={fab.get('ranks')}"
        )
    if fab.get("capture_text") and fab["verdict"] != "not-nccl":
        parts.append(f"capture={fab['capture_text']}")
    moved = changed(fab)
    if moved:
        parts.append(moved)
    if fab.get("efa_bytes"):
        parts.append(
            "efa_bytes "
            + ", ".join(f"{n}: sent {v['sent']} received {v['received']}" for n, v in fab["efa_bytes"].items())
        )
    why = fab.get("deciding") if fab["verdict"] == "efa" else ((fab.get("reasons") or [None])[0] or fab.get("deciding"))
    if why:
        parts.append(f"({why})")
    return " ".join(parts)


def checkpoint_record(fab: Mapping[str, Any], step: int) -> bytes:
    """What rank 0 writes as ``fabric.json`` into a checkpoint."""
    keep = {k: fab.get(k) for k in ("verdict", "backend", "network", "provider", "nodes", "deciding")}
    if fab.get("image"):
        keep["image_digest"] = fab["image"].get("digest")
    return json.dumps({**keep, "step": step}).encode()


def previous_verdict(checkpoint: Any) -> Optional[dict]:
    """The ``fabric.json`` of a ``ray.train.Checkpoint`` (local or s3: read through its own filesystem), or None."""
    if checkpoint is None:
        return None
    try:
        with checkpoint.filesystem.open_input_file(f"{checkpoint.path.rstrip('/')}/{FABRIC_FILE}") as f:
            return json.loads(f.read().decode())
    except Exception:  # noqa: BLE001 - an old checkpoint without the file, or unreadable: no previous verdict
        return None


class Probe:
    """One rank's side: set the capture env before NCCL's first line, read counters, gather to rank 0, judge."""

    def __init__(
        self,
        backend: str,
        rank: int,
        local_rank: int,
        log_dir: Optional[str],
        environ: Optional[dict] = None,
        enabled: bool = True,
    ) -> None:
        self.backend, self.rank, self.local_rank = backend, rank, local_rank
        self.enabled = enabled
        self.host = nccl_hostname()
        env = os.environ if environ is None else environ
        self.plan = (
            plan_capture(backend, env, log_dir or "", rank, self.host, os.getpid())
            if enabled
            else {"env": {}, "log": None, "note": "fabric capture off", "capture": {"by": "off"}}
        )
        self.log_dir = os.path.dirname(self.plan["log"]) if self.plan.get("log") else None
        if self.plan["env"]:
            os.makedirs(log_dir or ".", exist_ok=True)
            env.update(self.plan["env"])  # before NCCL logs its first line (the first collective)
        self.counters_before = self._counters() if enabled else None

    def _counters(self) -> Optional[dict]:
        if self.local_rank != 0:  # one reader per node
            return None
        try:
            if hasattr(efa_counters, "read_view"):  # the node agent's exporter first ($RAY_EFA_EKS_EFA_EXPORTER)
                return efa_counters.read_view()["snapshot"]
            return efa_counters.read_counters()
        except Exception:  # noqa: BLE001 - no efacheck, no sysfs: simply no counters
            return None

    def _payload(self, final: bool) -> dict:
        out: dict[str, Any] = {
            "source": f"{socket.gethostname()}:{self.plan.get('log')}"
            if self.plan.get("log")
            else f"{socket.gethostname()}:rank{self.rank}",
            "log": read_log(self.plan.get("log")),
            "note": self.plan.get("note"),
            "host": socket.gethostname(),
            "capture": self.plan.get("capture"),
            "image": os.environ.get(IMAGE_ENV),
        }
        if final and self.counters_before is not None:
            after = self._counters()
            if after is not None:
                out["counters"] = efa_counters.counter_delta(self.counters_before, after)
        return out

    def judge(
        self,
        dist: Any,
        final: bool,
        previous: Optional[dict] = None,
        expected_bytes_per_node: Optional[float] = None,
        broadcast: bool = False,
    ) -> Optional[dict]:
        """Collective: every rank calls it. Rank 0 gets the ``fabric`` dict (every rank with ``broadcast``)."""
        if not self.enabled:
            return None
        payload = self._payload(final)
        world = dist.get_world_size()
        gathered: Optional[list] = [None] * world if self.rank == 0 else None
        dist.gather_object(payload, gathered, dst=0)
        fab = None
        if self.rank == 0:
            assert gathered is not None
            # every rank is judged: one without a log (a note says why) is silent, never counted as agreeing
            logs = {p["source"]: p["log"] for p in gathered}
            notes = [p["note"] for p in gathered if p["log"] is None and p["note"]]
            deltas = {p["host"]: p["counters"] for p in gathered if p.get("counters") is not None}
            fab = summarize(
                self.backend,
                logs,
                notes=notes,
                counter_deltas=deltas or None,
                expected_bytes_per_node=expected_bytes_per_node,
                previous=previous,
                log_dir=self.log_dir,
                at="end" if final else "init",
                capture=merge_captures([p.get("capture") or {} for p in gathered]),
                images={p["host"]: p.get("image") for p in gathered},
            )
        if broadcast:
            box = [fab]
            dist.broadcast_object_list(box, src=0)
            fab = box[0]
        return fab
