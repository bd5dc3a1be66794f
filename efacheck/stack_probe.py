"""What each rank really loaded, compared across ranks and with the image's manifest.

The DLC's promise is that CUDA, NCCL, aws-ofi-nccl, libfabric, PyTorch and Ray were tested as one unit; drift in
any layer (a node with another driver, a pip install that pulled another torch, a plugin from the host) breaks it
quietly. Every rank calls ``probe`` after its first NCCL collective (so the NCCL log has the version lines) and the
driver calls ``compare_versions``: ranks that disagree with each other fail; a mismatch with the manifest warns, or
fails with ``strict``.

Sources, most direct first: NCCL from ``torch.cuda.nccl.version()`` and the ``NCCL version`` log line;
aws-ofi-nccl and libfabric from the plugin's ``NET/OFI Initializing aws-ofi-nccl X`` / ``NET/OFI Using Libfabric
version X`` lines, else ``fi_info --version``; CUDA runtime from ``$CUDA_VERSION`` (set by NVIDIA's base images,
full x.y.z), else ``/usr/local/cuda/version.json``, else torch's build (x.y); driver from
``/proc/driver/nvidia/version`` and the NCCL ``cudaDriverVersion`` line; the image from ``$IMAGE_ENV``.
What drifts most on a node, below the image: the EFA kernel driver (``/sys/module/efa/version`` in the pod's own
sysfs: kernel modules are not namespaced, so a pod sees its node's module there; Ray pods mount no host path, and
when the file is missing the probe says so instead of guessing: the module is not loaded, or the pod has no /sys),
the net plugin file NCCL really loaded (its ``Successfully loaded external network plugin <path>`` line,
``src/plugin/net.cc``; NCCL 2.27 prints ``Successfully loaded external plugin <name>``), and pyarrow, Ray Train's
S3 layer (``pyarrow.__version__``; apache/arrow#45603: older AWS SDKs in pyarrow cannot use EKS Pod Identity).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
from typing import Any, Callable

IMAGE_ENV = "RAY_EFA_EKS_IMAGE"
"""Env var the Job and the Ray pods set to the image reference they run (the stack's ``dlcImage``)."""

MANIFESTS: dict[str, dict[str, str]] = {
    "train-ml-cuda-v1.1": {"ray": "2.58.0", "torch": "2.13.0", "cuda": "13.0.2", "nccl": "2.29.7"},
}
"""Versions each DLC tag was released with (AWS DLC release notes), keyed by image tag."""

KEYS = (
    "torch",
    "cuda",
    "driver",
    "efa_driver",
    "nccl",
    "net_plugin",
    "aws_ofi_nccl",
    "libfabric",
    "ray",
    "pyarrow",
    "image",
)
"""Versions table rows, in order."""

_NCCL_RE = re.compile(r"NCCL version (\d+\.\d+\.\d+)")
_OFI_RE = re.compile(r"NET/OFI (?:Initializing|Using) aws-ofi-nccl (\d+\.\d+\.\d+[\w.-]*)")
_FABRIC_RE = re.compile(r"NET/OFI Using Libfabric version (\d+\.\d+(?:\.\d+)?)")
_DRIVER_API_RE = re.compile(r"cudaDriverVersion (\d+)")
_PLUGIN_RE = re.compile(r"Successfully loaded external (?:network )?plugin (\S+)")
EFA_DRIVER_FILE = "sys/module/efa/version"
"""The EFA kernel driver's version, relative to the probe's root: the pod's own sysfs, which shows the node's modules
(``/sys/module`` is not namespaced). Nothing mounts the host's /sys into Ray pods (components/ray/raycluster.py)."""
_NVRM_RE = re.compile(r"Kernel Module(?: for \w+)?\s+(\d+\.\d+(?:\.\d+)?)")


def _api(v: int) -> str:
    """CUDA's integer version (12080) as text (12.8)."""
    return f"{v // 1000}.{v % 1000 // 10}"


def parse_nccl_log(text: str) -> dict[str, str]:
    """Versions an NCCL_DEBUG=INFO log states: ``nccl``, ``aws_ofi_nccl``, ``libfabric``, ``driver_api`` (the CUDA
    level the driver supports), ``net_plugin`` (the net plugin file NCCL loaded). Keys are absent when the log does
    not say (Socket runs have no OFI lines)."""
    out = {}
    m = _PLUGIN_RE.search(text)
    if m:
        out["net_plugin"] = m.group(1)
    for key, rx in (("nccl", _NCCL_RE), ("aws_ofi_nccl", _OFI_RE), ("libfabric", _FABRIC_RE)):
        m = rx.search(text)
        if m:
            out[key] = m.group(1)
    m = _DRIVER_API_RE.search(text)
    if m:
        out["driver_api"] = _api(int(m.group(1)))
    return out


def parse_fi_info_version(text: str) -> str | None:
    """``fi_info --version`` prints ``libfabric: 2.1.0amzn3.0``: the version, without AWS's build suffix."""
    m = re.search(r"^libfabric:\s*(\d+\.\d+(?:\.\d+)?)", text, re.M)
    return m.group(1) if m else None


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def _run(argv: list[str]) -> str | None:
    exe = shutil.which(argv[0])
    if not exe:
        return None
    try:
        r = subprocess.run([exe, *argv[1:]], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout if r.returncode == 0 else None


def probe(
    nccl_log: str = "",
    env: dict[str, str] | None = None,
    root: str = "/",
    run: Callable[[list[str]], str | None] = _run,
) -> dict[str, Any]:
    """This rank's versions (``KEYS``; None where unknown) and ``sources`` saying where each came from.

    Args:
        nccl_log: this rank's NCCL_DEBUG=INFO output so far ("" on gloo).
        env: the process environment (default ``os.environ``).
        root: filesystem root for /proc and /usr/local/cuda (tests point it at a fixture tree).
        run: runs a command, returns stdout or None (``fi_info --version``).
    """
    env = dict(os.environ if env is None else env)
    v: dict[str, Any] = {k: None for k in KEYS}
    src: dict[str, str] = {}
    try:
        import torch

        v["torch"], src["torch"] = torch.__version__, "torch.__version__"
        if torch.cuda.is_available() and torch.distributed.is_nccl_available():
            v["nccl"], src["nccl"] = ".".join(map(str, torch.cuda.nccl.version())), "torch.cuda.nccl.version()"
        if torch.version.cuda:
            v["cuda"], src["cuda"] = torch.version.cuda, "torch.version.cuda (build)"
    except ImportError:
        pass
    vj = _read(os.path.join(root, "usr/local/cuda/version.json"))
    if vj:
        try:
            v["cuda"], src["cuda"] = json.loads(vj)["cuda"]["version"], "/usr/local/cuda/version.json"
        except (ValueError, KeyError, TypeError):
            pass
    if env.get("CUDA_VERSION"):
        v["cuda"], src["cuda"] = env["CUDA_VERSION"], "$CUDA_VERSION"
    log = parse_nccl_log(nccl_log)
    if log.get("nccl"):
        if v["nccl"] and v["nccl"] != log["nccl"]:
            src["nccl"] = f"torch.cuda.nccl.version() {v['nccl']} but the NCCL log says {log['nccl']}"
            v["nccl"] = log["nccl"]  # the library NCCL really loaded (LD_PRELOAD / system libnccl)
        elif not v["nccl"]:
            v["nccl"], src["nccl"] = log["nccl"], "NCCL log"
    nvrm = _read(os.path.join(root, "proc/driver/nvidia/version"))
    m = _NVRM_RE.search(nvrm or "")
    if m:
        v["driver"], src["driver"] = m.group(1), "/proc/driver/nvidia/version"
    elif log.get("driver_api"):
        v["driver"], src["driver"] = f"CUDA {log['driver_api']}", "NCCL log cudaDriverVersion"
    for key in ("aws_ofi_nccl", "libfabric"):
        if log.get(key):
            v[key], src[key] = log[key], "NCCL log (NET/OFI)"
    if log.get("net_plugin"):
        v["net_plugin"], src["net_plugin"] = log["net_plugin"], "NCCL log (Successfully loaded external ... plugin)"
    text = _read(os.path.join(root, EFA_DRIVER_FILE))
    if text and text.strip():
        v["efa_driver"], src["efa_driver"] = text.strip(), f"/{EFA_DRIVER_FILE} (the node's module, seen from the pod)"
    else:
        src["efa_driver"] = (
            f"not visible: no /{EFA_DRIVER_FILE} in this pod (the efa module is not loaded on the "
            "node, or the pod has no /sys)"
        )
    try:
        import pyarrow

        v["pyarrow"], src["pyarrow"] = pyarrow.__version__, "pyarrow.__version__"
    except ImportError:
        pass
    if not v["libfabric"]:
        fi = parse_fi_info_version(run(["fi_info", "--version"]) or "")
        if fi:
            v["libfabric"], src["libfabric"] = fi, "fi_info --version"
    try:
        import ray

        v["ray"], src["ray"] = ray.__version__, "ray.__version__"
    except ImportError:
        pass
    if env.get(IMAGE_ENV):
        v["image"], src["image"] = env[IMAGE_ENV], f"${IMAGE_ENV}"
    return {**v, "host": socket.gethostname(), "sources": src}


def manifest_for(image: str | None) -> dict[str, str] | None:
    """The manifest of ``image``'s tag (``...ray:train-ml-cuda-v1.1`` -> MANIFESTS entry), or None."""
    if not image:
        return None
    tag = image.rsplit("/", 1)[-1].split("@", 1)[0].partition(":")[2]
    return MANIFESTS.get(tag)


def parse_manifest(text: str) -> dict[str, str]:
    """``--manifest '{"ray": "2.58.0", ...}'`` (the stack's image manifest) -> dict; ValueError naming the bad part."""
    try:
        m = json.loads(text)
    except ValueError as e:
        raise ValueError(
            f"--manifest {text!r}: not JSON ({e}); e.g. '{json.dumps(MANIFESTS['train-ml-cuda-v1.1'])}'"
        ) from None
    if not isinstance(m, dict):
        raise ValueError(f"--manifest {text!r}: must be a JSON object of layer -> version")
    bad = sorted(k for k in m if k not in KEYS or not isinstance(m[k], str))
    if bad:
        raise ValueError(
            f"--manifest: {bad[0]!r} is not a known layer with a string version; layers: {', '.join(KEYS)}"
        )
    return m


def _parts(v: str) -> list[str]:
    """Release parts of a version: '2.13.0+cu130' -> ['2', '13', '0']; '2.1.0amzn3.0' -> ['2', '1', '0']."""
    return re.findall(r"\d+", re.split(r"[+a-zA-Z-]", v.strip(), maxsplit=1)[0])


def version_matches(want: str, got: str) -> bool:
    """Equal as far as both are precise: '13.0' (torch's build) matches '13.0.2'; '2.13.0+cu130' matches '2.13.0'."""
    a, b = _parts(want), _parts(got)
    n = min(len(a), len(b))
    return n > 0 and a[:n] == b[:n]


def _ranks(idx: list[int]) -> str:
    """[0,1,2,5] -> '0-2,5'."""
    out, start = [], None
    for i, r in enumerate(idx):
        if start is None:
            start = r
        if i + 1 == len(idx) or idx[i + 1] != r + 1:
            out.append(f"{start}" if start == r else f"{start}-{r}")
            start = None
    return ",".join(out)


def compare_versions(
    probes: list[dict[str, Any]], manifest: dict[str, str] | None = None, strict: bool = False
) -> dict[str, Any]:
    """Judge every rank's ``probe`` (list index = rank).

    Returns ``status`` ("ok" | "warning" | "failure"), ``reasons``, and ``table``: one row per ``KEYS`` entry with
    ``key``, ``expected`` (manifest or None), ``values`` ({version: "ranks"}) and ``status``. Ranks that disagree on
    any key are a failure; a manifest mismatch is a warning, a failure when ``strict``."""
    reasons_fail: list[str] = []
    reasons_warn: list[str] = []
    table = []
    manifest = manifest or {}
    for key in KEYS:
        by_val: dict[str, list[int]] = {}
        for rank, p in enumerate(probes):
            by_val.setdefault(str(p.get(key)), []).append(rank)
        values = {val: _ranks(rs) for val, rs in by_val.items()}
        status = "ok"
        known = [v for v in by_val if v != "None"]
        if len(by_val) > 1:
            status = "failure"
            hosts = {val: sorted({str(probes[r].get("host")) for r in rs}) for val, rs in by_val.items()}
            reasons_fail.append(
                f"ranks disagree on {key}: "
                + "; ".join(f"{val} on ranks {values[val]} ({', '.join(hosts[val])})" for val in by_val)
            )
        want = manifest.get(key)
        if not known:
            status = "unknown"  # no rank could tell (e.g. NCCL on a CPU run): reported, not judged
        elif want and status == "ok":
            if not version_matches(want, known[0]):
                status = "failure" if strict else "warning"
                (reasons_fail if strict else reasons_warn).append(
                    f"{key} {known[0]} differs from the image manifest's {want}"
                    + ("" if strict else " (a warning; --strict-versions makes it a failure)")
                )
        table.append({"key": key, "expected": want, "values": values, "status": status})
    overall = "failure" if reasons_fail else "warning" if reasons_warn else "ok"
    return {"status": overall, "reasons": reasons_fail + reasons_warn, "table": table, "strict": strict}
