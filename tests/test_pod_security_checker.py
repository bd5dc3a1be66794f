"""tests/helpers/pod_security.py against the Pod Security Standards page, row by row.

https://kubernetes.io/docs/concepts/security/pod-security-standards/ : for every control of the Baseline and
Restricted tables, one value the page lists as allowed passes and one it does not list fails, naming that control;
the page's "default (minimally specified) Pod" passes baseline and fails restricted on exactly the restricted
controls the page says it must set. The checker must be able to fail, or the Ray pods' tests prove nothing.
"""

from __future__ import annotations

import copy

import pytest

from tests.helpers.pod_security import violations

MINIMAL = {"containers": [{"name": "app", "image": "busybox"}]}
"""The Baseline row's "default (minimally specified) Pod configuration"."""

RESTRICTED_OK = {
    "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
    "containers": [
        {
            "name": "app",
            "image": "busybox",
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        }
    ],
    "volumes": [{"name": "v", "emptyDir": {}}, {"name": "c", "configMap": {"name": "x"}}],
}
"""What the Restricted table asks for: non-root, RuntimeDefault seccomp, no escalation, drop ALL, core volumes."""


def with_(base: dict, path: str, value) -> dict:
    """A copy of ``base`` with ``value`` set at a dotted ``path`` (``containers.0.securityContext.privileged``)."""
    out = copy.deepcopy(base)
    node = out
    keys = path.split(".")
    for k in keys[:-1]:
        k2 = int(k) if k.isdigit() else k
        if isinstance(node, list):
            node = node[k2]
        else:
            node = node.setdefault(k2, {})
    node[keys[-1]] = value
    return out


def controls(found: list[str]) -> set[str]:
    return {m.split(":", 1)[0] for m in found}


def test_minimal_pod_passes_baseline_and_fails_restricted_on_its_asks():
    assert violations(MINIMAL, "baseline") == []
    assert controls(violations(MINIMAL, "restricted")) == {
        "restricted Privilege Escalation",
        "restricted Running as Non-root",
        "restricted Seccomp",
        "restricted Capabilities",
    }


def test_restricted_example_passes_both_levels_and_privileged_allows_everything():
    assert violations(RESTRICTED_OK, "restricted") == []
    assert violations(RESTRICTED_OK, "baseline") == []
    assert violations(with_(MINIMAL, "hostNetwork", True), "privileged") == []
    with pytest.raises(ValueError, match="level 'strict'"):
        violations(MINIMAL, "strict")


BASELINE_ROWS = [
    # (control, path, forbidden value, allowed value)
    ("HostProcess", "securityContext.windowsOptions.hostProcess", True, False),
    ("HostProcess", "containers.0.securityContext.windowsOptions.hostProcess", True, False),
    ("Host Namespaces", "hostNetwork", True, False),
    ("Host Namespaces", "hostPID", True, False),
    ("Host Namespaces", "hostIPC", True, False),
    ("Privileged Containers", "containers.0.securityContext.privileged", True, False),
    ("Capabilities", "containers.0.securityContext.capabilities.add", ["SYS_ADMIN"], ["NET_BIND_SERVICE", "CHOWN"]),
    ("Capabilities", "containers.0.securityContext.capabilities.add", ["NET_RAW"], ["AUDIT_WRITE"]),
    ("HostPath Volumes", "volumes", [{"name": "h", "hostPath": {"path": "/sys"}}], [{"name": "e", "emptyDir": {}}]),
    ("Host Ports", "containers.0.ports", [{"containerPort": 80, "hostPort": 80}], [{"containerPort": 80}]),
    (
        "Host Probes / Lifecycle Hooks",
        "containers.0.livenessProbe",
        {"httpGet": {"host": "10.0.0.1", "port": 80}},
        {"httpGet": {"port": 80}},
    ),
    (
        "Host Probes / Lifecycle Hooks",
        "containers.0.lifecycle",
        {"preStop": {"tcpSocket": {"host": "1.2.3.4", "port": 1}}},
        {"preStop": {"exec": {"command": ["true"]}}},
    ),
    ("AppArmor", "securityContext.appArmorProfile", {"type": "Unconfined"}, {"type": "RuntimeDefault"}),
    (
        "AppArmor",
        "containers.0.securityContext.appArmorProfile",
        {"type": "Unconfined"},
        {"type": "Localhost", "localhostProfile": "p"},
    ),
    (
        "AppArmor",
        "metadata.annotations",
        {"container.apparmor.security.beta.kubernetes.io/app": "unconfined"},
        {"container.apparmor.security.beta.kubernetes.io/app": "runtime/default"},
    ),
    ("SELinux", "securityContext.seLinuxOptions", {"type": "spc_t"}, {"type": "container_t"}),
    ("SELinux", "containers.0.securityContext.seLinuxOptions", {"user": "system_u"}, {"level": "s0:c123,c456"}),
    ("/proc Mount Type", "containers.0.securityContext.procMount", "Unmasked", "Default"),
    ("Seccomp", "securityContext.seccompProfile", {"type": "Unconfined"}, {"type": "RuntimeDefault"}),
    (
        "Seccomp",
        "containers.0.securityContext.seccompProfile",
        {"type": "Unconfined"},
        {"type": "Localhost", "localhostProfile": "p"},
    ),
    (
        "Sysctls",
        "securityContext.sysctls",
        [{"name": "kernel.msgmax", "value": "1"}],
        [{"name": "net.ipv4.ip_local_port_range", "value": "1024 65535"}],
    ),
]


