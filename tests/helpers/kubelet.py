"""Run a rendered pod template's containers as local processes, in the order the kubelet starts them.

Order (Kubernetes docs "Init Containers" and "Sidecar Containers"): init containers one at a time, each to
completion (a non-zero exit fails a ``restartPolicy: Never`` pod, and no later container starts); an init container
with ``restartPolicy: Always`` is a native sidecar: started, the next one starts once it has started (and passed
its ``startupProbe``, if it has one), it keeps running beside the main containers and is stopped (SIGTERM) after
they have all exited. Then the containers, all at once.

What each process gets, from the template: ``command`` + ``args``, ``workingDir``, ``env`` with ``value``,
``fieldRef`` (metadata.name/namespace, spec.nodeName, spec.serviceAccountName), ``secretKeyRef`` and
``configMapKeyRef`` resolved, ``KUBERNETES_SERVICE_HOST``/``PORT`` (the kubelet's service env) pointing at the
rehearsal's API (:mod:`tests.helpers.kubeapi`), and its volumes materialised as files: ``configMap`` (items or every
key), ``secret``, ``emptyDir`` (one directory per pod, shared by its containers), ``projected``
(``serviceAccountToken``: a token the API issued for the pod's ServiceAccount on its node; ``configMap``
``kube-root-ca.crt``: the API's certificate), ``hostPath`` (a directory the rehearsal names for the node).

Mount paths are absolute inside a container; here each pod has a root directory and every mount path, and every
argument, env value or working dir that starts with one, is rewritten under it (``/opt/ray-efa-eks`` becomes
``<root>/opt/ray-efa-eks``). Service DNS names (``*.svc.cluster.local``) are rewritten to the rehearsal's local
addresses by ``aliases``. Not modelled: users and groups (``runAsUser``), capabilities, seccomp, read-only mounts,
resource limits (the scheduler's fit is a separate rule), probes other than an exec ``startupProbe``.
"""

from __future__ import annotations

import base64
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from tests.helpers.kubeapi import KubeApi

BIN = str(Path(sys.executable).parent)
EXECUTED: list[dict[str, Any]] = []
"""Every container a rehearsal started: ``{"template", "container", "init", "exit"}`` (the listing test reads it)."""


def _plain(v: Any) -> str:
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


@dataclass
class Objects:
    """The rendered ConfigMaps and Secrets a pod may reference, by (namespace, name)."""

    config_maps: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    secrets: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)

    @classmethod
    def of(cls, rendered: list[dict[str, Any]], secret_values: dict[str, str] | None = None) -> "Objects":
        """From rendered objects; a Secret's value the mocks leave unresolved (a RandomPassword's result) is
        ``secret_values[key]`` (the rehearsal's own token)."""
        out = cls()
        for o in rendered:
            meta = o.get("metadata") or {}
            key = (meta.get("namespace") or "default", meta.get("name"))
            if o.get("kind") == "ConfigMap":
                out.config_maps[key] = {k: v for k, v in (o.get("data") or {}).items() if isinstance(v, str)}
            elif o.get("kind") == "Secret":
                data = {k: base64.b64decode(v).decode() for k, v in (o.get("data") or {}).items() if isinstance(v, str)}
                data.update({k: v for k, v in (o.get("stringData") or {}).items() if isinstance(v, str)})
                for k, v in (secret_values or {}).items():
                    data.setdefault(k, v)
                out.secrets[key] = data
        return out


