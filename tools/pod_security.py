"""Pod Security Standards checker: ``violations(pod_spec, level)`` for ``baseline`` and ``restricted``.

Every control below is one row of https://kubernetes.io/docs/concepts/security/pod-security-standards/ (the
"Baseline" and "Restricted" tables; the anchor of each row is in its message). The semantics follow the reference
implementation, k8s.io/pod-security-admission ``policy/check_*.go``, at the latest policy version:

- containers means ``containers``, ``initContainers`` and ``ephemeralContainers`` (``visitContainers``);
- a container-level field left unset inherits the pod-level one where the page says so (seccomp, runAsNonRoot,
  runAsUser), and ``restricted`` includes every ``baseline`` control;
- Linux-only restricted controls (privilege escalation, capabilities, seccomp) are skipped for a pod with
  ``spec.os.name: windows``, as the page's "Linux only" notes say.

``pod_spec`` is a Pod ``spec`` dict, or a whole Pod / pod template (``{"metadata": ..., "spec": ...}``): the
AppArmor annotations are read from its metadata. Returns one message per violation (empty list = passes).
"""

from __future__ import annotations

from typing import Any, Iterator

PAGE = "https://kubernetes.io/docs/concepts/security/pod-security-standards/"
LEVELS = ("privileged", "baseline", "restricted")

BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
"""Baseline "Capabilities": the only values allowed in ``capabilities.add``."""
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
"""Baseline "Sysctls": the safe set (the last five since Kubernetes 1.27/1.29)."""
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
"""Baseline "SELinux": allowed ``seLinuxOptions.type`` values (``user`` and ``role`` must be unset)."""
RESTRICTED_VOLUMES = frozenset(
    {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
)
"""Restricted "Volume Types": the only volume sources allowed."""
APPARMOR_TYPES = frozenset({"RuntimeDefault", "Localhost"})
SECCOMP_TYPES = frozenset({"RuntimeDefault", "Localhost"})
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"


def _anchor(level: str, control: str) -> str:
    return f"({PAGE}#{level}, control {control!r})"


def _containers(spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(key) or []


def _sc(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("securityContext") or {}


def _split(pod: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(metadata, spec) of a Pod, a pod template or a bare spec."""
    if isinstance(pod.get("spec"), dict):  # a PodSpec has no "spec" key
        return pod.get("metadata") or {}, pod["spec"]
    return {}, pod


def _baseline(meta: dict[str, Any], spec: dict[str, Any]) -> list[str]:
    out: list[str] = []

    def bad(control: str, what: str) -> None:
        out.append(f"baseline {control}: {what} {_anchor('baseline', control)}")

    psc = _sc(spec)
    cs = list(_containers(spec))
    if (psc.get("windowsOptions") or {}).get("hostProcess"):
        bad("HostProcess", "spec.securityContext.windowsOptions.hostProcess is true")
    for c in cs:
        if (_sc(c).get("windowsOptions") or {}).get("hostProcess"):
            bad("HostProcess", f"container {c['name']!r} windowsOptions.hostProcess is true")
    for ns in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(ns):
            bad("Host Namespaces", f"spec.{ns} is true")
    for c in cs:
        sc = _sc(c)
        if sc.get("privileged"):
            bad("Privileged Containers", f"container {c['name']!r} securityContext.privileged is true")
        added = set((sc.get("capabilities") or {}).get("add") or []) - BASELINE_CAPABILITIES
        if added:
            bad(
                "Capabilities",
                f"container {c['name']!r} adds {sorted(added)} (allowed: {sorted(BASELINE_CAPABILITIES)})",
            )
        for p in c.get("ports") or []:
            if p.get("hostPort"):
                bad("Host Ports", f"container {c['name']!r} hostPort {p['hostPort']}")
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            for handler in ("httpGet", "tcpSocket"):
                if ((c.get(probe) or {}).get(handler) or {}).get("host"):
                    bad("Host Probes / Lifecycle Hooks", f"container {c['name']!r} {probe}.{handler}.host is set")
        for hook in ("postStart", "preStop"):
            for handler in ("httpGet", "tcpSocket"):
                if (((c.get("lifecycle") or {}).get(hook) or {}).get(handler) or {}).get("host"):
                    bad(
                        "Host Probes / Lifecycle Hooks",
                        f"container {c['name']!r} lifecycle.{hook}.{handler}.host is set",
                    )
        if sc.get("procMount") not in (None, "Default"):
            bad("/proc Mount Type", f"container {c['name']!r} procMount is {sc['procMount']!r} (allowed: Default)")
    for v in spec.get("volumes") or []:
        if "hostPath" in v:
            bad("HostPath Volumes", f"volume {v['name']!r} is a hostPath ({v['hostPath'].get('path')})")
    # AppArmor: the field (1.30+) at pod and container level, and the older annotations.
    for where, sc in [("spec.securityContext", psc)] + [(f"container {c['name']!r}", _sc(c)) for c in cs]:
        t = (sc.get("appArmorProfile") or {}).get("type")
        if t is not None and t not in APPARMOR_TYPES:
            bad("AppArmor", f"{where} appArmorProfile.type is {t!r} (allowed: RuntimeDefault, Localhost)")
        sel = sc.get("seLinuxOptions") or {}
        if sel.get("type", "") not in SELINUX_TYPES:
            bad("SELinux", f"{where} seLinuxOptions.type is {sel['type']!r} (allowed: {sorted(SELINUX_TYPES - {''})})")
        for k in ("user", "role"):
            if sel.get(k):
                bad("SELinux", f"{where} seLinuxOptions.{k} is set")
        if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
            bad("Seccomp", f"{where} seccompProfile.type is Unconfined")
    for k, v in (meta.get("annotations") or {}).items():
        if k.startswith(APPARMOR_ANNOTATION) and v != "runtime/default" and not v.startswith("localhost/"):
            bad("AppArmor", f"annotation {k}={v!r} (allowed: runtime/default, localhost/*)")
    for s in psc.get("sysctls") or []:
        if s.get("name") not in SAFE_SYSCTLS:
            bad("Sysctls", f"sysctl {s.get('name')!r} is not in the safe set")
    return out


def _restricted(spec: dict[str, Any]) -> list[str]:
    out: list[str] = []

    def bad(control: str, what: str) -> None:
        out.append(f"restricted {control}: {what} {_anchor('restricted', control)}")

    psc = _sc(spec)
    cs = list(_containers(spec))
    linux = (spec.get("os") or {}).get("name") != "windows"
    for v in spec.get("volumes") or []:
        kinds = set(v) - {"name"}
        if not kinds & RESTRICTED_VOLUMES:
            bad("Volume Types", f"volume {v['name']!r} is {sorted(kinds)} (allowed: {sorted(RESTRICTED_VOLUMES)})")
    pod_nonroot = psc.get("runAsNonRoot")
    if pod_nonroot is False:
        bad("Running as Non-root", "spec.securityContext.runAsNonRoot is false")
    if psc.get("runAsUser") == 0:
        bad("Running as Non-root user", "spec.securityContext.runAsUser is 0")
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type")
    if linux and pod_seccomp is not None and pod_seccomp not in SECCOMP_TYPES:
        bad("Seccomp", f"spec.securityContext.seccompProfile.type is {pod_seccomp!r}")
    for c in cs:
        sc, name = _sc(c), c["name"]
        if linux and sc.get("allowPrivilegeEscalation") is not False:
            bad("Privilege Escalation", f"container {name!r} must set securityContext.allowPrivilegeEscalation: false")
        nonroot = sc.get("runAsNonRoot")
        if nonroot is False or (nonroot is None and pod_nonroot is not True):
            bad("Running as Non-root", f"container {name!r} must set runAsNonRoot: true (or the pod must)")
        if sc.get("runAsUser") == 0:
            bad("Running as Non-root user", f"container {name!r} runAsUser is 0")
        if linux:
            t = (sc.get("seccompProfile") or {}).get("type")
            if t is None and pod_seccomp is None:
                bad("Seccomp", f"container {name!r} has no seccompProfile (nor the pod): set RuntimeDefault")
            elif t is not None and t not in SECCOMP_TYPES:
                bad("Seccomp", f"container {name!r} seccompProfile.type is {t!r}")
            caps = sc.get("capabilities") or {}
            if "ALL" not in (caps.get("drop") or []):
                bad("Capabilities", f"container {name!r} must drop ALL capabilities")
            extra = set(caps.get("add") or []) - {"NET_BIND_SERVICE"}
            if extra:
                bad("Capabilities", f"container {name!r} adds {sorted(extra)} (only NET_BIND_SERVICE is allowed)")
    return out


def violations(pod_spec: dict[str, Any], level: str) -> list[str]:
    """Every way ``pod_spec`` breaks Pod Security ``level`` (``privileged``, ``baseline`` or ``restricted``)."""
    if level not in LEVELS:
        raise ValueError(f"level {level!r}: one of {LEVELS}")
    if level == "privileged":
        return []
    meta, spec = _split(pod_spec)
    out = _baseline(meta, spec)
    if level == "restricted":
        out += _restricted(spec)
    return out