@pytest.mark.parametrize("control,path,bad,good", BASELINE_ROWS, ids=[f"{r[0]}-{r[1]}" for r in BASELINE_ROWS])
def test_every_baseline_row(control, path, bad, good):
    pod = {"metadata": {}, "spec": MINIMAL}
    full = lambda p: p if p.startswith("metadata") else "spec." + p  # noqa: E731
    assert controls(violations(with_(pod, full(path), bad), "baseline")) == {f"baseline {control}"}
    assert violations(with_(pod, full(path), good), "baseline") == []
    # everything in baseline is in restricted
    assert f"baseline {control}" in controls(violations(with_(pod, full(path), bad), "restricted"))


def test_init_and_ephemeral_containers_are_checked_too():
    for key in ("initContainers", "ephemeralContainers"):
        pod = with_(MINIMAL, key, [{"name": "x", "image": "i", "securityContext": {"privileged": True}}])
        assert controls(violations(pod, "baseline")) == {"baseline Privileged Containers"}
        assert "'x'" in violations(pod, "baseline")[0]


RESTRICTED_ROWS = [
    (
        "Volume Types",
        "volumes",
        [{"name": "n", "nfs": {"server": "s", "path": "/"}}],
        [
            {"name": "p", "persistentVolumeClaim": {"claimName": "c"}},
            {"name": "d", "downwardAPI": {}},
            {"name": "s", "secret": {"secretName": "s"}},
            {"name": "pr", "projected": {"sources": []}},
            {"name": "eph", "ephemeral": {}},
            {"name": "csi", "csi": {"driver": "d"}},
        ],
    ),
    ("Privilege Escalation", "containers.0.securityContext.allowPrivilegeEscalation", True, False),
    ("Running as Non-root", "securityContext.runAsNonRoot", False, True),
    ("Running as Non-root", "containers.0.securityContext.runAsNonRoot", False, True),
    ("Running as Non-root user", "securityContext.runAsUser", 0, 1000),
    ("Running as Non-root user", "containers.0.securityContext.runAsUser", 0, 65534),
    ("Seccomp", "securityContext.seccompProfile", {}, {"type": "Localhost", "localhostProfile": "p"}),
    (
        "Capabilities",
        "containers.0.securityContext.capabilities",
        {"drop": ["NET_RAW"]},
        {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
    ),
    (
        "Capabilities",
        "containers.0.securityContext.capabilities",
        {"drop": ["ALL"], "add": ["CHOWN"]},
        {"drop": ["ALL"]},
    ),
]


@pytest.mark.parametrize("control,path,bad,good", RESTRICTED_ROWS, ids=[f"{r[0]}-{r[1]}" for r in RESTRICTED_ROWS])
def test_every_restricted_row(control, path, bad, good):
    found = violations(with_(RESTRICTED_OK, path, bad), "restricted")
    assert f"restricted {control}" in controls(found), found
    assert violations(with_(RESTRICTED_OK, path, good), "restricted") == []


def test_container_level_fields_may_carry_what_the_pod_does_not():
    """The page's container-level alternatives: runAsNonRoot/seccomp on every container instead of the pod."""
    pod = copy.deepcopy(RESTRICTED_OK)
    pod["securityContext"] = {}
    pod["containers"][0]["securityContext"].update(runAsNonRoot=True, seccompProfile={"type": "RuntimeDefault"})
    assert violations(pod, "restricted") == []
    pod["containers"].append(
        {
            "name": "second",
            "image": "i",
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        }
    )
    assert controls(violations(pod, "restricted")) == {"restricted Running as Non-root", "restricted Seccomp"}


def test_windows_pods_skip_the_linux_only_controls():
    pod = with_(MINIMAL, "os", {"name": "windows"})
    pod["securityContext"] = {"runAsNonRoot": True}
    assert violations(pod, "restricted") == []


def test_messages_cite_the_page():
    (msg,) = violations(with_(MINIMAL, "hostPID", True), "baseline")
    assert "kubernetes.io/docs/concepts/security/pod-security-standards/#baseline" in msg and "hostPID" in msg