class Pod:
    """One pod of a rendered template, run here. ``run()`` for a pod that ends (a Job's), ``start()`` for one that
    runs until stopped (a DaemonSet's); ``phase`` is Succeeded/Failed/Running as the kubelet would report it."""

    def __init__(
        self,
        template_id: str,
        spec: dict[str, Any],
        *,
        name: str,
        namespace: str,
        node: str,
        api: KubeApi,
        objects: Objects,
        root: Path,
        host_paths: dict[str, str] | None = None,
        aliases: dict[str, str] | None = None,
        env: dict[str, str] | None = None,
        rewrite: Callable[[str, list[str]], list[str]] | None = None,
    ):
        self.template_id, self.spec, self.name, self.namespace, self.node = template_id, spec, name, namespace, node
        self.api, self.objects, self.root = api, objects, root
        self.host_paths, self.aliases = host_paths or {}, aliases or {}
        self.base_env = env or {}
        self.rewrite = rewrite or (lambda container, argv: argv)
        """The rehearsal's one licence on a command: shorten a wait (``--wait-s``), named where it is used."""
        self.logs: dict[str, list[str]] = {}
        self.exits: dict[str, int | None] = {}
        self.procs: dict[str, subprocess.Popen] = {}
        self.phase = "Pending"
        self.mounts: dict[str, Path] = {}
        root.mkdir(parents=True, exist_ok=True)
        self._volumes()

    # -- volumes --------------------------------------------------------------------------------------------------
    def _volumes(self) -> None:
        self.volumes: dict[str, Path] = {}
        sa = self.spec.get("serviceAccountName") or "default"
        for v in self.spec.get("volumes") or []:
            d = self.root / "volumes" / v["name"]
            if "hostPath" in v:
                self.volumes[v["name"]] = Path(self.host_paths[v["hostPath"]["path"]])
                continue
            d.mkdir(parents=True, exist_ok=True)
            self.volumes[v["name"]] = d
            if "configMap" in v:
                self._files(
                    d,
                    self.objects.config_maps.get((self.namespace, v["configMap"]["name"]), {}),
                    v["configMap"].get("items"),
                )
            elif "secret" in v:
                self._files(
                    d,
                    self.objects.secrets.get((self.namespace, v["secret"]["secretName"]), {}),
                    v["secret"].get("items"),
                )
            elif "projected" in v:
                for src in v["projected"]["sources"]:
                    if "serviceAccountToken" in src:
                        (d / src["serviceAccountToken"]["path"]).write_text(
                            self.api.issue_token(self.namespace, sa, self.node)
                        )
                    elif "configMap" in src and src["configMap"]["name"] == "kube-root-ca.crt":
                        for item in src["configMap"].get("items") or [{"key": "ca.crt", "path": "ca.crt"}]:
                            (d / item["path"]).write_text(self.api.ca.read_text())
                    elif "configMap" in src:
                        self._files(
                            d,
                            self.objects.config_maps.get((self.namespace, src["configMap"]["name"]), {}),
                            src["configMap"].get("items"),
                        )

    @staticmethod
    def _files(d: Path, data: dict[str, str], items: list[dict[str, str]] | None) -> None:
        for item in items or [{"key": k, "path": k} for k in data]:
            p = d / item["path"]
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(data[item["key"]])

    def _mounts(self, c: dict[str, Any]) -> dict[str, Path]:
        """mountPath -> where it is here: ``<root>/fs/<container>/<mountPath>``, a symlink to the volume, so a
        container sees only its own mounts."""
        out: dict[str, Path] = {}
        for m in c.get("volumeMounts") or []:
            here = self.root / "fs" / c["name"] / m["mountPath"].lstrip("/")
            here.parent.mkdir(parents=True, exist_ok=True)
            if not here.exists():
                here.symlink_to(self.volumes[m["name"]], target_is_directory=True)
            out[m["mountPath"]] = here
        return out

    def _remap(self, text: str, mounts: dict[str, Path]) -> str:
        """Every absolute path under a mount path or one of its parents (two levels deep or more:
        ``/opt/ray-efa-eks``) moved under the container's root; the aliases replaced; one pass."""
        if not mounts and not self.aliases:
            return text
        croot = str(next(iter(mounts.values())))[: -len(next(iter(mounts)))] if mounts else ""
        prefixes: dict[str, str] = {}
        for m in mounts:
            parts = m.strip("/").split("/")
            for i in range(2 if len(parts) > 1 else 1, len(parts) + 1):
                path = "/" + "/".join(parts[:i])
                prefixes[path] = croot + path
        prefixes.update(self.aliases)
        pattern = re.compile(
            r"(?<![\w.-])(" + "|".join(re.escape(k) for k in sorted(prefixes, key=len, reverse=True)) + r")(?![\w.-])"
        )
        return pattern.sub(lambda m: prefixes[m.group(1)], text)

    # -- env ------------------------------------------------------------------------------------------------------
    def _env(self, c: dict[str, Any], mounts: dict[str, Path]) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "KUBERNETES_", "PYTHONPATH"))}
        env.update(self.base_env)
        env.update(
            PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
            KUBERNETES_SERVICE_HOST="127.0.0.1",
            KUBERNETES_SERVICE_PORT=str(self.api.port),
            HOSTNAME=self.name,
        )
        if "PATH_PREFIX" in env:  # the node's own tools (a stand-in fi_info) first
            env["PATH"] = env.pop("PATH_PREFIX") + os.pathsep + env["PATH"]
        fields = {
            "metadata.name": self.name,
            "metadata.namespace": self.namespace,
            "spec.nodeName": self.node,
            "spec.serviceAccountName": self.spec.get("serviceAccountName") or "default",
        }
        for e in c.get("env") or []:
            if "value" in e:
                env[e["name"]] = self._remap(_plain(e["value"]), mounts)
                continue
            ref = e.get("valueFrom") or {}
            if "fieldRef" in ref:
                env[e["name"]] = fields[ref["fieldRef"]["fieldPath"]]
            elif "secretKeyRef" in ref:
                s = ref["secretKeyRef"]
                env[e["name"]] = self.objects.secrets[(self.namespace, s["name"])][s["key"]]
            elif "configMapKeyRef" in ref:
                s = ref["configMapKeyRef"]
                env[e["name"]] = self.objects.config_maps[(self.namespace, s["name"])][s["key"]]
        return env

    # -- running --------------------------------------------------------------------------------------------------
    def _start(self, c: dict[str, Any], init: bool) -> subprocess.Popen:
        mounts = self._mounts(c)
        argv = [self._remap(_plain(a), mounts) for a in list(c.get("command") or []) + list(c.get("args") or [])]
        argv = self.rewrite(c["name"], argv)
        cwd = self._remap(c.get("workingDir") or str(self.root), mounts)
        env = self._env(c, mounts)
        record = {
            "template": self.template_id,
            "container": c["name"],
            "init": init,
            "exit": None,
            "argv": argv,
            "env": {e["name"]: env.get(e["name"]) for e in c.get("env") or []},
        }
        EXECUTED.append(record)
        p = subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        self.procs[c["name"]] = p
        self.logs[c["name"]] = []

        def pump() -> None:
            for ln in p.stdout:
                self.logs[c["name"]].append(ln)
            self.exits[c["name"]] = p.wait()
            record["exit"] = self.exits[c["name"]]

        threading.Thread(target=pump, daemon=True).start()
        return p

    def _startup_probe(self, c: dict[str, Any], deadline: float) -> bool:
        probe = c.get("startupProbe")
        if not probe:
            return True
        mounts = self._mounts(c)
        argv = [self._remap(_plain(a), mounts) for a in probe["exec"]["command"]]
        period = float(probe.get("periodSeconds", 10))
        tries = int(float(probe.get("failureThreshold", 3)))
        end = time.monotonic() + min(period * tries, deadline)
        while time.monotonic() < end:
            if subprocess.run(argv, env=self._env(c, mounts), capture_output=True).returncode == 0:
                return True
            if self.procs[c["name"]].poll() is not None:
                return False
            time.sleep(min(period, 0.5))
        return False

    def start(self, startup_deadline_s: float = 60) -> "Pod":
        """Init containers in order (sidecars left running), then every container; returns once the containers
        have started, or the pod has failed in its init containers."""
        self.phase = "Pending"
        for c in self.spec.get("initContainers") or []:
            p = self._start(c, init=True)
            if c.get("restartPolicy") == "Always":
                if not self._startup_probe(c, startup_deadline_s):
                    self.phase = "Failed"
                    return self
                continue
            rc = p.wait()
            time.sleep(0.05)  # the pump thread reads the last lines
            if rc != 0:
                self.phase = "Failed"
                self.stop()
                return self
        for c in self.spec["containers"]:
            self._start(c, init=False)
        self.phase = "Running"
        return self

    def wait(self, timeout: float) -> str:
        """Until every (main) container has exited: Succeeded when all exited 0; sidecars are stopped then."""
        if self.phase != "Running":
            return self.phase
        end = time.monotonic() + timeout
        mains = [c["name"] for c in self.spec["containers"]]
        for name in mains:
            try:
                self.procs[name].wait(max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.stop()
                raise AssertionError(
                    f"pod {self.name}: {name} still running after {timeout} s: " + "".join(self.logs[name][-40:])
                )
        time.sleep(0.1)
        self.phase = "Succeeded" if all(self.procs[n].returncode == 0 for n in mains) else "Failed"
        self.stop()
        return self.phase

    def stop(self) -> None:
        """SIGTERM to what still runs (the kubelet, at the end of a Job pod or on deletion), SIGKILL after 10 s."""
        for name, p in self.procs.items():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for name, p in self.procs.items():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(5)

    def log(self, container: str) -> str:
        return "".join(self.logs.get(container, []))

    def describe(self) -> str:
        return "\n".join(
            f"--- {n} (exit {self.exits.get(n)}):\n" + "".join(lines[-30:]) for n, lines in self.logs.items()
        )
